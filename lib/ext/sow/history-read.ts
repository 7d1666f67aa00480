/**
 * Read-only access to one key's retained history (the `hist` table, tables.ts), for the
 * console's timeline. Rows are [0x21][qid][key utf8][0x00][scn 8] -> event record whose meta
 * has `ts` and `op` (`publish`, or `delete` for a tombstone with an empty message). The
 * current version is in the table too, so the last row is the present state.
 */
import type { Queue } from '../../core/queue/queue.js';
import { decodeEvent } from '../../core/engine/event-record.js';
import { histKey, parseHistKey } from './tables.js';
import { SowStructure } from './sow-structure.js';

export interface KeyVersion {
  /** SCN of the event that made this version. */
  scn: number;
  /** When the broker received it, ms since epoch. */
  ts: number;
  /** `publish` (a record state; deltas are stored merged) or `delete` (a tombstone). */
  op: 'publish' | 'delete';
  /** The stored AMQP message bytes of the version; empty for a tombstone. */
  bytes: Buffer;
}

export interface KeyHistory {
  key: string;
  /** History window of the queue, ms; undefined when the queue keeps no history. */
  windowMs?: number;
  /** Oldest first; at most `limit` (the newest ones when truncated). */
  versions: KeyVersion[];
  /** True when older versions were left out by `limit`. */
  truncated: boolean;
}

/**
 * The retained versions of `key` on a SOW queue, oldest first. Returns undefined when the
 * queue is not a SOW queue. `limit` (default 1000) keeps the newest versions; `maxBytes`
 * stops reading once the versions' stored bytes pass it (the newest are kept, at least one),
 * so a key with large versions is not read into memory whole.
 */
export async function readKeyHistory(q: Queue, key: string, opts: { limit?: number; maxBytes?: number } = {}): Promise<KeyHistory | undefined> {
  const s = q.structure;
  if (!(s instanceof SowStructure)) return undefined;
  const limit = Math.max(1, opts.limit ?? 1000);
  const maxBytes = opts.maxBytes ?? Infinity;
  if (!s.hasHistory) return { key, windowMs: undefined, versions: [], truncated: false };
  const versions: KeyVersion[] = [];
  let bytes = 0;
  let truncated = false;
  // [key][0x00][scn]: the 0x00 separator keeps "ab" out of the range of "a". Newest first, in
  // small chunks: the rows are read only as far as they are kept.
  for await (const [k, v] of q.ctx.store.rows({ gte: histKey(q.id, key, 0), lte: histKey(q.id, key, Number.MAX_SAFE_INTEGER), reverse: true }, 16)) {
    const { key: rk, scn } = parseHistKey(k);
    if (rk !== key) continue;
    if (versions.length >= limit || (versions.length > 0 && bytes + v.length > maxBytes)) { truncated = true; break; }
    const { meta, message } = decodeEvent(v);
    bytes += v.length;
    versions.push({ scn, ts: meta.ts, op: meta.op === 'delete' ? 'delete' : 'publish', bytes: Buffer.from(message) });
  }
  versions.reverse();
  return { key, windowMs: s.settings.historyWindow, versions, truncated };
}
