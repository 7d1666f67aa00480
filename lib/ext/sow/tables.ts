/**
 * The SOW extension's tables (architecture.md "Storage keyspace"):
 *   sow/<q>  [0x20][qid][key utf8]                 -> current record (event record: meta + message)
 *   hist/<q> [0x21][qid][key utf8][0x00][scn 8]    -> a version (current ones too), or a tombstone
 *   time/<q> [0x22][qid][ts 8][scn 8]              -> empty: time index for timestamp bookmarks
 * The log itself is the core's `log` table: [0x10][qid][scn] -> event (op, key, ts) + the
 * resulting record state (for deletes: the last state, so a replayed delete carries it).
 */
import { registerTable, queuePrefix } from '../../core/storage/keyspace.js';

export const SOW = registerTable('sow', 0x20);
export const HIST = registerTable('hist', 0x21);
export const TIME = registerTable('time', 0x22);

export function sowKey(qid: number, key: string): Buffer {
  return Buffer.concat([queuePrefix(SOW, qid), Buffer.from(key, 'utf8')]);
}
export function sowKeyOf(k: Buffer): string { return k.toString('utf8', 5); }

export function histKey(qid: number, key: string, scn: number): Buffer {
  const kb = Buffer.from(key, 'utf8');
  const b = Buffer.allocUnsafe(5 + kb.length + 9);
  queuePrefix(HIST, qid).copy(b, 0);
  kb.copy(b, 5);
  b[5 + kb.length] = 0;
  b.writeBigUInt64BE(BigInt(scn), 6 + kb.length);
  return b;
}
export function parseHistKey(k: Buffer): { key: string; scn: number } {
  return { key: k.toString('utf8', 5, k.length - 9), scn: Number(k.readBigUInt64BE(k.length - 8)) };
}

export function timeKey(qid: number, ts: number, scn: number): Buffer {
  const b = Buffer.allocUnsafe(21);
  queuePrefix(TIME, qid).copy(b, 0);
  b.writeBigUInt64BE(BigInt(Math.max(0, Math.floor(ts))), 5);
  b.writeBigUInt64BE(BigInt(scn), 13);
  return b;
}
