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
 * Bounded, because a manual compaction holds up LevelDB's own (writes arriving meanwhile
 * pile up in level 0 and could be slowed): only after `afterMB` were written since the last
 * pass and then nothing for `idleMs`; only the [table][queue] ranges written since; each only
 * if LevelDB estimates it at most `maxMB`; one range at a time, and a batch arriving during a
 * pass ends it (the rest waits for the next quiet moment). `idleMs` 0 turns it off, and off
 * is the default (conf/broker.json): a pass rewrites each written range whole, so after
 * every `afterMB` written the disk sees up to `maxMB` more per range; it suits a
 * bulk-load-then-query deployment, not a steady stream of writes with short pauses.
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
  /** [tag][qid] prefixes written since the last pass, by tag * 2^32 + qid. */
  readonly #dirty = new Map<number, Buffer>();
  #bytes = 0;
  #timer?: NodeJS.Timeout;
  #batches = 0;
  #running?: Promise<void>;
  #closed = false;
  /** A pass stopped early: its ranges are compacted at the next quiet moment, whatever is written. */
  #owed = false;
  /** Passes completed and ranges compacted (tests, statistics). */
  readonly stats = { passes: 0, ranges: 0, skipped: 0 };

  constructor(store: CompactableStore, cfg: IdleCompactionConfig) {
    this.#store = store;
    this.#cfg = cfg;
  }

  /** A batch was written: note its size and ranges, and push the quiet moment back. */
  written(ops: readonly BatchOp[]): void {
    if (this.#closed || this.#cfg.idleMs <= 0) return;
    this.#batches++;
    for (const op of ops) {
      const k = op.key;
      this.#bytes += k.length + (op.type === 'put' ? op.value.length : 0);
      if (k.length < 5 || k[0] < FIRST_QUEUE_TABLE) continue;
      const id = k[0] * 0x100000000 + k.readUInt32BE(1);
      if (!this.#dirty.has(id)) this.#dirty.set(id, Buffer.from(k.subarray(0, 5)));
    }
    if (this.#owed || this.#bytes >= this.#cfg.afterMB * MiB) this.#arm();
  }

  #arm(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => { this.#timer = undefined; void this.#pass(); }, this.#cfg.idleMs);
    this.#timer.unref?.();
  }

  #pass(): Promise<void> {
    if (this.#running || this.#closed) return this.#running ?? Promise.resolve();
    const run = async () => {
      const startedAt = this.#batches;
      this.#bytes = 0;
      for (const [id, prefix] of [...this.#dirty]) {
        if (this.#closed || this.#batches !== startedAt) break; // not idle any more: later
        this.#dirty.delete(id);
        const end = prefixEnd(prefix);
        try {
          const size = await this.#store.approximateSize(prefix, end);
          if (size > this.#cfg.maxMB * MiB) { this.stats.skipped++; continue; }
          const t0 = Date.now();
          await this.#store.compactRange(prefix, end);
          this.stats.ranges++;
          log.debug('compacted a written range while idle', { table: prefix[0], queue: prefix.readUInt32BE(1), mb: Math.round(size / MiB), ms: Date.now() - t0 });
        } catch (err) {
          if (!this.#closed) log.warn('idle compaction failed', { err: String((err as Error)?.message ?? err) });
        }
      }
      this.#owed = this.#batches !== startedAt && this.#dirty.size > 0;
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
