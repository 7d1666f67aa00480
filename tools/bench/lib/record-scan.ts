/**
 * A cheap reader for the bench's Tidemark-only record streams (sow, historical,
 * sow-and-subscribe, replay, bootstrap). Those workloads count records and look at two
 * annotations (`x-opt-tm-cmd`, `x-opt-tm-scn`); decoding every section (header, five
 * annotations, properties, body) was 43 % of the client's CPU per record with rhea's decode,
 * and with the tuned one of `--client tuned` the client still used 8-14 µs per record against
 * 4-6 µs with this scan, on a machine where the client and the broker share two cores: the
 * client, not the broker, set the records/s. This reader finds the message-annotations
 * section with the broker's own section walker, takes those two entries and skips the rest
 * by their sizes. Anything it does not expect (an unknown constructor, a short buffer, a
 * value of another type) falls back to the whole-message decode, so the counts cannot differ.
 * `--record-decode full` keeps the client's whole-message decode (rhea's, tuned by
 * `--client tuned` or as shipped with `--client plain`): what a rhea consumer pays.
 */
import rhea from 'rhea';
import { indexSections, skipAmqpValue } from '../../../lib/codec/message-bytes.js';

const CMD = Buffer.from('x-opt-tm-cmd');
const SCN = Buffer.from('x-opt-tm-scn');

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

/** The symbol or string key at `p` equals `name`. */
function keyIs(b: Buffer, p: number, name: Buffer): boolean {
  const c = b[p];
  return (c === 0xa3 || c === 0xa1) && b[p + 1] === name.length && b.compare(name, 0, name.length, p + 2, p + 2 + name.length) === 0;
}

/**
 * `{ message_annotations: { 'x-opt-tm-cmd'?, 'x-opt-tm-scn'? } }` read from an encoded
 * message, or undefined where the whole decode must answer. The sections are found by the
 * broker's own walker (lib/codec/message-bytes.ts), which stops after the annotations.
 */
export function scanRecord(b: Buffer): { message_annotations?: Record<string, unknown> } | undefined {
  let at: [number, number] | undefined;
  try { at = indexSections(b).annotations; } catch { return undefined; }
  if (!at) return {};
  const [s, end] = at;
  const p = skipAmqpValue(b, s + 1, end); // past the section's descriptor
  if (p < 0) return undefined;
  if (b[p] === 0x40) return {};
  let count: number; let q: number;
  if (b[p] === 0xc1 && p + 3 <= end) { count = b[p + 2]; q = p + 3; }
  else if (b[p] === 0xd1 && p + 9 <= end) { count = b.readUInt32BE(p + 5); q = p + 9; }
  else return undefined;
  const ann: Record<string, unknown> = {};
  for (let i = 0; i + 1 < count; i += 2) {
    const v = skipAmqpValue(b, q, end);
    if (v < 0) return undefined;
    const next = skipAmqpValue(b, v, end);
    if (next < 0) return undefined;
    if (keyIs(b, q, CMD)) { const t = readText(b, v); if (t === undefined) return undefined; ann['x-opt-tm-cmd'] = t; }
    else if (keyIs(b, q, SCN)) { const n = readInteger(b, v); if (n === undefined) return undefined; ann['x-opt-tm-scn'] = n; }
    q = next;
  }
  return { message_annotations: ann };
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
