/**
 * A cheap reader for the bench's Tidemark-only record streams (sow, historical,
 * sow-and-subscribe, replay, bootstrap). Those workloads count records and look at two
 * annotations (`x-opt-tm-cmd`, `x-opt-tm-scn`); decoding every section (header, five
 * annotations, properties, body) was 43 % of the client's CPU per record with rhea's decode,
 * and with the tuned one of `--client tuned` the client still used 8-14 µs per record against
 * 4-6 µs with this scan, on a machine where the client and the broker share two cores: the
 * client, not the broker, set the records/s. This reader walks the encoded sections to the
 * message-annotations map, takes those two entries and skips the rest by their sizes.
 * Anything it does not expect (a symbolic descriptor, an unknown constructor, a short
 * buffer) falls back to the whole-message decode, so the counts cannot differ.
 * `--record-decode full` keeps the client's whole-message decode (rhea's, tuned by
 * `--client tuned` or as shipped with `--client plain`): what a rhea consumer pays.
 */
import rhea from 'rhea';

const CMD = Buffer.from('x-opt-tm-cmd');
const SCN = Buffer.from('x-opt-tm-scn');
const MESSAGE_ANNOTATIONS = 0x72;

/** The offset just past the AMQP value at `p`, or -1 if its constructor is not one this reads. */
export function skipValue(b: Buffer, p: number): number {
  if (p >= b.length) return -1;
  const c = b[p++];
  if (c === 0x00) { // described: descriptor, then the value
    const q = skipValue(b, p);
    return q < 0 ? q : skipValue(b, q);
  }
  if (c >= 0x40 && c <= 0x45) return p; // null, true, false, uint0, ulong0, list0
  let end: number;
  switch (c >> 4) {
    case 0x5: end = p + 1; break;
    case 0x6: end = p + 2; break;
    case 0x7: end = p + 4; break;
    case 0x8: end = p + 8; break;
    case 0x9: end = p + 16; break;
    case 0xa: case 0xc: case 0xe: end = p >= b.length ? -1 : p + 1 + b[p]; break; // size in one byte
    case 0xb: case 0xd: case 0xf: end = p + 4 > b.length ? -1 : p + 4 + b.readUInt32BE(p); break; // size in four
    default: return -1;
  }
  return end > b.length ? -1 : end;
}

/** A string or symbol at `p` (str8/sym8/str32/sym32), else undefined. */
function readText(b: Buffer, p: number): string | undefined {
  const c = b[p];
  if (c === 0xa1 || c === 0xa3) return b.toString('utf8', p + 2, p + 2 + b[p + 1]);
  if (c === 0xb1 || c === 0xb3) { const n = b.readUInt32BE(p + 1); return b.toString('utf8', p + 5, p + 5 + n); }
  return undefined;
}

/** An unsigned or signed integer at `p` (the encodings an SCN can arrive in), else undefined. */
function readInteger(b: Buffer, p: number): number | undefined {
  switch (b[p]) {
    case 0x43: case 0x44: return 0;
    case 0x50: case 0x52: case 0x53: return b[p + 1];
    case 0x54: case 0x55: return b.readInt8(p + 1);
    case 0x70: return b.readUInt32BE(p + 1);
    case 0x71: return b.readInt32BE(p + 1);
    case 0x80: return b.readUInt32BE(p + 1) * 0x100000000 + b.readUInt32BE(p + 5);
    case 0x81: return b.readInt32BE(p + 1) * 0x100000000 + b.readUInt32BE(p + 5);
    default: return undefined;
  }
}

/** The key at `p` equals `name` (a symbol or string key). */
function keyIs(b: Buffer, p: number, name: Buffer): boolean {
  const c = b[p];
  if ((c === 0xa3 || c === 0xa1) && b[p + 1] === name.length) return b.compare(name, 0, name.length, p + 2, p + 2 + name.length) === 0;
  return false;
}

/**
 * `{ message_annotations: { 'x-opt-tm-cmd'?, 'x-opt-tm-scn'? } }` read from an encoded
 * message, or undefined where the full decode must answer.
 */
export function scanRecord(b: Buffer): { message_annotations?: Record<string, unknown> } | undefined {
  let p = 0;
  while (p < b.length) {
    if (b[p] !== 0x00 || p + 2 >= b.length) return undefined;
    let code: number;
    if (b[p + 1] === 0x53) { code = b[p + 2]; p += 3; }
    else if (b[p + 1] === 0x80 && p + 10 <= b.length) { if (b.readUInt32BE(p + 2) !== 0) return undefined; code = b.readUInt32BE(p + 6); p += 10; }
    else return undefined;
    if (code !== MESSAGE_ANNOTATIONS) {
      p = skipValue(b, p);
      if (p < 0) return undefined;
      continue;
    }
    if (b[p] === 0x40) return {};
    const end = skipValue(b, p); // the whole map lies in the buffer
    if (end < 0) return undefined;
    let count: number; let q: number;
    if (b[p] === 0xc1 && p + 3 <= end) { count = b[p + 2]; q = p + 3; }
    else if (b[p] === 0xd1 && p + 9 <= end) { count = b.readUInt32BE(p + 5); q = p + 9; }
    else return undefined;
    const ann: Record<string, unknown> = {};
    for (let i = 0; i + 1 < count; i += 2) {
      const v = skipValue(b, q);
      if (v < 0 || v >= end) return undefined;
      const next = skipValue(b, v);
      if (next < 0 || next > end) return undefined;
      if (keyIs(b, q, CMD)) { const s = readText(b, v); if (s === undefined) return undefined; ann['x-opt-tm-cmd'] = s; }
      else if (keyIs(b, q, SCN)) { const n = readInteger(b, v); if (n === undefined) return undefined; ann['x-opt-tm-scn'] = n; }
      q = next;
    }
    return { message_annotations: ann };
  }
  return {};
}

/**
 * The decode rhea's sessions call (`message.decode`, looked up per transfer) while `fn` runs;
 * what was there before (rhea's, or the tuned one of `--client tuned`) reads what the scan
 * hands back, and is put back after.
 */
export async function withRecordScan<T>(on: boolean, fn: () => Promise<T>): Promise<T> {
  if (!on) return fn();
  const m = (rhea as any).message;
  const before = m.decode as (b: Buffer) => any;
  m.decode = (b: Buffer) => scanRecord(b) ?? before.call(m, b);
  try { return await fn(); } finally { m.decode = before; }
}
