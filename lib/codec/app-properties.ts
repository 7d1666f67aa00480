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
import { sectionAt, isHeadSection } from './message-head.js';

const APPLICATION_PROPERTIES = 0x74;
const LONG = 0x81, ULONG = 0x80;

/** A 64-bit integer as filters take it: a number when exact, else a bigint. */
function integer(v: bigint): number | bigint {
  return v >= -9007199254740991n && v <= 9007199254740991n ? Number(v) : v;
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
      if (!isHeadSection(code)) return new Map(); // the body (or something odd): none
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
