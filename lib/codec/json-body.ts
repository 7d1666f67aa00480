/**
 * The JSON view of a message body (wire.md 3): an amqp-value string holding JSON text, an
 * amqp-value map, or data section(s) with content-type application/json. Also the raw pieces
 * a delta merge splices (delta-merge.ts): the sections of an encoded message, the
 * members of a JSON object text, and the entries of an encoded AMQP map, each as the exact
 * text or bytes it was sent with, so what a delta does not touch keeps its encoding.
 */
import { isUtf8 } from 'node:buffer';
import { parse as parseLossless, stringify as stringifyLossless, isInteger, isSafeNumber } from 'lossless-json';
import { amqpTypes } from './amqp.js';

export type JsonResult = { ok: true; value: unknown } | { ok: false; reason: string };

/**
 * Deepest nesting (objects and arrays) a SOW queue accepts in a JSON body (docs/sow.md,
 * "What a publish must hold"). The same as the protocol layer's limit on nested AMQP values
 * (256 lists/maps, lib/core/protocol): a JSON-text delta merged into a map record becomes AMQP
 * maps and lists as deep as the JSON, and a record the broker could not decode again (a client
 * republishing it, a bridge) must not be stored. The broker walks bodies with recursive code
 * (rhea's decoder overflows the default stack at about 1,800 levels, its encoder, the JSON view
 * below), so 256 keeps every walk far from the stack's end; and it is beyond what JSON
 * producers emit by default (System.Text.Json stops at 64, serde_json at 128).
 */
export const MAX_JSON_DEPTH = 256;

const TOO_DEEP = Symbol('too-deep');

function plain(v: unknown, depth: number, max: number): unknown {
  if (v === null || v === undefined) return null;
  if (typeof v === 'bigint') return Number(v);
  if (Buffer.isBuffer(v)) return v.toString('base64');
  if (v instanceof Date) return v.getTime();
  if (Array.isArray(v)) {
    if (depth >= max) throw TOO_DEEP;
    return v.map((x) => plain(x, depth + 1, max));
  }
  if (typeof v === 'object') {
    const anyv = v as any;
    if (anyv.typecode !== undefined && anyv.content !== undefined) return plain(anyv.content, depth, max);
    if (depth >= max) throw TOO_DEEP;
    const o: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) o[k] = plain(x, depth + 1, max);
    return o;
  }
  return v;
}

/**
 * True when JSON text nests objects/arrays deeper than `max`. Linear and without recursion
 * (a hostile body can be 200k levels deep); text shorter than `max` cannot be.
 */
export function jsonTooDeep(text: string, max: number): boolean {
  if (text.length <= max) return false;
  let depth = 0;
  for (let i = 0, n = text.length; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) { // a string: skip to its closing quote
      for (i++; i < n; i++) { const d = text.charCodeAt(i); if (d === 0x5c) i++; else if (d === 0x22) break; }
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return false;
}

const tooDeep = (max: number): JsonResult => ({ ok: false, reason: `JSON nested too deeply (more than ${max} levels of objects and arrays)` });

/**
 * A JSON number as the body wrote it: an integer beyond 2^53 as an exact bigint (so that two
 * such ids stay two SOW keys, and a filter's exact literal can match one), else a number as
 * JSON.parse gives it.
 */
function exactNumber(text: string): number | bigint {
  return isInteger(text) && !isSafeNumber(text) && text.length <= MAX_EXACT_DIGITS ? BigInt(text) : parseFloat(text);
}

/**
 * Longest integer text kept exact. BigInt(text) and its toString are super-linear in the digits:
 * one publish of a 12M-digit integer held the broker 3.2 s, and every filter reading it again
 * (session 22). Longer ones read as JSON.parse reads them (a double, or Infinity).
 */
const MAX_EXACT_DIGITS = 1000;

/**
 * True when a parsed JSON value holds a number of magnitude 2^53 or more: an integer JSON.parse
 * may have rounded (every double that large is an integer). Past 256 levels it answers true
 * (without walking on: the stack is finite), and the lossless parse decides.
 */
function mayHoldRoundedInteger(v: unknown, depth = 0): boolean {
  if (typeof v === 'number') return v >= 9007199254740992 || v <= -9007199254740992;
  if (typeof v !== 'object' || v === null) return false;
  if (depth > 256) return true;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) if (mayHoldRoundedInteger(v[i], depth + 1)) return true;
    return false;
  }
  for (const k in v) if (mayHoldRoundedInteger((v as Record<string, unknown>)[k], depth + 1)) return true;
  return false;
}

function parseText(text: string, what: string, maxDepth: number | undefined): JsonResult {
  if (maxDepth !== undefined && jsonTooDeep(text, maxDepth)) return tooDeep(maxDepth);
  let value: unknown;
  try { value = JSON.parse(text); }
  catch (e) { return { ok: false, reason: what + (e as Error).message }; }
  // JSON.parse first (fast); only a value holding a number at or past 2^53 is parsed again
  // with lossless-json, which keeps unsafe integers exact (Node 20's JSON.parse cannot show a
  // reviver the source). It refuses a repeated member name, which JSON.parse takes (the last
  // one wins): such a text keeps JSON.parse's value, its long integers rounded.
  if (mayHoldRoundedInteger(value)) {
    try { value = parseLossless(text, null, exactNumber); } catch { /* JSON.parse's value stands */ }
  }
  return { ok: true, value };
}

/**
 * Whether a content-type names JSON: its media type (parameters such as `charset` dropped,
 * compared case-insensitively [RFC 9110 8.3.1]) is application/json or a `+json` structured
 * syntax suffix [RFC 6839].
 */
export function isJsonContentType(ct: unknown): boolean {
  if (typeof ct !== 'string') return false;
  const semi = ct.indexOf(';');
  const mt = (semi < 0 ? ct : ct.slice(0, semi)).trim().toLowerCase();
  return mt === 'application/json' || (mt.endsWith('+json') && mt.includes('/'));
}

/** content-encoding values that leave the bytes as they are (`utf-8`: a charset, often set there). */
const IDENTITY_ENCODINGS = new Set(['', 'identity', 'utf-8', 'utf8']);

/**
 * Why a binary JSON body's content-encoding is refused, or undefined. The broker reads the
 * bytes as sent and decodes no content-encoding [AMQP 3.2.4]: a gzip body read as JSON text
 * would be refused as not parsing, and worse, a body that happened to parse would be keyed
 * by bytes the producer meant as something else.
 */
function encodingFault(message: any): string | undefined {
  const ce = message?.content_encoding;
  if (ce === undefined || ce === null) return undefined;
  if (IDENTITY_ENCODINGS.has(String(ce).trim().toLowerCase())) return undefined;
  return `content-encoding ${JSON.stringify(String(ce))} is not read: the broker decodes no content-encoding, a JSON body is sent as UTF-8 text without one (or identity)`;
}

/**
 * JSON text of a binary body: its bytes as UTF-8, or undefined when they are not valid UTF-8.
 * Read leniently (U+FFFD for invalid bytes, as Buffer#toString does), two bodies differing only
 * there gave one SOW key. A leading byte-order mark is dropped, as `new TextDecoder('utf-8',
 * { fatal: true })` does (RFC 8259 8.1 lets a parser ignore it). isUtf8 is simdutf's check:
 * linear, native, no copy.
 */
function utf8Text(buf: Buffer): string | undefined {
  if (!isUtf8(buf)) return undefined;
  const bom = buf.length >= 3 && buf[0] === 0xef && buf[1] === 0xbb && buf[2] === 0xbf;
  return buf.toString('utf8', bom ? 3 : 0);
}

const NOT_UTF8: JsonResult = { ok: false, reason: 'body is not valid UTF-8' };

/**
 * The body as JSON. `maxDepth`: refuse bodies nested deeper (the SOW publish path; other
 * readers, such as content filters, see any depth). Binary bodies (data sections, an
 * amqp-value binary) need a JSON content-type (isJsonContentType), no content-encoding but
 * identity, and valid UTF-8 (utf8Text).
 */
export function jsonBody(message: any, opts: { maxDepth?: number } = {}): JsonResult {
  const body = message?.body;
  if (typeof body === 'string') return parseText(body, 'body is not JSON text: ', opts.maxDepth);
  if (body && typeof body === 'object' && body.typecode === 0x75) {
    const ct = message.content_type;
    if (!isJsonContentType(ct)) return { ok: false, reason: `data body with content-type ${ct ? String(ct) : '(none)'} is not application/json` };
    const fault = encodingFault(message);
    if (fault) return { ok: false, reason: fault };
    const buf: Buffer = body.multiple ? Buffer.concat(body.content) : body.content;
    const text = utf8Text(buf);
    if (text === undefined) return NOT_UTF8;
    return parseText(text, 'application/json body does not parse: ', opts.maxDepth);
  }
  if (Buffer.isBuffer(body)) {
    if (!isJsonContentType(message.content_type)) return { ok: false, reason: 'binary body is not JSON' };
    const fault = encodingFault(message);
    if (fault) return { ok: false, reason: fault };
    const text = utf8Text(body);
    if (text === undefined) return NOT_UTF8;
    return parseText(text, 'application/json body does not parse: ', opts.maxDepth);
  }
  if (body && typeof body === 'object' && !Array.isArray(body) && body.typecode === undefined) {
    const max = opts.maxDepth ?? Infinity;
    try { return { ok: true, value: plain(body, 0, max) }; }
    catch (e) { if (e === TOO_DEEP) return tooDeep(max); throw e; }
  }
  return { ok: false, reason: 'body is not a JSON string, map or application/json data' };
}

// ---------------------------------------------------------------------------------------------
// Raw pieces for a delta merge.
// ---------------------------------------------------------------------------------------------

/** One section of an encoded message: its code (0x70 header … 0x78 footer) and where it lies. */
export interface RawSection {
  code: number;
  /** Start of the section (its 0x00 descriptor mark). */
  start: number;
  /** Start of the section's value (after the descriptor). */
  valueStart: number;
  end: number;
  /** rhea's decoded value (a Typed). */
  value: any;
}

const SECTION_NAMES: Record<string, number> = {
  'amqp:header:list': 0x70, 'amqp:delivery-annotations:map': 0x71, 'amqp:message-annotations:map': 0x72,
  'amqp:properties:list': 0x73, 'amqp:application-properties:map': 0x74, 'amqp:data:binary': 0x75,
  'amqp:amqp-sequence:list': 0x76, 'amqp:footer:map': 0x78,
};

/** The sections of an encoded message, in order. Throws on bytes that are not a message. */
export function rawSections(bytes: Buffer): RawSection[] {
  const r = new amqpTypes.Reader(bytes);
  const out: RawSection[] = [];
  while (r.remaining() > 0) {
    const start: number = r.position;
    if (bytes[start] !== 0x00) throw new Error('message section is not a described type');
    r.position = start + 1;
    const d = amqpTypes.unwrap(r.read());
    const valueStart: number = r.position;
    const value = r.read();
    const code = typeof d === 'number' ? d : typeof d === 'string' ? (d.startsWith('amqp:amqp-value:') ? 0x77 : SECTION_NAMES[d] ?? -1) : -1;
    out.push({ code, start, valueStart, end: r.position, value });
  }
  return out;
}

/** A member of a JSON object text: the key and the value exactly as written. */
export interface JsonMember { keyRaw: string; raw: string }

function skipWs(t: string, i: number): number {
  for (;;) {
    const c = t.charCodeAt(i);
    if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) i++;
    else return i;
  }
}

/** Index after the closing quote of the string whose opening quote is at `i`, or -1. */
function stringEnd(t: string, i: number): number {
  for (let j = i + 1, n = t.length; j < n; j++) {
    const c = t.charCodeAt(j);
    if (c === 0x5c) j++;
    else if (c === 0x22) return j + 1;
  }
  return -1;
}

/** Index after the JSON value starting at `i`, or -1 (without recursion). */
function valueEnd(t: string, i: number): number {
  const n = t.length;
  const c = t.charCodeAt(i);
  if (c === 0x22) return stringEnd(t, i);
  if (c === 0x7b || c === 0x5b) {
    let depth = 0;
    for (let j = i; j < n; j++) {
      const d = t.charCodeAt(j);
      if (d === 0x22) { const e = stringEnd(t, j); if (e < 0) return -1; j = e - 1; }
      else if (d === 0x7b || d === 0x5b) depth++;
      else if (d === 0x7d || d === 0x5d) { if (--depth === 0) return j + 1; }
    }
    return -1;
  }
  let j = i;
  for (; j < n; j++) {
    const d = t.charCodeAt(j);
    if (d === 0x2c || d === 0x7d || d === 0x5d || d === 0x20 || d === 0x09 || d === 0x0a || d === 0x0d) break;
  }
  return j > i ? j : -1;
}

/**
 * The members of a JSON object text, in order, each as written (the text is JSON that
 * parsed; anything else gives null). Keys stay raw: decode them with JSON.parse.
 */
export function jsonObjectMembers(text: string): JsonMember[] | null {
  let i = skipWs(text, 0);
  if (text.charCodeAt(i) !== 0x7b) return null;
  i = skipWs(text, i + 1);
  const out: JsonMember[] = [];
  if (text.charCodeAt(i) === 0x7d) return skipWs(text, i + 1) === text.length ? out : null;
  for (;;) {
    if (text.charCodeAt(i) !== 0x22) return null;
    const ke = stringEnd(text, i);
    if (ke < 0) return null;
    const keyRaw = text.slice(i, ke);
    i = skipWs(text, ke);
    if (text.charCodeAt(i) !== 0x3a) return null;
    i = skipWs(text, i + 1);
    const ve = valueEnd(text, i);
    if (ve < 0) return null;
    out.push({ keyRaw, raw: text.slice(i, ve) });
    i = skipWs(text, ve);
    const c = text.charCodeAt(i);
    if (c === 0x2c) { i = skipWs(text, i + 1); continue; }
    if (c === 0x7d) return skipWs(text, i + 1) === text.length ? out : null;
    return null;
  }
}

/** An entry of an encoded AMQP map: the key as the JSON view names it, and where key and value lie. */
export interface MapEntry { key: string; start: number; keyEnd: number; end: number; keyCode: number }

/**
 * The entries of the encoded map whose constructor is at `start` (a map8 or map32 ending at
 * `end`), or null. Keys are named as rhea's decoder names them in the JSON view (String()).
 */
export function mapEntries(bytes: Buffer, start: number, end: number): { entries: MapEntry[]; code: number } | null {
  const code = bytes[start];
  if (code !== 0xc1 && code !== 0xd1) return null;
  const w = code === 0xc1 ? 1 : 4;
  if (start + 1 + 2 * w > end) return null;
  const count = w === 1 ? bytes[start + 2] : bytes.readUInt32BE(start + 5);
  if (count % 2 !== 0) return null;
  const r = new amqpTypes.Reader(bytes);
  r.position = start + 1 + 2 * w;
  const entries: MapEntry[] = [];
  for (let i = 0; i < count; i += 2) {
    const s: number = r.position;
    const k = amqpTypes.unwrap(r.read(), true);
    const keyEnd: number = r.position;
    r.read();
    entries.push({ key: String(k), start: s, keyEnd, end: r.position, keyCode: bytes[s] });
  }
  return r.position === end ? { entries, code } : null;
}

/**
 * JSON text of a JSON view (jsonBody's value): JSON.stringify (with `replacer`, if given),
 * but a bigint (an integer the body held beyond 2^53) is written as its exact digits, where
 * JSON.stringify throws.
 */
export function jsonText(v: unknown, replacer?: (key: string, value: unknown) => unknown): string {
  try { return JSON.stringify(v, replacer); }
  catch (e) { if (e instanceof TypeError && /BigInt/i.test(e.message)) return stringifyLossless(v, replacer as any) ?? 'null'; throw e; }
}

const INT64_MIN = -(2n ** 63n), INT64_MAX = 2n ** 63n - 1n, UINT64_MAX = 2n ** 64n - 1n;

/**
 * A JSON view with its bigints as AMQP typed values rhea can encode: a long when it fits,
 * else a ulong, else (beyond 64 bits, which AMQP has no integer for) a double. rhea would
 * encode a bare bigint as an empty map. Copies only what holds a bigint.
 */
function typedBigints(v: unknown): unknown {
  if (typeof v === 'bigint') {
    const b = Buffer.alloc(8);
    if (v >= INT64_MIN && v <= INT64_MAX) { b.writeBigInt64BE(v); return amqpTypes.wrap_long(b); }
    if (v > 0n && v <= UINT64_MAX) { b.writeBigUInt64BE(v); return amqpTypes.wrap_ulong(b); }
    return Number(v);
  }
  if (Array.isArray(v)) {
    let out: unknown[] | undefined;
    v.forEach((x, i) => { const y = typedBigints(x); if (y !== x) (out ??= v.slice())[i] = y; });
    return out ?? v;
  }
  if (v && typeof v === 'object' && Object.getPrototypeOf(v) === Object.prototype) {
    let out: Record<string, unknown> | undefined;
    for (const [k, x] of Object.entries(v)) { const y = typedBigints(x); if (y !== x) (out ??= { ...(v as Record<string, unknown>) })[k] = y; }
    return out ?? v;
  }
  return v;
}

/** The AMQP encoding of a JSON value (as rhea encodes a plain JS value; a bigint as typedBigints says). */
export function encodeAmqpValue(v: unknown): Buffer {
  const w = new amqpTypes.Writer();
  w.write(amqpTypes.wrap(typedBigints(v)));
  return w.toBuffer();
}
