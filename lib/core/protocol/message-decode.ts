/**
 * Messages read by hand: the same message object rhea's `message.decode` builds, without
 * its generic Reader (a `{typecode}` object per constructor, a Typed wrapper per value, a
 * composite per header and properties section, then an unwrap pass that copies it all
 * again). Profiled at ~12 % of the broker's time when publishing and most of a rhea
 * client's time when it reads a sow query.
 *
 * What is read here: sections described by a numeric descriptor, each holding values of
 * the AMQP primitive, list, map and array types. The values are what rhea's unwrap gives,
 * quirks included: a `boolean` (0x56) is its byte, a ulong or long beyond 2^53 is its 8
 * bytes, a timestamp is a Date, a uuid or decimal is its bytes, a map becomes an object
 * (keys as property names; an odd last element is dropped).
 *
 * Anything else is left to rhea by returning undefined: a described value inside a section
 * (rhea keeps those as its Typed objects), a symbolic or repeated descriptor, an unknown
 * section, a section of an unexpected type, a compound whose size disagrees with its
 * content, a read past the end. rhea then decodes the message, warns or throws exactly as
 * before. spec/unit/protocol/message-decode.spec.ts compares both on random messages.
 */

/** The two rhea classes a decoded message is made of. */
export interface RheaMessageClasses {
  /** Prototype of rhea's Message (a new Message() has no own properties). */
  messageProto: object;
  /** rhea's body Section (data and amqp-sequence bodies). */
  Section: new (typecode: number, content: unknown) => { typecode: number; content: unknown; multiple?: boolean };
}

/** Thrown inside the reader to hand the whole message to rhea. */
const BAIL: unique symbol = Symbol('left to rhea');

/**
 * Deepest nesting of lists, maps, arrays (and chained descriptors) the broker decodes. Deeper
 * values are left to rhea here, whose Reader refuses them as a decode error (rhea-guards.ts):
 * decoding them by recursion would overflow the stack.
 */
export const MAX_NESTING = 256;

// The reader's cursor, shared by the functions below instead of passed around: a decode runs
// to completion synchronously and calls nothing that could start another one.
let buf: Buffer = Buffer.alloc(0);
let pos = 0;
let end = 0;
/** Lists, maps and arrays open at pos. */
let depth = 0;

function need(n: number): void { if (pos + n > end) throw BAIL; }

const TWO32 = 4294967296;

function ulong(): number | Buffer {
  need(8);
  const hi = buf.readUInt32BE(pos); const lo = buf.readUInt32BE(pos + 4);
  const at = pos; pos += 8;
  return hi < 2097153 ? hi * TWO32 + lo : buf.subarray(at, at + 8);
}

function long(): number | Buffer {
  need(8);
  const hi = buf.readInt32BE(pos); const lo = buf.readUInt32BE(pos + 4);
  const at = pos; pos += 8;
  return hi < 2097153 && hi > -2097153 ? hi * TWO32 + lo : buf.subarray(at, at + 8);
}

function bytes(n: number): Buffer { need(n); const at = pos; pos += n; return buf.subarray(at, at + n); }

function string(width: 1 | 4, encoding: 'utf8' | 'ascii'): string {
  need(width);
  const n = width === 1 ? buf[pos] : buf.readUInt32BE(pos);
  pos += width;
  need(n);
  const s = buf.toString(encoding, pos, pos + n);
  pos += n;
  return s;
}

/** Size and count of a compound or array; returns where its content must end. */
function sizeCount(width: 1 | 4): [number, number] {
  need(2 * width);
  let size: number; let count: number;
  if (width === 1) { size = buf[pos]; count = buf[pos + 1]; }
  else { size = buf.readUInt32BE(pos); count = buf.readUInt32BE(pos + 4); }
  const stop = pos + width + size;
  if (stop > end) throw BAIL;
  pos += 2 * width;
  return [stop, count];
}

function list(width: 1 | 4): unknown[] {
  const [stop, count] = sizeCount(width);
  // Each element takes at least one byte: a larger count cannot fit (rhea would overrun).
  if (count > stop - pos) throw BAIL;
  if (++depth > MAX_NESTING) throw BAIL;
  const items = new Array(count);
  for (let i = 0; i < count; i++) items[i] = value();
  if (pos !== stop) throw BAIL;
  depth--;
  return items;
}

function map(width: 1 | 4): Record<string, unknown> {
  const [stop, count] = sizeCount(width);
  if (count > stop - pos) throw BAIL;
  if (++depth > MAX_NESTING) throw BAIL;
  const result: Record<string, unknown> = {};
  // rhea's mapify: pairs in order, an odd last element read and dropped.
  for (let i = 0; i + 1 < count; i += 2) {
    const k = value();
    result[k as string] = value();
  }
  if (count % 2 === 1) value();
  if (pos !== stop) throw BAIL;
  depth--;
  return result;
}

function array(width: 1 | 4): unknown[] {
  const [stop, count] = sizeCount(width);
  need(1);
  const code = buf[pos++];
  if (!KNOWN[code]) throw BAIL; // described (0x00) or unknown element constructor: rhea throws even for none
  // Zero-width element types (null, true, uint0, …) take no bytes: up to 64 Ki of them are
  // read here; a larger claim is left to rhea, which the broker guards (server.ts).
  if (count > stop - pos && !(code >= 0x40 && code <= 0x45 && count <= 65536)) throw BAIL;
  if (++depth > MAX_NESTING) throw BAIL;
  const items = new Array(count);
  for (let i = 0; i < count; i++) items[i] = body(code);
  if (pos !== stop) throw BAIL;
  depth--;
  return items;
}

/** The constructors rhea 3.0.5 defines (types.js define_type). */
const KNOWN = new Uint8Array(256);
for (const c of [0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x60, 0x61, 0x70, 0x71, 0x72,
  0x73, 0x74, 0x80, 0x81, 0x82, 0x83, 0x84, 0x94, 0x98, 0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3, 0xc0, 0xc1, 0xd0, 0xd1, 0xe0, 0xf0]) KNOWN[c] = 1;

/** A value with its constructor. */
function value(): unknown {
  need(1);
  return body(buf[pos++]);
}

/** The value of a type whose constructor (`code`) was read. */
function body(code: number): unknown {
  switch (code) {
    case 0x40: return null;
    case 0x41: return true;
    case 0x42: return false;
    case 0x43: case 0x44: return 0; // uint0, ulong0
    case 0x45: return []; // list0
    case 0x50: case 0x52: case 0x53: case 0x56: // ubyte, smalluint, smallulong, boolean (rhea gives its byte)
      need(1); return buf[pos++];
    case 0x51: case 0x54: case 0x55: // byte, smallint, smalllong
      need(1); return buf.readInt8(pos++);
    case 0x60: { need(2); const v = buf.readUInt16BE(pos); pos += 2; return v; }
    case 0x61: { need(2); const v = buf.readInt16BE(pos); pos += 2; return v; }
    case 0x70: case 0x73: { need(4); const v = buf.readUInt32BE(pos); pos += 4; return v; } // uint, char
    case 0x71: { need(4); const v = buf.readInt32BE(pos); pos += 4; return v; }
    case 0x72: { need(4); const v = buf.readFloatBE(pos); pos += 4; return v; }
    case 0x74: return bytes(4); // decimal32
    case 0x80: return ulong();
    case 0x81: return long();
    case 0x82: { need(8); const v = buf.readDoubleBE(pos); pos += 8; return v; }
    case 0x83: return new Date(long() as number); // timestamp (rhea: new Date(read_long))
    case 0x84: return bytes(8); // decimal64
    case 0x94: case 0x98: return bytes(16); // decimal128, uuid
    case 0xa0: { need(1); const n = buf[pos++]; return bytes(n); }
    case 0xb0: { need(4); const n = buf.readUInt32BE(pos); pos += 4; return bytes(n); }
    case 0xa1: return string(1, 'utf8');
    case 0xb1: return string(4, 'utf8');
    case 0xa3: return string(1, 'ascii');
    case 0xb3: return string(4, 'ascii');
    case 0xc0: return list(1);
    case 0xd0: return list(4);
    case 0xc1: return map(1);
    case 0xd1: return map(4);
    case 0xe0: return array(1);
    case 0xf0: return array(4);
    default: throw BAIL; // 0x00 (described) and unknown codes
  }
}

const HEADER = ['durable', 'priority', 'ttl', 'first_acquirer', 'delivery_count'];
const PROPERTIES = ['message_id', 'user_id', 'to', 'subject', 'reply_to', 'correlation_id', 'content_type',
  'content_encoding', 'absolute_expiry_time', 'creation_time', 'group_id', 'group_sequence', 'reply_to_group_id'];
const MAP_SECTIONS: Record<number, string> = { 0x71: 'delivery_annotations', 0x72: 'message_annotations', 0x74: 'application_properties', 0x78: 'footer' };

/** A composite section: rhea sets each field present and not null, in field order. */
function composite(msg: Record<string, unknown>, fields: string[]): void {
  need(1);
  const code = buf[pos++];
  const values = code === 0x45 ? [] : code === 0xc0 ? list(1) : code === 0xd0 ? list(4) : undefined;
  if (!values) throw BAIL;
  const n = Math.min(values.length, fields.length);
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v !== undefined && v !== null) msg[fields[i]] = v;
  }
}

/** A data (0x75) or amqp-sequence (0x76) body section, as rhea's unwrap_body_section. */
function bodySection(msg: Record<string, unknown>, typecode: number, classes: RheaMessageClasses): void {
  const content = value();
  const current = msg.body as { constructor?: unknown; typecode?: number; multiple?: boolean; content?: unknown } | null | undefined;
  if (current === undefined) { msg.body = new classes.Section(typecode, content); return; }
  if (current === null) throw BAIL; // rhea throws reading null's constructor: let it
  if (current.constructor === classes.Section && current.typecode === typecode) {
    if (current.multiple) (current.content as unknown[]).push(content);
    else { current.multiple = true; current.content = [current.content, content]; }
  }
}

/** The message rhea would decode from `b`, or undefined to let rhea decode it. */
export function decodeMessage(b: Buffer, classes: RheaMessageClasses): Record<string, unknown> | undefined {
  buf = b; pos = 0; end = b.length; depth = 0;
  const msg = Object.create(classes.messageProto) as Record<string, unknown>;
  try {
    while (pos < end) {
      // A section: described (0x00) by a numeric descriptor, then its value.
      if (buf[pos] !== 0x00 || pos + 3 > end) return undefined;
      let d: number;
      if (buf[pos + 1] === 0x53) { d = buf[pos + 2]; pos += 3; }
      else if (buf[pos + 1] === 0x80) { pos += 2; const v = ulong(); if (typeof v !== 'number') return undefined; d = v; }
      else return undefined;
      if (pos >= end) return undefined;
      switch (d) {
        case 0x70: composite(msg, HEADER); break;
        case 0x73: composite(msg, PROPERTIES); break;
        case 0x71: case 0x72: case 0x74: case 0x78: {
          const code = buf[pos++];
          if (code !== 0xc1 && code !== 0xd1) return undefined;
          msg[MAP_SECTIONS[d]] = map(code === 0xc1 ? 1 : 4);
          break;
        }
        case 0x75: case 0x76: bodySection(msg, d, classes); break;
        case 0x77: msg.body = value(); break;
        default: return undefined;
      }
    }
    return msg;
  } catch (e) {
    if (e === BAIL) return undefined;
    throw e;
  } finally {
    buf = EMPTY; // do not keep the last message's buffer alive
  }
}

const EMPTY = Buffer.alloc(0);
