/**
 * Stored messages are the original AMQP bytes (architecture invariant 4). On the way out
 * only the header (delivery-count, remaining ttl) and the message annotations (our x-opt-tm-*
 * keys) are rewritten; every other section is copied byte for byte, so every AMQP type a
 * client sent round-trips exactly. Delivery annotations are per hop [AMQP 3.2.2] and dropped.
 */
import { isUtf8 } from 'node:buffer';
import { amqpTypes, amqpMessage } from './amqp.js';

const HEADER = 0x70, DELIVERY_ANN = 0x71, MESSAGE_ANN = 0x72, PROPERTIES = 0x73;

/** Where the sections of an encoded message start and end. */
export interface SectionIndex {
  /** [start, end) of the header section, or undefined. */
  header?: [number, number];
  /** [start, end) of the message-annotations section, or undefined. */
  annotations?: [number, number];
  /** Start of the first section after the annotations (properties onward). */
  restStart: number;
}

export class MessageFormatError extends Error {}

// ---------------------------------------------------------------------------------------------
// Structural walk. Delivery rewrites only need to know where values end, not what they hold, so
// the hot paths below step over values by their constructors (rhea's own type table gives each
// typecode's width and category) without building any objects. The walk is strict: anything it
// is not sure about (an unknown typecode, a value running past the end, a compound whose size
// disagrees with its items, very deep nesting, an odd section descriptor or annotation key)
// returns -1 and the caller falls back to the full rhea decode below, so odd input behaves
// exactly as it always did, errors included.
// ---------------------------------------------------------------------------------------------

/** rhea's type table (types.js TypeDesc: typecode -> width, category), flattened for lookup. */
const BY_CODE: Record<number, { width: number; category: number } | undefined> = amqpTypes.by_code;
const CAT_FIXED = BY_CODE[0x40]!.category;
const CAT_VARIABLE = BY_CODE[0xa1]!.category;
const CAT_COMPOUND = BY_CODE[0xc0]!.category;
const CAT_ARRAY = BY_CODE[0xe0]!.category;
/** Category by typecode; 0 = not a type rhea knows. */
const CATEGORY = new Uint8Array(256);
/** Width by typecode: of the value (fixed), or of its size and count fields. */
const WIDTH = new Uint8Array(256);
for (let code = 1; code < 256; code++) {
  const t = BY_CODE[code];
  if (t) { CATEGORY[code] = t.category; WIDTH[code] = t.width; }
}
/** Deeper than this is left to rhea (which is what always handled it). */
const MAX_DEPTH = 32;

function readSize(b: Buffer, p: number, width: number): number {
  return width === 1 ? b[p] : b.readUInt32BE(p);
}

/** End of the value (constructor, descriptors included) at `p`, or -1. Never reads at or past `lim`. */
function skipValue(b: Buffer, p: number, lim: number, depth: number): number {
  if (depth > MAX_DEPTH) return -1;
  while (p < lim && b[p] === 0x00) {
    p = skipValue(b, p + 1, lim, depth + 1); // descriptor
    if (p < 0) return -1;
  }
  if (p >= lim) return -1;
  return skipBody(b, b[p], p + 1, lim, depth);
}

/** End of the AMQP value at `p` (its constructor and descriptors included), or -1 when it is malformed, cut short before `lim`, or nested too deep. */
export function skipAmqpValue(b: Buffer, p: number, lim = b.length): number {
  return skipValue(b, p, lim, 0);
}

/** End of a value of typecode `code` whose encoding (after the constructor) starts at `p`, or -1. */
function skipBody(b: Buffer, code: number, p: number, lim: number, depth: number): number {
  const cat = CATEGORY[code];
  const w = WIDTH[code];
  if (cat === CAT_FIXED) return p + w <= lim ? p + w : -1;
  if (cat === 0 || p + w > lim) return -1;
  const end = p + w + readSize(b, p, w);
  if (end > lim) return -1;
  if (cat === CAT_VARIABLE) return end;
  if (p + 2 * w > end) return -1;
  const count = readSize(b, p + w, w);
  let q = p + 2 * w;
  if (cat === CAT_COMPOUND) {
    for (let i = 0; i < count; i++) {
      q = skipValue(b, q, end, depth + 1);
      if (q < 0) return -1;
    }
  } else if (cat === CAT_ARRAY) {
    while (q < end && b[q] === 0x00) {
      q = skipValue(b, q + 1, end, depth + 1); // element descriptor
      if (q < 0) return -1;
    }
    if (q >= end) return -1;
    const ec = b[q++];
    if (CATEGORY[ec] === CAT_FIXED) {
      q += count * WIDTH[ec];
    } else if (CATEGORY[ec] !== 0) {
      for (let i = 0; i < count; i++) {
        q = skipBody(b, ec, q, end, depth + 1);
        if (q < 0) return -1;
      }
    } else {
      return -1;
    }
  } else {
    return -1;
  }
  return q === end ? end : -1;
}

const SYM_HEADER = Buffer.from('amqp:header:list', 'ascii');
const SYM_DELIVERY_ANN = Buffer.from('amqp:delivery-annotations:map', 'ascii');
const SYM_MESSAGE_ANN = Buffer.from('amqp:message-annotations:map', 'ascii');
const REST = 0x73;

/** Section code of a symbolic descriptor in b[s, e): as sectionCode() maps the decoded string. */
function symbolicCode(b: Buffer, s: number, e: number): number {
  // rhea decodes symbols as 'ascii' (high bit dropped): leave non-ASCII names to it.
  for (let i = s; i < e; i++) if (b[i] >= 0x80) return -1;
  if (SYM_HEADER.compare(b, s, e) === 0) return HEADER;
  if (SYM_DELIVERY_ANN.compare(b, s, e) === 0) return DELIVERY_ANN;
  if (SYM_MESSAGE_ANN.compare(b, s, e) === 0) return MESSAGE_ANN;
  return REST;
}

/** indexSections without decoding: null when anything is unusual (the caller then decodes). */
function indexSectionsFast(b: Buffer): SectionIndex | null {
  const len = b.length;
  const idx: SectionIndex = { restStart: len };
  let p = 0;
  while (p < len) {
    if (b[p] !== 0x00 || p + 2 > len) return null;
    const dc = b[p + 1];
    let code: number;
    let vs: number;
    if (dc === 0x53) { // smallulong
      if (p + 3 > len) return null;
      code = b[p + 2];
      vs = p + 3;
    } else if (dc === 0x80) { // ulong
      if (p + 10 > len) return null;
      const hi = b.readUInt32BE(p + 2), lo = b.readUInt32BE(p + 6);
      code = hi === 0 ? lo : REST;
      vs = p + 10;
    } else if (dc === 0xa3 || dc === 0xb3) { // sym8 / sym32
      const w = dc === 0xa3 ? 1 : 4;
      if (p + 2 + w > len) return null;
      const s = p + 2 + w;
      const e = s + readSize(b, p + 2, w);
      if (e > len) return null;
      code = symbolicCode(b, s, e);
      if (code < 0) return null;
      vs = e;
    } else {
      return null;
    }
    const end = skipValue(b, vs, len, 0);
    if (end < 0) return null;
    if (code === HEADER) idx.header = [p, end];
    else if (code === MESSAGE_ANN) idx.annotations = [p, end];
    else if (code === DELIVERY_ANN) { /* dropped on the way out */ }
    else { idx.restStart = p; break; }
    p = end;
  }
  return idx;
}

function sectionCode(desc: any): number {
  const v = desc?.value;
  if (typeof v === 'number') return v;
  if (typeof v === 'string') {
    switch (v) {
      case 'amqp:header:list': return 0x70;
      case 'amqp:delivery-annotations:map': return 0x71;
      case 'amqp:message-annotations:map': return 0x72;
      default: return 0x73; // anything else belongs to the rest
    }
  }
  return Number(v);
}

/** The full-decode walk: the reference behaviour, used for anything the fast walk declines. */
function indexSectionsDecoded(bytes: Buffer): SectionIndex {
  const r = new amqpTypes.Reader(bytes);
  const idx: SectionIndex = { restStart: bytes.length };
  try {
    while (r.remaining() > 0) {
      const start = r.position;
      const s = r.read();
      if (!s || !s.descriptor) throw new MessageFormatError('message section is not a described type');
      const code = sectionCode(s.descriptor);
      if (code === HEADER) idx.header = [start, r.position];
      else if (code === MESSAGE_ANN) idx.annotations = [start, r.position];
      else if (code === DELIVERY_ANN) { /* dropped on the way out */ }
      else { idx.restStart = start; break; }
    }
  } catch (e) {
    if (e instanceof MessageFormatError) throw e;
    throw new MessageFormatError('malformed message: ' + (e as Error).message);
  }
  return idx;
}

/**
 * Walks the top-level sections once (up to and including the first section after the
 * annotations). Throws MessageFormatError on malformed input.
 */
export function indexSections(bytes: Buffer): SectionIndex {
  return indexSectionsFast(bytes) ?? indexSectionsDecoded(bytes);
}

/** The map sections of a message [AMQP 3.2], by descriptor code. */
const MAP_SECTIONS: Record<number, string> = { 0x71: 'delivery-annotations', 0x72: 'message-annotations', 0x74: 'application-properties', 0x78: 'footer' };
const MAP_SECTION_SYMBOLS: Record<string, number> = {
  'amqp:delivery-annotations:map': 0x71, 'amqp:message-annotations:map': 0x72, 'amqp:application-properties:map': 0x74, 'amqp:footer:map': 0x78,
};

/** End of the value at `p` read from its constructor and size alone (no walk of its items), or -1. */
function shallowEnd(b: Buffer, p: number, lim: number): number {
  if (p >= lim) return -1;
  const code = b[p];
  const cat = CATEGORY[code], w = WIDTH[code];
  if (cat === CAT_FIXED) return p + 1 + w <= lim ? p + 1 + w : -1;
  if (cat === 0 || p + 1 + w > lim) return -1; // unknown, or a described value (0x00): not judged here
  const end = p + 1 + w + readSize(b, p + 1, w);
  return end <= lim ? end : -1;
}

/**
 * The first map section (delivery-annotations, message-annotations, application-properties,
 * footer) whose map has an odd item count, with that count; undefined when there is none. A
 * map holds key-value pairs [AMQP 1.6.23]: rhea's decoder drops a dangling last item, so such
 * a message was stored and failed later (the delivery rewrite read past the map). Reads each
 * section's constructor, size and count only: O(sections), whatever their content. Bytes it
 * cannot follow (a described section value, a malformed section) end the walk with undefined:
 * rhea decoded the message already, and what it refuses is refused there.
 */
export function oddMapSection(b: Buffer): { section: string; count: number } | undefined {
  const len = b.length;
  let p = 0;
  while (p + 2 < len) {
    const at = sectionAt(b, p);
    if (!at) return undefined;
    const { code, vs } = at;
    const vc = b[vs];
    if ((vc === 0xc1 || vc === 0xd1) && MAP_SECTIONS[code] !== undefined) {
      const w = vc === 0xc1 ? 1 : 4;
      if (vs + 1 + 2 * w > len) return undefined;
      const count = readSize(b, vs + 1 + w, w);
      if (count % 2 !== 0) return { section: MAP_SECTIONS[code], count };
    }
    p = shallowEnd(b, vs, len);
    if (p < 0) return undefined;
  }
  return undefined;
}

/**
 * The section code of the section starting at `p` (its descriptor numeric or symbolic; -1 for
 * a name that is not one of the map sections or amqp-value) and where its value starts, or
 * undefined when the bytes there are not a section this can read.
 */
function sectionAt(b: Buffer, p: number): { code: number; vs: number } | undefined {
  const len = b.length;
  if (b[p] !== 0x00 || p + 2 >= len) return undefined;
  const dc = b[p + 1];
  let code: number;
  let vs: number;
  if (dc === 0x53) { code = b[p + 2]; vs = p + 3; }
  else if (dc === 0x80) {
    if (p + 10 > len) return undefined;
    code = b.readUInt32BE(p + 2) === 0 ? b.readUInt32BE(p + 6) : -1;
    vs = p + 10;
  } else if (dc === 0xa3 || dc === 0xb3) {
    const e = shallowEnd(b, p + 1, len);
    if (e < 0) return undefined;
    const name = b.toString('latin1', p + 2 + (dc === 0xa3 ? 1 : 4), e);
    code = MAP_SECTION_SYMBOLS[name] ?? (name === 'amqp:amqp-sequence:list' ? 0x76 : name.startsWith('amqp:amqp-value:') ? 0x77 : -1);
    vs = e;
  } else {
    return undefined;
  }
  return vs < len ? { code, vs } : undefined;
}

/** The sections whose strings invalidUtf8Section checks, by code. */
const STRING_SECTIONS: Record<number, string> = { 0x72: 'message-annotations', 0x74: 'application-properties', 0x76: 'amqp-sequence body', 0x77: 'amqp-value body' };
/** walkStrings: a string that is not valid UTF-8 was found. */
const INVALID_UTF8 = -2;
/** Nesting walkStrings follows (as the protocol layer's limit on nested values); deeper is not judged. */
const MAX_STRING_DEPTH = 256;

/**
 * A list, map or array at `p` (its constructor code there): where it ends, its item count and
 * where its first item (an array: its element constructor) starts; undefined past `lim`.
 */
function containerAt(b: Buffer, p: number, lim: number): { end: number; count: number; first: number } | undefined {
  const w = WIDTH[b[p]];
  if (p + 1 + 2 * w > lim) return undefined;
  const end = p + 1 + w + readSize(b, p + 1, w);
  if (end > lim) return undefined;
  return { end, count: readSize(b, p + 1 + w, w), first: p + 1 + 2 * w };
}

/**
 * End of the value at `p`, as skipValue, or INVALID_UTF8 when a string (str8, str32) in it is
 * not valid UTF-8; -1 when the value is malformed or nested too deep to judge.
 */
function walkStrings(b: Buffer, p: number, lim: number, depth: number): number {
  if (depth > MAX_STRING_DEPTH) return -1;
  while (p < lim && b[p] === 0x00) {
    p = walkStrings(b, p + 1, lim, depth + 1); // descriptor
    if (p < 0) return p;
  }
  if (p >= lim) return -1;
  const code = b[p];
  if (code === 0xa1 || code === 0xb1) {
    const w = code === 0xa1 ? 1 : 4;
    if (p + 1 + w > lim) return -1;
    const s = p + 1 + w, e = s + readSize(b, p + 1, w);
    if (e > lim) return -1;
    return isUtf8(b.subarray(s, e)) ? e : INVALID_UTF8;
  }
  if (CATEGORY[code] === CAT_COMPOUND) {
    const h = containerAt(b, p, lim);
    if (!h) return -1;
    const { end, count } = h;
    let q = h.first;
    for (let i = 0; i < count; i++) {
      q = walkStrings(b, q, end, depth + 1);
      if (q < 0) return q;
    }
    return q === end ? end : -1;
  }
  if (CATEGORY[code] === CAT_ARRAY) {
    const h = containerAt(b, p, lim);
    if (!h) return -1;
    const { end, count } = h;
    let q = h.first;
    if (q >= end) return -1;
    const ec = b[q];
    if (ec !== 0xa1 && ec !== 0xb1) return skipBody(b, code, p + 1, lim, 0);
    const ew = ec === 0xa1 ? 1 : 4;
    q++;
    for (let i = 0; i < count; i++) {
      if (q + ew > end) return -1;
      const s = q + ew, e = s + readSize(b, q, ew);
      if (e > end) return -1;
      if (!isUtf8(b.subarray(s, e))) return INVALID_UTF8;
      q = e;
    }
    return q === end ? end : -1;
  }
  return skipBody(b, code, p + 1, lim, 0);
}

/**
 * The first section (message-annotations, application-properties, amqp-value or
 * amqp-sequence body) holding a string (str8/str32, at any depth) that is not valid UTF-8,
 * or undefined. rhea decodes such a string with U+FFFD for the invalid bytes, so two
 * different strings can decode alike: the SOW publish path asks this (only when a key or a
 * string body holds U+FFFD) before such a string can become a key. O(message), no copies.
 */
export function invalidUtf8Section(b: Buffer): string | undefined {
  const len = b.length;
  let p = 0;
  while (p + 2 < len) {
    const at = sectionAt(b, p);
    if (!at) return undefined;
    const name = STRING_SECTIONS[at.code];
    p = name !== undefined ? walkStrings(b, at.vs, len, 0) : shallowEnd(b, at.vs, len);
    if (p === INVALID_UTF8) return name;
    if (p < 0) return undefined;
  }
  return undefined;
}

/** Fields of the properties section, by position [AMQP 3.2.4]. */
export const PROPERTY_FIELD = { messageId: 0, correlationId: 5 } as const;

/**
 * A field of the message's properties section as rhea reads it typed (its AMQP type kept), or
 * undefined when the message has no properties section or the field is null or absent.
 * Re-encoding the decoded view changes types: a binary and a uuid both decode to a Buffer, a
 * ulong past 2^53 to its 8 bytes, and rhea encodes every Buffer message-id as a uuid.
 * Throws MessageFormatError on malformed input.
 */
export function readPropertyTyped(bytes: Buffer, field: number): unknown {
  const { restStart } = indexSections(bytes);
  if (restStart >= bytes.length) return undefined;
  try {
    const r = new amqpTypes.Reader(bytes);
    r.position = restStart;
    const section = r.read();
    const d = section?.descriptor?.value;
    if (d !== PROPERTIES && d !== 'amqp:properties:list') return undefined;
    const v = Array.isArray(section.value) ? section.value[field] : undefined;
    return v === undefined || v?.type?.typecode === 0x40 ? undefined : v;
  } catch (e) {
    throw new MessageFormatError('malformed properties: ' + (e as Error).message);
  }
}

/** Header fields we may rewrite. Absent = AMQP default. */
export interface HeaderFields {
  durable?: boolean;
  priority?: number;
  ttl?: number;
  first_acquirer?: boolean;
  delivery_count?: number;
}

export function readHeader(bytes: Buffer, idx: SectionIndex): HeaderFields {
  if (!idx.header) return {};
  const m = decodeMessage(bytes.subarray(idx.header[0], idx.header[1]));
  return { durable: m.durable, priority: m.priority, ttl: m.ttl, first_acquirer: m.first_acquirer, delivery_count: m.delivery_count };
}

interface KeptPairs { raw: Buffer[]; count: number; length: number }
const NO_PAIRS: KeptPairs = { raw: [], count: 0, length: 0 };
const OUR_PREFIX = Buffer.from('x-opt-tm-', 'ascii');

/**
 * Whether the key at b[ks] is one of ours (`x-opt-tm-*`, as String(decoded key) would say), or -1
 * when the key is not a string, symbol or binary (left to the decoding path).
 */
function isOurKey(b: Buffer, ks: number, lim: number): number {
  if (ks >= lim) return -1;
  const kc = b[ks];
  let w: number;
  if (kc === 0xa1 || kc === 0xa3 || kc === 0xa0) w = 1;
  else if (kc === 0xb1 || kc === 0xb3 || kc === 0xb0) w = 4;
  else return -1;
  const s = ks + 1 + w;
  if (s > lim) return -1;
  const n = readSize(b, ks + 1, w);
  if (n < OUR_PREFIX.length || s + OUR_PREFIX.length > lim) return 0;
  // Symbols decode as 'ascii' (high bit dropped); strings and binaries as UTF-8, where these
  // ASCII characters can only come from the same bytes.
  const mask = kc === 0xa3 || kc === 0xb3 ? 0x7f : 0xff;
  for (let i = 0; i < OUR_PREFIX.length; i++) if ((b[s + i] & mask) !== OUR_PREFIX[i]) return 0;
  return 1;
}

/** keptAnnotationPairs without decoding: null when anything is unusual. */
function keptAnnotationPairsFast(b: Buffer, s: number, e: number): KeptPairs | null {
  if (b[s] !== 0x00) return null;
  let q = skipValue(b, s + 1, e, 0); // descriptor
  if (q < 0 || q >= e) return null;
  const code = b[q++];
  if (code === 0x40) return NO_PAIRS;
  const w = code === 0xc1 ? 1 : code === 0xd1 ? 4 : 0;
  if (w === 0 || q + 2 * w > e) return null;
  const n = readSize(b, q + w, w);
  q += 2 * w;
  const raw: Buffer[] = [];
  let count = 0, length = 0;
  let runStart = -1; // start of the current run of kept pairs
  // An odd count (a dangling key, refused at receive since session 23 but possibly stored
  // before): the pairs as rhea reads them, the last item skipped (see keptAnnotationPairs).
  for (let i = 0; i + 1 < n; i += 2) {
    const ks = q;
    const ours = isOurKey(b, ks, e);
    if (ours < 0) return null;
    const ke = skipValue(b, ks, e, 0);
    if (ke < 0) return null;
    q = skipValue(b, ke, e, 0);
    if (q < 0) return null;
    if (ours) {
      if (runStart >= 0) { raw.push(b.subarray(runStart, ks)); runStart = -1; }
    } else {
      if (runStart < 0) runStart = ks;
      count += 2;
      length += q - ks;
    }
  }
  if (runStart >= 0) raw.push(b.subarray(runStart, q));
  if (n % 2 !== 0 && skipValue(b, q, e, 0) < 0) return null;
  return { raw, count, length };
}

/**
 * Message annotation pairs of the original, raw, without keys starting with `x-opt-tm-`
 * (ours are replaced, never duplicated: a map must not repeat a key [AMQP 1.6.23]). A map
 * with an odd item count (which AMQP does not allow, and the broker refuses at receive) keeps
 * its pairs and loses the dangling last item, as rhea's decoder reads it: the last item was
 * read past the map, which threw on every delivery of such a message stored earlier.
 */
function keptAnnotationPairs(bytes: Buffer, s: number, e: number): KeptPairs {
  return keptAnnotationPairsFast(bytes, s, e) ?? keptAnnotationPairsDecoded(bytes, s, e);
}

/** The decoding version: the reference behaviour, for anything the fast walk declines. */
function keptAnnotationPairsDecoded(bytes: Buffer, s: number, e: number): KeptPairs {
  const r = new amqpTypes.Reader(bytes.subarray(s, e));
  r.read_constructor(); // descriptor + map typecode
  // read_constructor consumed the map typecode; rewind one byte to read it ourselves.
  r.position -= 1;
  const code = r.read_typecode();
  if (code === 0x40) return NO_PAIRS; // null map
  const width = code === 0xc1 ? 1 : 4;
  r.read_uint(width); // size
  const n = r.read_uint(width);
  const raw: Buffer[] = [];
  let count = 0, length = 0;
  for (let i = 0; i + 1 < n; i += 2) {
    const ks = r.position;
    const key = r.read();
    r.read();
    const k = String(key?.value ?? key);
    if (k.startsWith('x-opt-tm-')) continue;
    const pair = r.buffer.subarray(ks, r.position);
    raw.push(pair);
    length += pair.length;
    count += 2;
  }
  return { raw, count, length };
}

/** Encoded annotation keys (symbols), each encoded once by rhea. */
const KEY_BYTES = new Map<string, Buffer>();
/** Encoded symbol values (`x-opt-tm-cmd`, `x-opt-tm-oof-reason`: a handful of names), likewise. */
const SYMBOL_VALUE_BYTES = new Map<string, Buffer>();
const CACHE_MAX = 1024;
const SYM8 = BY_CODE[0xa3];

/**
 * Writes `typed` with rhea, or the bytes rhea wrote for it last time under `k`. (A full cache
 * stops growing: further names are simply encoded each time.)
 */
function writeCached(w: any, cache: Map<string, Buffer>, k: string, typed: unknown): void {
  const b = cache.get(k);
  if (b !== undefined) { writeRaw(w, b); return; }
  const start: number = w.position;
  w.write(typed);
  if (cache.size < CACHE_MAX) cache.set(k, Buffer.from((w.buffer as Buffer).subarray(start, w.position)));
}

/**
 * Appends already-encoded bytes to a rhea Writer. A byte loop: these are a few bytes each, where
 * Buffer#copy's fixed cost dominates.
 */
function writeRaw(w: any, src: Buffer): void {
  const n = src.length;
  w.ensure(w.position + n);
  const dst: Buffer = w.buffer;
  let p: number = w.position;
  for (let i = 0; i < n; i++) dst[p++] = src[i];
  w.position = p;
}

/**
 * Writes the annotation values every delivery of a command link carries (a string key, an
 * SCN as ulong, a time as timestamp) byte-for-byte as rhea would, without its generic
 * dispatch and the Buffer its string path allocates. False: not one of those; use rhea.
 */
function writeCommonValue(w: any, v: any): boolean {
  if (typeof v === 'string') {
    const n = Buffer.byteLength(v, 'utf8');
    const head = n > 255 ? 5 : 2;
    w.ensure(w.position + head + n);
    const b: Buffer = w.buffer;
    let p: number = w.position;
    if (n > 255) { b[p] = 0xb1; b.writeUInt32BE(n, p + 1); } else { b[p] = 0xa1; b[p + 1] = n; }
    p += head;
    w.position = p + (n > 0 ? b.write(v, p, n, 'utf8') : 0);
    return true;
  }
  if (typeof v !== 'object' || v === null || v.descriptor !== undefined || v.type === undefined) return false;
  const code: number = v.type.typecode, x = v.value;
  if (typeof x !== 'number') return false;
  if (code === ULONG || code === TIMESTAMP) {
    if (!(x >= 0 && Number.isSafeInteger(x))) return false;
    w.ensure(w.position + 9);
    const b: Buffer = w.buffer, p: number = w.position;
    b[p] = code;
    b.writeUInt32BE(Math.floor(x / 4294967296), p + 1);
    b.writeUInt32BE(x % 4294967296, p + 5);
    w.position = p + 9;
    return true;
  }
  if (code === SMALL_ULONG && x >= 0 && x <= 255) {
    w.ensure(w.position + 2);
    w.buffer[w.position] = SMALL_ULONG; w.buffer[w.position + 1] = x;
    w.position += 2;
    return true;
  }
  return false;
}
const ULONG = 0x80, TIMESTAMP = 0x83, SMALL_ULONG = 0x53;

/** src[s, e) into dst at o; returns the byte count. Byte loop below a size where copy() wins. */
function copyRange(src: Buffer, s: number, e: number, dst: Buffer, o: number): number {
  const n = e - s;
  if (n > 48) return src.copy(dst, o, s, e);
  for (let i = 0; i < n; i++) dst[o + i] = src[s + i];
  return n;
}

/**
 * One rhea Writer reused by every call (rewriteMessage is synchronous, and resets it first);
 * replaced when a large value has grown it, so it never pins much memory.
 */
const WRITER_SIZE = 4096;
const WRITER_KEEP_MAX = 64 * 1024;
let writer: any = new amqpTypes.Writer(Buffer.allocUnsafe(WRITER_SIZE));

const NO_KEYS: string[] = [];
const ANN_PREFIX = Buffer.from([0x00, 0x53, MESSAGE_ANN]);

/**
 * A message given as two byte ranges, `head[0, headEnd)` then `tail[tailStart, tail.length)`:
 * a rewritten header and annotations, then the stored message's other sections as they are,
 * so that no buffer of the whole is made. From rewriteMessageSplit, valid until its next
 * call: whoever takes it copies it at once.
 */
export interface SplitMessage { head: Buffer; headEnd: number; tail: Buffer; tailStart: number }

/** The bytes of a split message, in one buffer. */
export function joinSplit(m: SplitMessage): Buffer {
  const out = Buffer.allocUnsafe(m.headEnd + m.tail.length - m.tailStart);
  const o = copyRange(m.head, 0, m.headEnd, out, 0);
  m.tail.copy(out, o, m.tailStart);
  return out;
}

/** Where rewriteMessageSplit assembles heads; grown as needed, replaced when a large one grew it. */
let headScratch = Buffer.allocUnsafe(WRITER_SIZE);
const split: SplitMessage = { head: headScratch, headEnd: 0, tail: headScratch, tailStart: 0 };
const EMPTY = Buffer.alloc(0);

/** The shared split message holding `b` whole (no head). */
function whole(b: Buffer): SplitMessage {
  split.head = EMPTY; split.headEnd = 0; split.tail = b; split.tailStart = 0;
  return split;
}

/**
 * The bytes to send: new header (when `header` given), the original annotations minus ours
 * plus `annotations`, then the original properties/application-properties/body/footer.
 */
export function rewriteMessage(bytes: Buffer, idx: SectionIndex, header: HeaderFields | null, annotations: Record<string, unknown> | null): Buffer {
  const m = rewriteMessageSplit(bytes, idx, header, annotations);
  if (m.headEnd === 0 && m.tailStart === 0) return m.tail;
  return joinSplit(m);
}

/** rewriteMessage's bytes as a SplitMessage (see there): the head assembled, the rest left in `bytes`. */
export function rewriteMessageSplit(bytes: Buffer, idx: SectionIndex, header: HeaderFields | null, annotations: Record<string, unknown> | null): SplitMessage {
  if (!header && !annotations && !idx.annotations && idx.restStart === 0) return whole(bytes);
  const keys = annotations ? Object.keys(annotations) : NO_KEYS;
  // Section ranges clamped to the buffer as subarray() would (rhea's decoder, which indexes
  // input the fast walk declines, can report an end past a truncated last value).
  const len = bytes.length;
  const rs = Math.min(idx.restStart, len);
  const h = idx.header, a = idx.annotations;
  const hs = h ? Math.min(h[0], len) : 0, he = h ? Math.max(hs, Math.min(h[1], len)) : 0;
  const as = a ? Math.min(a[0], len) : 0, ae = a ? Math.max(as, Math.min(a[1], len)) : 0;
  if (!header && keys.length === 0) {
    // Copy-through of the original header and annotations (delivery annotations dropped).
    let at = 0;
    if (h) at = hs === at ? he : -1;
    if (a && at >= 0) at = as === at ? ae : -1;
    if (at === rs) return whole(bytes); // nothing dropped or reordered: the same bytes
    const out = Buffer.allocUnsafe(he - hs + (ae - as) + (len - rs));
    let o = copyRange(bytes, hs, he, out, 0);
    o += copyRange(bytes, as, ae, out, o);
    bytes.copy(out, o, rs);
    return whole(out);
  }
  const w = writer;
  w.position = 0;
  if (header) w.write(amqpMessage.header(header).described());
  const hdrEnd: number = w.position;
  let kept = NO_PAIRS, oursCount = 0;
  if (keys.length > 0) {
    if (a) kept = keptAnnotationPairs(bytes, as, ae);
    for (let i = 0; i < keys.length; i++) {
      const v = annotations![keys[i]];
      if (v === undefined) continue;
      const k = keys[i];
      const kb = KEY_BYTES.get(k);
      if (kb !== undefined) writeRaw(w, kb);
      else writeCached(w, KEY_BYTES, k, amqpTypes.wrap_symbol(k));
      if (v instanceof EncodedValue) { writeRaw(w, v.bytes); oursCount += 2; continue; }
      if (writeCommonValue(w, v)) { oursCount += 2; continue; }
      const t = amqpTypes.wrap(v);
      if (t.type === SYM8 && typeof t.value === 'string' && t.descriptor === undefined) writeCached(w, SYMBOL_VALUE_BYTES, t.value, t);
      else w.write(t);
      oursCount += 2;
    }
  }
  const oursEnd: number = w.position;
  const buf: Buffer = w.buffer;
  if (buf.length > WRITER_KEEP_MAX) writer = new amqpTypes.Writer(Buffer.allocUnsafe(WRITER_SIZE));

  const hdrLen = header ? hdrEnd : he - hs;
  const bodyLen = kept.length + (oursEnd - hdrEnd);
  const annLen = keys.length > 0 ? ANN_PREFIX.length + 9 + bodyLen : ae - as;
  const headLen = hdrLen + annLen;
  if (headScratch.length < headLen) headScratch = Buffer.allocUnsafe(Math.max(headLen, 2 * headScratch.length));
  const out = headScratch;
  let o = header ? copyRange(buf, 0, hdrEnd, out, 0) : copyRange(bytes, hs, he, out, 0);
  if (keys.length > 0) {
    o += copyRange(ANN_PREFIX, 0, ANN_PREFIX.length, out, o);
    out[o] = 0xd1; // map32: size, count
    out.writeUInt32BE(bodyLen + 4, o + 1);
    out.writeUInt32BE(kept.count + oursCount, o + 5);
    o += 9;
    for (const r of kept.raw) o += copyRange(r, 0, r.length, out, o);
    o += copyRange(buf, hdrEnd, oursEnd, out, o);
  } else {
    o += copyRange(bytes, as, ae, out, o);
  }
  if (headScratch.length > WRITER_KEEP_MAX) headScratch = Buffer.allocUnsafe(WRITER_SIZE); // `out` stays valid for this call
  split.head = out; split.headEnd = o; split.tail = bytes; split.tailStart = rs;
  return split;
}

/** An annotation value already encoded as AMQP bytes: rewriteMessage copies it as it is. */
export class EncodedValue {
  constructor(readonly bytes: Buffer) {}
}

/** Encoded string map keys, each encoded by rhea once (the checkpoint map's field names). */
const MAP_KEY_BYTES = new Map<string, Buffer>();
let mapWriter: any = new amqpTypes.Writer(Buffer.allocUnsafe(WRITER_SIZE));

/** Encoded map entries without the map's constructor: a constant part to start maps with. */
export interface EncodedPairs { readonly bytes: Buffer; readonly count: number }

/** Writes the entries' pairs into `w` (string keys encoded by rhea once, then cached); returns the item count. */
function writeStringKeyedPairs(w: any, entries: Record<string, unknown>): number {
  let count = 0;
  for (const k in entries) {
    const v = entries[k];
    if (v === undefined) continue;
    const kb = MAP_KEY_BYTES.get(k);
    if (kb !== undefined) writeRaw(w, kb);
    else writeCached(w, MAP_KEY_BYTES, k, amqpTypes.wrap_string(k));
    w.write(amqpTypes.wrap(v));
    count += 2;
  }
  return count;
}

/** The pairs of a map with string keys, to begin several maps with (see encodeStringKeyedMap). */
export function encodeStringKeyedPairs(entries: Record<string, unknown>): EncodedPairs {
  const w = mapWriter;
  w.position = 0;
  const count = writeStringKeyedPairs(w, entries);
  return { bytes: Buffer.from((w.buffer as Buffer).subarray(0, w.position)), count };
}

/**
 * A map with string keys, encoded as rhea's wrap_map encodes it (map32, keys as strings),
 * with the keys' bytes cached: the `x-opt-tm-checkpoint` map goes on every message of a
 * checkpoint link, always with the same field names. Values go through rhea. `head`: pairs
 * encoded once that come first (the fields that do not change along a snapshot).
 */
export function encodeStringKeyedMap(entries: Record<string, unknown>, head?: EncodedPairs): EncodedValue {
  const w = mapWriter;
  w.position = 9; // map32 constructor, size and count: filled in below
  if (head) writeRaw(w, head.bytes);
  const count = (head?.count ?? 0) + writeStringKeyedPairs(w, entries);
  const n: number = w.position;
  const out = Buffer.allocUnsafe(n);
  (w.buffer as Buffer).copy(out, 0, 0, n);
  out[0] = 0xd1;
  out.writeUInt32BE(n - 5, 1);
  out.writeUInt32BE(count, 5);
  if ((w.buffer as Buffer).length > WRITER_KEEP_MAX) mapWriter = new amqpTypes.Writer(Buffer.allocUnsafe(WRITER_SIZE));
  return new EncodedValue(out);
}

/** Encodes a fresh message (markers, management replies). */
export function encodeMessage(msg: Record<string, unknown>): Buffer {
  return amqpMessage.encode(msg);
}

/** Where the protocol layer leaves rhea's decoder as it was before it wrapped it (raw-message.ts). */
const UNCAPTURED = Symbol.for('tidemark.decode-uncaptured');
/** The bytes a decoded view was decoded from (set here and by the protocol layer's capture, raw-message.ts). */
const RAW_BYTES = Symbol.for('tidemark.raw-bytes');

/** The bytes `message` was decoded from, when the broker decoded it (received or stored). */
export function sourceBytes(message: any): Buffer | undefined {
  return message?.[RAW_BYTES];
}

/**
 * Decodes bytes the broker already holds (a stored message, a record) with rhea's decoder:
 * properties, application properties, body. Not through the wrapper that copies each
 * received message's bytes: these are ours already, and a copy kept with the view would
 * double what a filtered entry holds. The view keeps a reference to `bytes` (no copy), so that
 * filters can read again what rhea's decode loses (64-bit integers; codec/app-properties.ts).
 */
export function decodeMessage(bytes: Buffer): any {
  const m = amqpMessage as unknown as Record<symbol, ((b: Buffer) => unknown) | undefined> & { decode(b: Buffer): unknown };
  const plain = m[UNCAPTURED];
  const view: any = plain ? plain.call(amqpMessage, bytes) : amqpMessage.decode(bytes);
  if (view !== null && typeof view === 'object' && view[RAW_BYTES] === undefined) Object.defineProperty(view, RAW_BYTES, { value: bytes });
  return view;
}
