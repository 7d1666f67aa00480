/**
 * The current records of a SOW queue at the last committed SCN S, in key order (UTF-8 byte
 * order, the `sow` table's), read from memory where memory still holds them. The keys come
 * sorted from the structure (sorted-keys.ts).
 *
 * The structure keeps every current record in memory (`records`), and a record object is
 * never changed once made: an event replaces it. So a key whose record in memory has an SCN
 * <= S has not changed since S (an event after S would have replaced or removed it, and a
 * failed one restores what stood before it) and that record is its state at S. Only a key
 * changed since S (or whose change is still being written) is read from the LevelDB snapshot
 * taken at S, with one point read per chunk for all such keys (getMany). Nothing of a record
 * is held between chunks: the snapshot keeps the key list (as a historical query's scan
 * keeps the version index's) and a position in it.
 *
 * Why: reading the table through an iterator cost ~2-3.5 us of CPU per record (a Buffer and
 * a string made per row by the binding, then the row's decode); the key list sorted and
 * looked up in memory ~0.2-0.5 us, sort included (docs/performance.md, session 18).
 *
 * A changed key is read where the structure keeps its record at S: its `sow` row, or in a
 * queue with history its version at S in `hist` (sow-structure.ts "Where records live").
 *
 * Open it at a quiescent point of the committer, as the iterator was: every event <= S is
 * then durable and its record in memory, and the LevelDB snapshot holds exactly them.
 */
import type { Snapshot, Store } from '../../core/storage/store.js';
import { decodeEvent } from '../../core/engine/event-record.js';
import { compareBytewise } from './version-index.js';
import type { SowRecord } from './sow-structure.js';

/** A record of the snapshot: its key, SCN, time, message bytes, and expiry (ms) if it has a TTL. */
export interface SnapshotRow { key: string; scn: number; ts: number; bytes: Buffer; exp?: number }

/** A key's row at S and, where the row does not say it, its SCN; none if it had no record then. */
export interface RecordRows {
  at(key: string): { row: Buffer; scn?: number } | undefined;
  close(): void;
}

/** What the snapshot reads of the SOW structure. */
export interface RecordSource {
  readonly records: ReadonlyMap<string, SowRecord>;
  /** Every key that may have a record at the last committed SCN, in UTF-8 byte order (see SowStructure.snapshotKeys). */
  snapshotKeys(): readonly string[];
  /**
   * Where each key's record at S is stored, for a snapshot taken now (at a quiescent point,
   * S the last committed SCN), readable until close() (see SowStructure.recordRows).
   */
  recordRows(S: number): RecordRows;
}

export class CurrentSnapshot {
  readonly #records: ReadonlyMap<string, SowRecord>;
  readonly #store: Store;
  readonly #rows: RecordRows;
  readonly #S: number;
  readonly #snapshot: Snapshot;
  readonly #keys: readonly string[];
  #pos = 0;
  #closed = false;

  /** `S`: the last committed SCN now; `afterKey`: start after this key (a resumed bootstrap). */
  constructor(source: RecordSource, store: Store, S: number, afterKey?: string) {
    this.#records = source.records;
    this.#store = store;
    this.#S = S;
    this.#snapshot = store.snapshot();
    this.#rows = source.recordRows(S);
    const keys = source.snapshotKeys();
    if (afterKey !== undefined) {
      let lo = 0, hi = keys.length;
      while (lo < hi) { const mid = (lo + hi) >>> 1; if (compareBytewise(keys[mid], afterKey) <= 0) lo = mid + 1; else hi = mid; }
      this.#pos = lo;
    }
    this.#keys = keys;
  }

  /** The next records (up to `n` keys looked at, more while none of them has one); none once done. */
  async next(n: number): Promise<SnapshotRow[]> {
    const keys = this.#keys;
    let rows: SnapshotRow[] = [];
    while (!this.#closed && rows.length === 0 && this.#pos < keys.length) {
      const from = this.#pos;
      this.#pos = Math.min(keys.length, from + n);
      rows = await this.#read(keys, from, this.#pos);
    }
    return rows;
  }

  /**
   * The records at S of the given keys (those that had one then), in that order: a `replace`
   * looks up the records its client holds that a `top_n` snapshot did not reach.
   */
  rowsOf(keys: readonly string[]): Promise<SnapshotRow[]> {
    return this.#closed ? Promise.resolve([]) : this.#read(keys, 0, keys.length);
  }

  /** The records at S of keys[from, to). */
  async #read(keys: readonly string[], from: number, to: number): Promise<SnapshotRow[]> {
    const records = this.#records, S = this.#S;
    let rows: Array<SnapshotRow | undefined> = [];
    // Keys changed since S: their place in `rows`, their key, their row and its SCN if known.
    const at: number[] = [], changed: string[] = [], reads: Buffer[] = [], scns: Array<number | undefined> = [];
    for (let i = from; i < to; i++) {
      const key = keys[i];
      const r = records.get(key);
      if (r !== undefined && r.scn <= S) {
        rows.push(r.exp !== undefined ? { key, scn: r.scn, ts: r.ts, bytes: r.bytes, exp: r.exp } : { key, scn: r.scn, ts: r.ts, bytes: r.bytes });
      } else {
        const where = this.#rows.at(key);
        if (where === undefined) continue; // no version at S: created since
        at.push(rows.length); rows.push(undefined); changed.push(key); reads.push(where.row); scns.push(where.scn);
      }
    }
    if (reads.length === 0) return rows as SnapshotRow[];
    const read = this.#store.getMany(reads, this.#snapshot);
    this.#reading = read;
    let values: Array<Buffer | undefined>;
    try { values = await read; } finally { this.#reading = undefined; }
    if (this.#closed) return [];
    let absent = 0;
    for (let i = 0; i < at.length; i++) {
      const v = values[i];
      if (!v) { absent++; continue; } // no record at S: the key was created (or re-created) since
      const { meta, message } = decodeEvent(v);
      if (meta.op === 'delete') { absent++; continue; } // its version at S is a tombstone
      // (a copy: the row's bytes outlive the value read, which holds the event's metadata too)
      const row: SnapshotRow = { key: changed[i], scn: scns[i] ?? meta.w ?? 0, ts: meta.ts, bytes: Buffer.from(message) };
      if (meta.exp !== undefined) row.exp = meta.exp;
      rows[at[i]] = row;
    }
    // Keys without a record at S leave gaps: closed up, so an empty answer means the end.
    if (absent) rows = rows.filter((r) => r !== undefined);
    return rows as SnapshotRow[];
  }

  /** A point read in progress: the LevelDB snapshot is released only after it. */
  #reading?: Promise<unknown>;

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    try { await this.#reading; } catch { /* closing anyway */ }
    this.#rows.close();
    await this.#snapshot.close();
  }
}
