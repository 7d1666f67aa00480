/**
 * The SOW extension's tables (architecture.md "Storage keyspace"):
 *   sow/<q>  [0x20][qid][key utf8]                 -> current record (event record: meta + message);
 *                                                     only in a queue without history
 *   hist/<q> [0x21][qid][key utf8][0x00][scn 8]    -> a version (current ones too), or a tombstone
 *   time/<q> [0x22][qid][ts 8][scn 8]              -> empty: time index for timestamp bookmarks
 *   tomb/<q> [0x23][qid][0x01][key utf8]           -> scn 8: a deleted key, for incremental bootstraps
 *            [0x23][qid][0x00]                     -> floor scn 8, since ms f64: the tombstones are
 *                                                     complete from that SCN, kept since that time
 *   form/<q> [0x24][qid]                           -> 1: this queue keeps its current records in
 *                                                     `hist` only (a queue with history): no `sow`
 *                                                     rows (sow-structure.ts "Where records live")
 * The log itself is the core's `log` table: [0x10][qid][scn] -> event (op, key, ts) + the
 * resulting record state (for deletes: the last state, so a replayed delete carries it).
 */
import { registerTable, queuePrefix, writeU64, readScn } from '../../core/storage/keyspace.js';

export const SOW = registerTable('sow', 0x20);
export const HIST = registerTable('hist', 0x21);
export const TIME = registerTable('time', 0x22);
export const TOMB = registerTable('tomb', 0x23);
export const FORM = registerTable('form', 0x24);

/** The row that says a queue's current records are its newest `hist` versions (no `sow` rows). */
export function formKey(qid: number): Buffer { return queuePrefix(FORM, qid); }
export const RECORDS_IN_HIST = Buffer.from([1]);

export function sowKey(qid: number, key: string): Buffer {
  const b = Buffer.allocUnsafe(5 + Buffer.byteLength(key, 'utf8'));
  b[0] = SOW;
  b.writeUInt32BE(qid, 1);
  b.write(key, 5, 'utf8');
  return b;
}
export function sowKeyOf(k: Buffer): string { return k.toString('utf8', 5); }

export function histKey(qid: number, key: string, scn: number): Buffer {
  const kl = Buffer.byteLength(key, 'utf8');
  const b = Buffer.allocUnsafe(5 + kl + 9);
  b[0] = HIST;
  b.writeUInt32BE(qid, 1);
  b.write(key, 5, 'utf8');
  b[5 + kl] = 0;
  writeU64(b, scn, 6 + kl);
  return b;
}
export function parseHistKey(k: Buffer): { key: string; scn: number } {
  return { key: k.toString('utf8', 5, k.length - 9), scn: readScn(k, k.length - 8) };
}

export function timeKey(qid: number, ts: number, scn: number): Buffer {
  const b = Buffer.allocUnsafe(21);
  b[0] = TIME;
  b.writeUInt32BE(qid, 1);
  writeU64(b, Math.max(0, Math.floor(ts)), 5);
  writeU64(b, scn, 13);
  return b;
}

/** True when two hist rows belong to the same key (compared in place, no string built). */
export function sameHistKey(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && a.compare(b, 0, b.length - 8, 0, a.length - 8) === 0;
}
/** The SCN of a hist row key. */
export function histScn(k: Buffer): number { return readScn(k, k.length - 8); }

/** A deleted key's tombstone row (its value: the SCN of the delete). */
export function tombKey(qid: number, key: string): Buffer {
  const b = Buffer.allocUnsafe(6 + Buffer.byteLength(key, 'utf8'));
  b[0] = TOMB;
  b.writeUInt32BE(qid, 1);
  b[5] = 1;
  b.write(key, 6, 'utf8');
  return b;
}
/** The row saying from which SCN the tombstone rows are complete, and since when they are kept. */
export function tombFloorKey(qid: number): Buffer {
  const b = Buffer.allocUnsafe(6);
  b[0] = TOMB;
  b.writeUInt32BE(qid, 1);
  b[5] = 0;
  return b;
}
export function tombKeyOf(k: Buffer): string { return k.toString('utf8', 6); }
export function encodeTombFloor(floor: number, sinceMs: number): Buffer {
  const b = Buffer.allocUnsafe(16);
  writeU64(b, floor, 0);
  b.writeDoubleBE(sinceMs, 8);
  return b;
}
export function decodeTombFloor(v: Buffer): { floor: number; sinceMs: number } | undefined {
  return v.length === 16 ? { floor: readScn(v, 0), sinceMs: v.readDoubleBE(8) } : undefined;
}
