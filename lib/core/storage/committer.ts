/**
 * Group commit (architecture invariant 1). Publishes from every link and queue queue up here;
 * at most one LevelDB batch is in flight, and everything that arrived meanwhile goes into the
 * next one, written with `sync` so one fsync covers many producers. Callbacks run in commit
 * order, so live dispatch happens in SCN order. No per-message promises: a callback list.
 * Why only one: classic-level runs each write on a libuv pool thread, so two batches in
 * flight can reach LevelDB in either order, and a SOW or head row written by both would end
 * with the older value (measured, too: no throughput gain; docs/performance.md).
 */
import type { BatchOp, Store } from './store.js';
import { logger } from '../log.js';

const log = logger('engine');

export type CommitCallback = (err?: Error) => void;

export interface CommitStats {
  /** Number of batches written. */
  batches: number;
  /** Number of commit groups (publishes) written. */
  groups: number;
  /** Sum of fsync'd batch latencies, ms. */
  totalLatencyMs: number;
  /** Largest batch, in groups. */
  maxGroups: number;
}

export class Committer {
  readonly #store: Store;
  readonly #maxBatch: number;
  #ops: BatchOp[] = [];
  /** Quiet ops (acks, expiry, purge deletes) of a failed batch: retried with the next batch. */
  #quiet = new WeakSet<BatchOp>();
  #retry: BatchOp[] = [];
  #callbacks: CommitCallback[] = [];
  /** For each callback, the length of #ops once its ops were queued: where its group ends. */
  #groupEnds: number[] = [];
  #inFlight = false;
  #scheduled = false;
  #quiescent: Array<() => void> = [];
  #idleWaiters: Array<() => void> = [];
  /** whenWritten() callers: each waits for the first `end` ops of #ops (those queued before it). */
  #writtenWaiters: Array<{ end: number; fn: () => void }> = [];
  readonly stats: CommitStats = { batches: 0, groups: 0, totalLatencyMs: 0, maxGroups: 0 };
  /** Observers of each finished batch (metrics). */
  onBatch?: (groups: number, ms: number) => void;
  /** Called with the ops of each batch written (idle compaction tracks what was written). */
  onWritten?: (ops: readonly BatchOp[]) => void;

  constructor(store: Store, maxBatch = 300) {
    this.#store = store;
    this.#maxBatch = Math.max(1, Math.floor(maxBatch));
  }

  /** Queues `ops` to be written atomically with others; `cb` runs once they are durable. */
  add(ops: BatchOp[], cb: CommitCallback): void {
    for (const op of ops) this.#ops.push(op);
    this.#callbacks.push(cb);
    this.#groupEnds.push(this.#ops.length);
    this.#schedule();
  }

  /**
   * Runs `fn` once everything queued so far (events and quiet ops alike) is durable, or its
   * batch failed: a receiver in rcv-settle-mode second is answered only once the removal its
   * outcome made is on disk. No group of its own: waiters ride on the batches being written.
   */
  whenWritten(fn: () => void): void {
    this.#writtenWaiters.push({ end: this.#ops.length, fn });
    this.#schedule();
  }

  /** Writes that need no callback and no ordering (deletes of acknowledged messages). */
  addQuiet(ops: BatchOp[]): void {
    if (ops.length === 0) return;
    for (const op of ops) { this.#ops.push(op); this.#quiet.add(op); }
    this.#schedule();
  }

  /**
   * Runs `fn` at a moment when no batch is being written: the store then holds exactly the
   * committed events and nothing newer, so a snapshot taken inside `fn` is consistent with
   * the committed SCNs (invariant 3). Synchronous when idle.
   */
  atQuiescentPoint(fn: () => void): void {
    if (!this.#inFlight) fn();
    else this.#quiescent.push(fn);
  }

  /** Resolves once everything queued so far is written. */
  idle(): Promise<void> {
    // Quiet ops kept from a failed batch get one more try here (stop, management waits).
    if (this.#retry.length && !this.#inFlight) {
      const r = this.#retry;
      this.#ops = r.concat(this.#ops);
      this.#groupEnds = this.#groupEnds.map((e) => e + r.length);
      for (const w of this.#writtenWaiters) w.end += r.length; // they wait for those too (queued before them)
      this.#retry = [];
      this.#schedule();
    }
    if (!this.#inFlight && this.#ops.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /**
   * A batch failed: the groups queued behind it were prepared while it was being written, on
   * the state it would have stored (a delta merged into a record it wrote, a delete after one
   * it made), so they fail with it; quiet ops stay queued (they record what did happen). A
   * write error is the disk's, not one producer's: the next batch would likely fail too.
   */
  #failQueued(err: Error): void {
    const ops = this.#ops, cbs = this.#callbacks;
    const kept: BatchOp[] = [];
    const keptBefore = new Array<number>(ops.length + 1); // quiet ops among the first i ops
    keptBefore[0] = 0;
    for (let i = 0; i < ops.length; i++) { if (this.#quiet.has(ops[i])) kept.push(ops[i]); keptBefore[i + 1] = kept.length; }
    this.#ops = kept; this.#callbacks = []; this.#groupEnds = [];
    log.error('groups queued behind the failed batch refused with it', { groups: cbs.length });
    for (const w of this.#writtenWaiters) w.end = keptBefore[Math.min(w.end, ops.length)];
    Committer.#refuse(cbs, err);
  }

  /**
   * Runs failed groups' callbacks newest first: each event's undo restores what it changed on
   * top of the ones before it (an LVQ key's previous value is announced again only once no
   * newer entry of the key is left to shadow it; undone oldest first, the key kept two values).
   */
  static #refuse(cbs: CommitCallback[], err: Error): void {
    for (let i = cbs.length - 1; i >= 0; i--) {
      try { cbs[i](err); } catch (e) { log.error('commit callback threw', { err: e }); }
    }
  }

  #schedule(): void {
    if (this.#scheduled || this.#inFlight) return;
    this.#scheduled = true;
    // setImmediate lets every transfer decoded from the same socket read join this batch.
    setImmediate(() => { this.#scheduled = false; this.#flush(); });
  }

  #flush(): void {
    if (this.#inFlight) return;
    if (this.#ops.length === 0 && this.#callbacks.length === 0) {
      // Nothing queued and nothing in flight: everything is written.
      const ww = this.#writtenWaiters; this.#writtenWaiters = [];
      for (const x of ww) { try { x.fn(); } catch (e) { log.error('written callback threw', { err: e }); } }
      const w = this.#idleWaiters; this.#idleWaiters = [];
      for (const r of w) r();
      return;
    }
    let ops = this.#ops, cbs = this.#callbacks;
    let taken = ops.length;
    if (cbs.length > this.#maxBatch) {
      // At most maxBatch groups per batch, split at a group boundary; the rest is the next
      // batch. Smaller batches settle sooner, so a producer with a bounded window keeps sending
      // while the next one is written instead of waiting for one large batch.
      const end = this.#groupEnds[this.#maxBatch - 1];
      taken = end;
      ops = this.#ops.slice(0, end);
      cbs = this.#callbacks.slice(0, this.#maxBatch);
      this.#ops = this.#ops.slice(end);
      this.#callbacks = this.#callbacks.slice(this.#maxBatch);
      this.#groupEnds = this.#groupEnds.slice(this.#maxBatch).map((e) => e - end);
    } else {
      this.#ops = []; this.#callbacks = []; this.#groupEnds = [];
    }
    if (this.#retry.length) { ops = this.#retry.concat(ops); this.#retry = []; } // older, so first
    // Waiters for no more than this batch takes are answered with it; the others wait on.
    let written: Array<() => void> | undefined;
    if (this.#writtenWaiters.length) {
      const rest: Array<{ end: number; fn: () => void }> = [];
      for (const w of this.#writtenWaiters) {
        if (w.end <= taken) (written ??= []).push(w.fn);
        else rest.push({ end: w.end - taken, fn: w.fn });
      }
      this.#writtenWaiters = rest;
    }
    this.#inFlight = true;
    const started = performance.now();
    const done = (err?: Error) => {
      const ms = performance.now() - started;
      this.#inFlight = false;
      this.stats.batches++; this.stats.groups += cbs.length; this.stats.totalLatencyMs += ms;
      if (cbs.length > this.stats.maxGroups) this.stats.maxGroups = cbs.length;
      this.onBatch?.(cbs.length, ms);
      if (!err) this.onWritten?.(ops);
      if (err) log.error('batch write failed', { err, groups: cbs.length });
      // A failed batch's events are refused through their callbacks, but its quiet deletes
      // record things that did happen (acknowledged messages): keep them for the next batch,
      // or a restart would redeliver what was consumed. Not flushed on their own (no retry
      // loop while the disk stays full).
      if (err) this.#retry = ops.filter((op) => this.#quiet.has(op)).concat(this.#retry);
      if (!err) {
        for (const cb of cbs) {
          try { cb(); } catch (e) { log.error('commit callback threw', { err: e }); }
        }
      } else {
        // Undone newest first: the groups queued behind it, then its own.
        if (this.#callbacks.length) this.#failQueued(err);
        Committer.#refuse(cbs, err);
      }
      if (written) for (const fn of written) { try { fn(); } catch (e) { log.error('written callback threw', { err: e }); } }
      const q = this.#quiescent; this.#quiescent = [];
      for (const fn of q) {
        try { fn(); } catch (e) { log.error('quiescent callback threw', { err: e }); }
      }
      ops = []; cbs = [];
      this.#flush();
    };
    if (ops.length === 0) { queueMicrotask(() => done()); return; }
    this.#store.batch(ops, true).then(() => done(), (e) => done(e));
  }
}
