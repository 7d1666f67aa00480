/**
 * The state of a SOW queue at SCN S from its history (semantics.md 6): per key the newest
 * retained version with SCN <= S, unless that version is a tombstone.
 *
 * The version index (version-index.ts) names each key's answer, so the scan visits every
 * key once, in key order, and reads exactly the picked `hist` rows: one getMany per chunk
 * of keys, at one LevelDB snapshot, the next chunk read while this one is sent.
 * Open it at a quiescent point of the committer (nothing being written): the index and the
 * snapshot then hold the same versions, and the index holds back removals until close().
 */
import type { Snapshot, Store } from '../../core/storage/store.js';
import { decodeEvent } from '../../core/engine/event-record.js';
import { histKey } from './tables.js';
import type { VersionIndex } from './version-index.js';

/** A record of the answer: its key, the SCN and time of the version, the message bytes. */
export interface HistoricalRow { key: string; scn: number; ts: number; bytes: Buffer }

/** Keys looked at per step, so memory stays bounded whatever the number of keys. */
const CHUNK = 1000;
/**
 * Chunks read ahead: point reads of versions spread over the table touch a block each, so a
 * chunk takes LevelDB a few ms; two in flight keep the link from waiting on them.
 */
const AHEAD = 2;

interface Chunk { keys: string[]; scns: number[]; values: Promise<Array<Buffer | undefined>> }

export class HistoricalScan {
  readonly #store: Store;
  readonly #qid: number;
  readonly #index: VersionIndex;
  readonly #S: number;
  readonly #snapshot: Snapshot;
  readonly #reader: { keys: readonly string[]; close(): void };
  #pos = 0;
  /** Chunks being read, oldest first (AHEAD of them while one is sent). */
  #ahead: Chunk[] = [];
  #closed = false;

  /** `S` is the point asked for, `committed` the last committed SCN now (versions above it are not in the snapshot). */
  constructor(store: Store, qid: number, index: VersionIndex, S: number, committed: number) {
    this.#store = store;
    this.#qid = qid;
    this.#index = index;
    this.#S = Math.min(S, committed);
    this.#snapshot = store.snapshot();
    this.#reader = index.openReader();
  }

  /** Picks the next chunk's versions and starts reading them. */
  #read(): Chunk | undefined {
    const all = this.#reader.keys;
    if (this.#pos >= all.length) return undefined;
    const keys: string[] = [], scns: number[] = [], rows: Buffer[] = [];
    const end = Math.min(all.length, this.#pos + CHUNK);
    for (; this.#pos < end; this.#pos++) {
      const key = all[this.#pos];
      const scn = this.#index.versionAt(key, this.#S);
      if (scn === undefined) continue;
      keys.push(key); scns.push(scn); rows.push(histKey(this.#qid, key, scn));
    }
    return { keys, scns, values: rows.length ? this.#store.getMany(rows, this.#snapshot) : Promise.resolve([]) };
  }

  /** The next rows of the answer (possibly none), or undefined once the scan is complete. */
  async next(): Promise<HistoricalRow[] | undefined> {
    if (this.#closed) return undefined;
    while (this.#ahead.length <= AHEAD) {
      const c = this.#read();
      if (!c) break;
      this.#ahead.push(c);
    }
    const chunk = this.#ahead.shift();
    if (!chunk) { await this.close(); return undefined; }
    const values = await chunk.values;
    const rows: HistoricalRow[] = [];
    for (let i = 0; i < chunk.keys.length; i++) {
      const v = values[i];
      if (!v) continue; // (not possible at a quiescent point; defensive)
      const { meta, message } = decodeEvent(v);
      if (meta.op === 'delete') continue;
      rows.push({ key: chunk.keys[i], scn: chunk.scns[i], ts: meta.ts, bytes: message });
    }
    return rows;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const ahead = this.#ahead; this.#ahead = [];
    for (const c of ahead) { try { await c.values; } catch { /* closing anyway */ } }
    this.#reader.close();
    await this.#snapshot.close();
  }
}
