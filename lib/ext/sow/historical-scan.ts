/**
 * The state of a SOW queue at SCN S from its history (semantics.md 6): per key the newest
 * retained version with SCN <= S, unless that version is a tombstone.
 *
 * Rows of the `hist` table come in (key, SCN) order, so the answer for a key is the last row
 * of its group at or below S. The scan reads keys only (a fraction of the bytes: most rows
 * of a deep history are other versions), picks one key per group, and fetches the values of
 * the picked rows with one getMany per chunk, all at one LevelDB snapshot.
 */
import type { Cursor, Snapshot, Store } from '../../core/storage/store.js';
import { queuePrefix, prefixEnd } from '../../core/storage/keyspace.js';
import { decodeEvent } from '../../core/engine/event-record.js';
import { HIST, parseHistKey, sameHistKey, histScn } from './tables.js';

/** A record of the answer: its key, the SCN and time of the version, the message bytes. */
export interface HistoricalRow { key: string; scn: number; ts: number; bytes: Buffer }

/** Rows read per step (keys), so memory stays bounded whatever the history size. */
const CHUNK = 1000;

export class HistoricalScan {
  readonly #store: Store;
  readonly #S: number;
  readonly #snapshot: Snapshot;
  readonly #cursor: Cursor;
  /** First row key of the current group, and the group's pick so far. */
  #groupKey?: Buffer;
  #pick?: Buffer;
  #done = false;
  #ahead?: Promise<Array<[Buffer, Buffer]>>;

  constructor(store: Store, qid: number, S: number) {
    this.#store = store;
    this.#S = S;
    this.#snapshot = store.snapshot();
    const prefix = queuePrefix(HIST, qid);
    this.#cursor = store.cursor({ gte: prefix, lt: prefixEnd(prefix), keysOnly: true, snapshot: this.#snapshot });
  }

  /** The next rows of the answer (possibly none), or undefined once the scan is complete. */
  async next(): Promise<HistoricalRow[] | undefined> {
    if (this.#done) return undefined;
    // Read ahead: the next chunk of keys is read (on LevelDB's thread) while this one is
    // picked, fetched and sent.
    const entries = await (this.#ahead ?? this.#cursor.next(CHUNK));
    this.#ahead = entries.length ? this.#cursor.next(CHUNK) : undefined;
    const picked: Buffer[] = [];
    for (const [k] of entries) {
      if (!this.#groupKey || !sameHistKey(this.#groupKey, k)) {
        if (this.#pick) picked.push(this.#pick);
        this.#groupKey = k; this.#pick = undefined;
      }
      if (histScn(k) <= this.#S) this.#pick = k;
    }
    if (entries.length === 0) {
      if (this.#pick) picked.push(this.#pick);
      this.#pick = undefined;
      this.#done = true;
    }
    const rows: HistoricalRow[] = [];
    if (picked.length) {
      const values = await this.#store.getMany(picked, this.#snapshot);
      for (let i = 0; i < picked.length; i++) {
        const v = values[i];
        if (!v) continue; // (not possible at one snapshot; defensive)
        const { meta, message } = decodeEvent(v);
        if (meta.op === 'delete') continue;
        const { key, scn } = parseHistKey(picked[i]);
        rows.push({ key, scn, ts: meta.ts, bytes: message });
      }
    }
    if (this.#done) await this.close();
    return rows;
  }

  #closed = false;
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#done = true;
    const ahead = this.#ahead; this.#ahead = undefined;
    try { await ahead; } catch { /* closing anyway */ }
    try { await this.#cursor.close(); } finally { await this.#snapshot.close(); }
  }
}
