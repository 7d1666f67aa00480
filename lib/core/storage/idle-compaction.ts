/**
 * Compacts what was written, once the broker goes idle after writing a lot.
 *
 * LevelDB compacts lazily, and partly on reads: a read that has to look in more than one
 * file charges that file a "seek", and enough of them schedule its compaction. So the first
 * reads after a bulk load pay for compactions the writes left behind. Measured: the first
 * historical query after loading 1M events cost 1.5-1.9 s of broker CPU, the next one (or
 * the first one after a compaction) 1.0-1.1 s (docs/performance.md). Compacting the written
 * ranges while nothing else happens moves that work out of the way of the readers.
 *
 * Bounded, because a manual compaction rewrites a range whole and holds up LevelDB's own
 * (writes arriving meanwhile pile up in level 0): only after `afterMB` were written since the
 * last pass and then nothing for `idleMs`; only the [table][queue] ranges written to; each
 * only if LevelDB estimates it at most `maxMB`, and at most the bytes written to it since it
 * was last compacted (a range that is mostly new, as after a bulk load: so what a pass
 * rewrites never exceeds what was written; a large old range that took a small burst is
 * left to LevelDB); one range at a time, and a batch arriving during a pass ends it (the
 * rest waits for the next quiet moment). Quiet means no batch and nothing from any client
 * (a query or a consumer reading counts as use), so a pass does not compete with readers.
 * A steady stream of writes has no quiet moment and never sees a pass. `idleMs` 0 turns it
 * off.
 */
import type { BatchOp } from './store.js';
import { prefixEnd } from './keyspace.js';
import { logger } from '../log.js';

const log = logger('storage');

export interface IdleCompactionConfig {
  /** Quiet time after the last batch before a pass starts, ms; 0 = never compact. */
  idleMs: number;
  /** Bytes (keys + values) written since the last pass that make one worth doing, MiB. */
  afterMB: number;
  /** Ranges LevelDB estimates larger than this are left to LevelDB, MiB. */
  maxMB: number;
}

/** What the compactor needs of the store. */
export interface CompactableStore {
  compactRange(gte: Buffer, lt: Buffer): Promise<void>;
  approximateSize(gte: Buffer, lt: Buffer): Promise<number>;
}

/** Tables below this tag are broker-wide and small (queue definitions, counters): not tracked. */
const FIRST_QUEUE_TABLE = 0x10;
const MiB = 1024 * 1024;

export class IdleCompactor {
  readonly #store: CompactableStore;
  readonly #cfg: IdleCompactionConfig;
  /** [tag][qid] ranges written to, by tag * 2^32 + qid: the prefix and the bytes written since the range was last compacted. */
  readonly #dirty = new Map<number, { prefix: Buffer; bytes: number }>();
  #bytes = 0;
  #timer?: NodeJS.Timeout;
  #batches = 0;
  #running?: Promise<void>;
  #closed = false;
  /** A pass stopped early: its ranges are compacted at the next quiet moment, whatever is written. */
  #owed = false;
  /** When a client last sent anything (Date.now()): reads count as use too. */
  #lastActivity = 0;
  /** Bumped by activity(), so a pass sees a client turn up between two ranges. */
  #activities = 0;
  /** Passes completed, ranges compacted, ranges left to LevelDB: larger than maxMB, or holding more than was written to them (tests, statistics). */
  readonly stats = { passes: 0, ranges: 0, skipped: 0, older: 0 };

  constructor(store: CompactableStore, cfg: IdleCompactionConfig) {
    this.#store = store;
    this.#cfg = cfg;
  }

  /** A batch was written: note its size and ranges, and push the quiet moment back. */
  written(ops: readonly BatchOp[]): void {
    if (this.#closed || this.#cfg.idleMs <= 0) return;
    this.#batches++;
    let last: { prefix: Buffer; bytes: number } | undefined, lastId = -1;
    for (const op of ops) {
      const k = op.key;
      const n = k.length + (op.type === 'put' ? op.value.length : 0);
      this.#bytes += n;
      if (k.length < 5 || k[0] < FIRST_QUEUE_TABLE) continue;
      const id = k[0] * 0x100000000 + k.readUInt32BE(1);
      if (id !== lastId) {
        lastId = id;
        last = this.#dirty.get(id);
        if (!last) {
          // A buffer of its own: a 5-byte slice of Node's 8 KiB pool kept the whole slab alive
          // for as long as the range stayed listed (8 KiB for each queue ever written to).
          const prefix = Buffer.allocUnsafeSlow(5);
          k.copy(prefix, 0, 0, 5);
          last = { prefix, bytes: 0 };
          this.#dirty.set(id, last);
        }
      }
      last!.bytes += n;
    }
    if (this.#owed || this.#bytes >= this.#cfg.afterMB * MiB) this.#arm();
  }

  /** A deleted queue's ranges are gone: nothing of it to compact, nothing to remember. */
  forgetQueue(qid: number): void {
    for (const [id, range] of this.#dirty) if (range.prefix.readUInt32BE(1) === qid) this.#dirty.delete(id);
  }

  /** Ranges waiting for a pass (statistics, tests). */
  get pendingRanges(): number { return this.#dirty.size; }

  /**
   * A client sent something (a query's flow, a consumer's dispositions, a publish): the broker
   * is not idle, even without writes. Cheap: it runs on every socket read.
   */
  activity(): void {
    this.#lastActivity = Date.now();
    this.#activities++;
  }

  #arm(delay = this.#cfg.idleMs): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      // Quiet for writes but a client was active meanwhile: wait until it has been quiet too.
      const quietFor = Date.now() - this.#lastActivity;
      if (quietFor < this.#cfg.idleMs) { this.#arm(this.#cfg.idleMs - quietFor); return; }
      void this.#pass();
    }, delay);
    this.#timer.unref?.();
  }

  #pass(): Promise<void> {
    if (this.#running || this.#closed) return this.#running ?? Promise.resolve();
    const run = async () => {
      const startedAt = this.#batches, activitiesAt = this.#activities;
      this.#bytes = 0;
      const todo = [...this.#dirty];
      let visited = 0;
      for (const [id, range] of todo) {
        if (this.#closed || this.#batches !== startedAt || this.#activities !== activitiesAt) break; // not idle any more: later
        visited++;
        const { prefix } = range;
        const end = prefixEnd(prefix);
        try {
          const size = await this.#store.approximateSize(prefix, end);
          if (size > this.#cfg.maxMB * MiB) { this.#dirty.delete(id); this.stats.skipped++; continue; }
          // Mostly old data: left to LevelDB; its written bytes count on towards a later pass.
          if (size > range.bytes) { this.stats.older++; continue; }
          this.#dirty.delete(id);
          const t0 = Date.now();
          await this.#store.compactRange(prefix, end);
          this.stats.ranges++;
          log.debug('compacted a written range while idle', { table: prefix[0], queue: prefix.readUInt32BE(1), mb: Math.round(size / MiB), ms: Date.now() - t0 });
        } catch (err) {
          if (!this.#closed) log.warn('idle compaction failed', { err: String((err as Error)?.message ?? err) });
        }
      }
      this.#owed = visited < todo.length;
      if (!this.#owed) this.stats.passes++;
    };
    this.#running = run().finally(() => {
      this.#running = undefined;
      // Stopped early, or enough written meanwhile: the next quiet moment takes the rest.
      if (!this.#closed && (this.#owed || this.#bytes >= this.#cfg.afterMB * MiB)) this.#arm();
    });
    return this.#running;
  }

  /** Stops: no new pass; waits for a running one (the store closes after). */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    await this.#running;
  }
}
