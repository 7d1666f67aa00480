/**
 * The state of a SOW queue at SCN S from its history (semantics.md 6): per key the newest
 * retained version with SCN <= S, unless that version is a tombstone.
 *
 * The version index (version-index.ts) names each key's answer, so the scan visits every
 * key once, in key order, and reads exactly the picked `hist` rows: one getMany per chunk
 * of keys, at one LevelDB snapshot, the next chunk read while this one is sent. A key whose
 * answer is its current record (unchanged since S) takes it from memory instead, as a
 * current snapshot does (current-snapshot.ts: a record is never changed once made). The
 * other rows are old versions, read once: they are read past LevelDB's block cache
 * (fillCache off), which keeps the cache for live traffic and costs less per row.
 * Open it at a quiescent point of the committer (nothing being written): the index and the
 * snapshot then hold the same versions, and its index reader keeps picking what that
 * snapshot holds until close() (VersionIndex.openReader).
 */
import type { Snapshot, Store } from '../../core/storage/store.js';
import { eventIsDelete, eventMessage, eventTs } from '../../core/engine/event-record.js';
import { histKey } from './tables.js';
import type { VersionIndex, IndexReader } from './version-index.js';
import type { SowRecord } from './sow-structure.js';

/** A record of the answer: its key, the SCN and time of the version, the message bytes. */
export interface HistoricalRow { key: string; scn: number; ts: number; bytes: Buffer }

/** Keys looked at per step, so memory stays bounded whatever the number of keys. */
const CHUNK = 1000;
/**
 * Chunks read ahead: point reads of versions spread over the table touch a block each, so a
 * chunk takes LevelDB a few ms; two in flight keep the link from waiting on them.
 */
const AHEAD = 2;

interface Chunk {
  /** Rows taken from memory, and for each one read its place in `rows`. */
  rows: Array<HistoricalRow | undefined>;
  at: number[]; keys: string[]; scns: number[];
  values: Promise<Array<Buffer | undefined>>;
}

export class HistoricalScan {
  readonly #store: Store;
  readonly #records: ReadonlyMap<string, SowRecord>;
  readonly #qid: number;
  readonly #S: number;
  readonly #snapshot: Snapshot;
  readonly #reader: IndexReader;
  #pos = 0;
  /** Chunks being read, oldest first (AHEAD of them while one is sent). */
  #ahead: Chunk[] = [];
  #closed = false;

  /** `S` is the point asked for, `committed` the last committed SCN now (versions above it are not in the snapshot). */
  constructor(store: Store, records: ReadonlyMap<string, SowRecord>, qid: number, index: VersionIndex, S: number, committed: number) {
    this.#store = store;
    this.#records = records;
    this.#qid = qid;
    this.#S = Math.min(S, committed);
    this.#snapshot = store.snapshot();
    this.#reader = index.openReader(this.#S);
  }

  /** Picks the next chunk's versions and starts reading them. */
  #read(): Chunk | undefined {
    const all = this.#reader.keys;
    if (this.#pos >= all.length) return undefined;
    const rows: Array<HistoricalRow | undefined> = [], at: number[] = [], keys: string[] = [], scns: number[] = [], reads: Buffer[] = [];
    const end = Math.min(all.length, this.#pos + CHUNK);
    const newest = { is: false };
    for (; this.#pos < end; this.#pos++) {
      const key = all[this.#pos];
      const scn = this.#reader.versionAt(key, newest);
      if (scn === undefined) continue;
      const r = newest.is ? this.#records.get(key) : undefined;
      if (r !== undefined && r.scn === scn) { rows.push({ key, scn, ts: r.ts, bytes: r.bytes }); continue; }
      at.push(rows.length); rows.push(undefined); keys.push(key); scns.push(scn); reads.push(histKey(this.#qid, key, scn));
    }
    return { rows, at, keys, scns, values: reads.length ? this.#store.getMany(reads, this.#snapshot, false) : Promise.resolve([]) };
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
    const rows = chunk.rows;
    for (let i = 0; i < chunk.keys.length; i++) {
      const v = values[i];
      if (!v) continue; // (not possible at a quiescent point; defensive)
      if (eventIsDelete(v)) continue; // a tombstone: no record at S
      rows[chunk.at[i]] = { key: chunk.keys[i], scn: chunk.scns[i], ts: eventTs(v), bytes: eventMessage(v) };
    }
    return chunk.at.length ? rows.filter((r): r is HistoricalRow => r !== undefined) : rows as HistoricalRow[];
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
