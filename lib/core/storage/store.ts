/**
 * The only importer of classic-level. Keys and values are Buffers; callers never see the
 * LevelDB API, only batches, range reads and snapshots.
 */
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { ClassicLevel } from 'classic-level';

export type BatchOp = { type: 'put'; key: Buffer; value: Buffer } | { type: 'del'; key: Buffer };

export interface RangeOptions {
  gte?: Buffer; gt?: Buffer; lt?: Buffer; lte?: Buffer;
  reverse?: boolean;
  limit?: number;
  /** Read at this snapshot (Store.snapshot()). */
  snapshot?: Snapshot;
  /** Skip values (keys only). */
  keysOnly?: boolean;
  /** false: the blocks read are not kept in LevelDB's block cache (a background scan of cold rows). */
  fillCache?: boolean;
}

/** Bytes one cursor step may gather before it returns: above the row counts asked for of small messages, a bound for large ones. */
const CURSOR_BATCH_BYTES = 1 << 20;

/** A consistent read view; release it when done. */
export interface Snapshot { close(): Promise<void> }

/** A pull-based range cursor: bounded memory whatever the range size. */
export interface Cursor<K = Buffer> {
  /** Up to `n` entries; empty when exhausted. */
  next(n: number): Promise<Array<[K, Buffer]>>;
  close(): Promise<void>;
}

/**
 * TEST-ONLY fault injection (spec/integration/degradation.spec.ts): while set, every batch
 * first asks `fn`; an Error it returns fails the batch as a LevelDB write error would (disk
 * full, I/O error) and nothing is written. Process-wide; pass undefined to clear. Never set
 * outside tests.
 */
let faultInjector: ((ops: readonly BatchOp[]) => Error | undefined) | undefined;
export function setFaultInjector(fn: ((ops: readonly BatchOp[]) => Error | undefined) | undefined): void { faultInjector = fn; }

/** `mkdir -p DIR` without a recursive mkdir: each missing level, from the top, with a plain mkdir. */
function makeDirectories(dir: string): void {
  const missing: string[] = [];
  for (let p = path.resolve(dir); !existsSync(p); p = path.dirname(p)) {
    missing.unshift(p);
    if (path.dirname(p) === p) break;
  }
  for (const p of missing) {
    try { mkdirSync(p); } catch (e) { if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e; }
  }
}

export class Store {
  readonly #db: ClassicLevel<Buffer, Buffer>;
  #closed = false;

  private constructor(db: ClassicLevel<Buffer, Buffer>) { this.#db = db; }

  static async open(dir: string): Promise<Store> {
    // classic-level creates the directory itself, but its recursive mkdir (and Node's own
    // mkdirSync recursive) loops forever at 100 % CPU where a directory cannot be made in an
    // existing parent (`--data /proc/nope`: ENOENT again and again): make it here, one level
    // at a time, so such a path is an error at once.
    try {
      makeDirectories(dir);
    } catch (e) {
      throw new Error(`cannot create the data directory ${dir}: ${(e as Error).message}`, { cause: e });
    }
    const db = new ClassicLevel<Buffer, Buffer>(dir, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
    try {
      await db.open();
    } catch (e) {
      // classic-level says only "Database failed to open"; the cause is what a person can act on.
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      if (cause?.code === 'LEVEL_LOCKED') throw new Error(`data directory ${dir} is in use by another process (is a broker already running on it? choose another with --data)`, { cause: e });
      throw new Error(`cannot open the data directory ${dir}: ${cause?.message ?? (e as Error).message}`, { cause: e });
    }
    return new Store(db);
  }

  get closed(): boolean { return this.#closed; }

  /** Atomic batch; `sync` forces an fsync before resolving (durability of accepted messages). */
  batch(ops: BatchOp[], sync: boolean): Promise<void> {
    const fault = faultInjector?.(ops); // test-only, see setFaultInjector
    if (fault) return Promise.reject(fault);
    // A chained batch: ops go to the native batch one by one. abstract-level's array form
    // re-validates and copies every op in JS first, about 3x slower for our 1000s-op batches
    // (measured: 3600 puts, 30 ms vs 9 ms with sync; docs/performance.md).
    const b = this.#db.batch();
    for (const op of ops) {
      if (op.type === 'put') b.put(op.key, op.value);
      else b.del(op.key);
    }
    return b.write({ sync });
  }

  async get(key: Buffer): Promise<Buffer | undefined> {
    const v = await this.#db.get(key);
    return v ?? undefined;
  }

  /**
   * Values of many keys in one call (undefined where absent), optionally at a snapshot.
   * `fillCache: false` for one-off reads of cold rows (a historical query's old versions):
   * the blocks they come from are not kept in LevelDB's block cache, so a large read does
   * not push out the blocks live traffic uses, and skips the cache's insert and eviction
   * (measured: about a fifth less CPU per row; docs/performance.md "Session 19").
   */
  async getMany(keys: Buffer[], snapshot?: Snapshot, fillCache = true): Promise<Array<Buffer | undefined>> {
    const values = await this.#db.getMany(keys, (snapshot ? { snapshot, fillCache } : { fillCache }) as any);
    return values.map((v) => v ?? undefined);
  }

  /** LevelDB's estimate of its memory in use: the block cache's contents and the memtables, in bytes. */
  approximateMemoryUsage(): number {
    return Number(this.#db.getProperty('leveldb.approximate-memory-usage'));
  }

  /** Takes an implicit snapshot now, synchronously (classic-level snapshots are sync). */
  snapshot(): Snapshot {
    return (this.#db as any).snapshot();
  }

  cursor(opts: RangeOptions): Cursor {
    // classic-level ends a nextv(n) early once it holds 16 KiB (its default), about 60 of our
    // rows: each chunk then took many thread-pool round trips. n bounds memory here instead.
    const o: any = { highWaterMarkBytes: CURSOR_BATCH_BYTES, ...opts };
    if (opts.keysOnly) { o.values = false; delete o.keysOnly; }
    const it = this.#db.iterator(o);
    return {
      async next(n: number) {
        const rows = await it.nextv(n);
        return rows as Array<[Buffer, Buffer]>;
      },
      close: () => it.close(),
    };
  }

  /** Streams a range in chunks: bounded memory whatever its size (recovery of large tables). */
  async *rows(opts: RangeOptions, chunk = 1000): AsyncGenerator<[Buffer, Buffer]> {
    const c = this.cursor(opts);
    try {
      for (;;) {
        const rows = await c.next(chunk);
        if (rows.length === 0) return;
        for (const row of rows) yield row;
      }
    } finally { await c.close(); }
  }

  /** Reads a whole range (use only for small ranges: recovery of meta rows and the like). */
  async all(opts: RangeOptions): Promise<Array<[Buffer, Buffer]>> {
    const c = this.cursor(opts);
    const out: Array<[Buffer, Buffer]> = [];
    try {
      for (;;) {
        const rows = await c.next(1000);
        if (rows.length === 0) break;
        for (const row of rows) out.push(row);
      }
    } finally { await c.close(); }
    return out;
  }

  /** Compacts the range now (LevelDB's manual compaction, on its background thread). */
  compactRange(gte: Buffer, lt: Buffer): Promise<void> {
    return (this.#db as any).compactRange(gte, lt);
  }

  /** LevelDB's estimate of the bytes the range takes on disk (memtable not included). */
  approximateSize(gte: Buffer, lt: Buffer): Promise<number> {
    return (this.#db as any).approximateSize(gte, lt);
  }

  clearRange(gte: Buffer, lt: Buffer): Promise<void> {
    return this.#db.clear({ gte, lt });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#db.close();
  }
}
