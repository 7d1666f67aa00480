/**
 * The application-properties of an encoded message, read with their AMQP types where rhea's
 * decoder loses them: rhea reads a `long`/`ulong` past 2^53 as a rounded number, and one past
 * 2^53 + 2^32 as its 8 raw bytes (which a filter cannot tell from a binary); and it assigns
 * map keys on a plain object, so a key `__proto__` never becomes a property. Filters read
 * properties from here only when rhea's value may be one of those (filter-env.ts), so the
 * common path decodes nothing twice.
 */
import { amqpTypes } from './amqp.js';
import { skipAmqpValue } from './message-bytes.js';

const APPLICATION_PROPERTIES = 0x74;
const SYMBOLIC_CODES = new Map([
  ['amqp:header:list', 0x70],
  ['amqp:delivery-annotations:map', 0x71],
  ['amqp:message-annotations:map', 0x72],
  ['amqp:properties:list', 0x73],
  ['amqp:application-properties:map', 0x74],
]);
const LONG = 0x81, ULONG = 0x80;

/** A 64-bit integer as filters take it: a number when exact, else a bigint. */
function integer(v: bigint): number | bigint {
  return v >= -9007199254740991n && v <= 9007199254740991n ? Number(v) : v;
}

/** Section code of the descriptor at `p` and where the section's value starts, or null. */
function sectionAt(b: Buffer, p: number): [code: number, valueStart: number] | null {
  if (b[p] !== 0x00 || p + 2 > b.length) return null;
  const dc = b[p + 1];
  if (dc === 0x53) return p + 3 <= b.length ? [b[p + 2]!, p + 3] : null;
  if (dc === 0x80) return p + 10 <= b.length ? [b.readUInt32BE(p + 2) === 0 ? b.readUInt32BE(p + 6) : -1, p + 10] : null;
  if (dc === 0xa3 || dc === 0xb3) {
    const w = dc === 0xa3 ? 1 : 4;
    if (p + 2 + w > b.length) return null;
    const s = p + 2 + w;
    const e = s + (w === 1 ? b[p + 2]! : b.readUInt32BE(p + 2));
    if (e > b.length) return null;
    return [SYMBOLIC_CODES.get(b.toString('ascii', s, e)) ?? -1, e];
  }
  return null;
}

/**
 * Every application property of the message in `bytes` (keys as rhea gives them), with
 * `long`/`ulong` values exact (a number within ±2^53, a bigint beyond) and other values as
 * rhea decodes them. Empty when there is no such section; null when the bytes cannot be read.
 */
export function readApplicationProperties(bytes: Buffer): Map<string, unknown> | null {
  try {
    let p = 0;
    while (p < bytes.length) {
      const at = sectionAt(bytes, p);
      if (at === null) return null;
      const [code, vs] = at;
      const end = skipAmqpValue(bytes, vs);
      if (end < 0) return null;
      if (code === APPLICATION_PROPERTIES) return readMap(bytes.subarray(vs, end));
      if (code < 0x70 || code > APPLICATION_PROPERTIES) return new Map(); // the body (or something odd): none
      p = end;
    }
    return new Map();
  } catch {
    return null;
  }
}

function readMap(b: Buffer): Map<string, unknown> | null {
  const out = new Map<string, unknown>();
  const r = new amqpTypes.Reader(b);
  const code = b[0];
  if (code === 0x40) return out;
  if (code !== 0xc1 && code !== 0xd1) return null;
  const w = code === 0xc1 ? 1 : 4;
  const count = w === 1 ? b[2]! : b.readUInt32BE(5);
  r.position = 1 + 2 * w;
  for (let i = 0; i + 1 < count; i += 2) {
    const key = String(amqpTypes.unwrap(r.read(), true));
    const vc = b[r.position];
    let value: unknown;
    if (vc === LONG || vc === ULONG) {
      value = integer(vc === LONG ? b.readBigInt64BE(r.position + 1) : b.readBigUInt64BE(r.position + 1));
      r.position += 9;
    } else {
      value = amqpTypes.unwrap(r.read(), true);
    }
    out.set(key, value); // a repeated key: the last wins, as in rhea's decode
  }
  return out;
}
