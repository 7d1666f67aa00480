/**
 * The SOW extension's tables (architecture.md "Storage keyspace"):
 *   sow/<q>  [0x20][qid][key utf8]                 -> current record (event record: meta + message)
 *   hist/<q> [0x21][qid][key utf8][0x00][scn 8]    -> a version (current ones too), or a tombstone
 *   time/<q> [0x22][qid][ts 8][scn 8]              -> empty: time index for timestamp bookmarks
 * The log itself is the core's `log` table: [0x10][qid][scn] -> event (op, key, ts) + the
 * resulting record state (for deletes: the last state, so a replayed delete carries it).
 */
import { registerTable, queuePrefix, writeU64, readScn } from '../../core/storage/keyspace.js';

export const SOW = registerTable('sow', 0x20);
export const HIST = registerTable('hist', 0x21);
export const TIME = registerTable('time', 0x22);

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
