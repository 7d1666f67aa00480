/**
 * Gives memory back once the broker goes quiet after a burst of work.
 *
 * Under load, what the broker drops (delivered messages, the recent-events ring's old entries,
 * commit batches) is promoted into V8's old space and waits there for the next full
 * collection; V8 grows the heap to make room and keeps the grown heap, and the external
 * buffers those dead objects hold stay allocated until then too. V8's own memory reducer
 * starts 8 s after a full collection and only at a low allocation rate; a broker that went
 * quiet between two mark-compacts never saw one, and kept its peak-load footprint (measured:
 * 96 MB of heap, 58 MB of it dead, 10 s after a 1M-event load). So: once a client has sent
 * nothing for `idleMs` after at least `afterMB` of traffic, one full collection. It runs only
 * while nothing arrives, and at most once per burst, so a steady stream never pays for it;
 * it pauses the main thread for tens of milliseconds, which a client arriving just then
 * waits out.
 *
 * V8 exposes a collection only through `--expose-gc`; it is set at run time here, before
 * the function is looked up, so the broker needs no command-line flag. A regular full
 * collection frees the dead objects but evacuates few pages, and the live ones (the latest
 * records, the recent-events ring) stay scattered over every page the burst grew into
 * (measured: 46 MB of old space holding 15 MB); `--compact-on-every-full-gc`, for this one
 * collection only, moves them together so the emptied pages go back to the system (15/15).
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import { logger } from './log.js';

const log = logger('memory');
const MiB = 1024 * 1024;

export interface IdleMemoryConfig {
  /** Quiet time (no client traffic) before memory is given back, ms; 0 = never. */
  idleMs: number;
  /** Client bytes received since the last collection that make one worth doing, MiB. */
  afterMB: number;
}

let collect: (() => void) | undefined;
/** V8's full collection, made reachable once per process. */
function fullCollection(): () => void {
  if (!collect) {
    const exposed = (globalThis as { gc?: () => void }).gc;
    if (exposed) collect = exposed;
    else {
      v8.setFlagsFromString('--expose-gc');
      collect = vm.runInNewContext('gc') as () => void;
    }
  }
  return collect;
}

export class IdleMemory {
  readonly #cfg: IdleMemoryConfig;
  #bytes = 0;
  #lastActivity = 0;
  #timer?: NodeJS.Timeout;
  #closed = false;
  /** Collections run, the heap they freed in total, and the longest pause one took (statistics, tests). */
  readonly stats = { collections: 0, freedMB: 0, maxPauseMs: 0 };

  constructor(cfg: IdleMemoryConfig) {
    this.#cfg = cfg;
  }

  /** A client sent `bytes`: the broker is busy; a burst large enough arms the quiet-time check. */
  received(bytes: number): void {
    if (this.#cfg.idleMs <= 0 || this.#closed) return;
    this.#lastActivity = Date.now();
    this.#bytes += bytes;
    if (!this.#timer && this.#bytes >= this.#cfg.afterMB * MiB) this.#arm(this.#cfg.idleMs);
  }

  #arm(delay: number): void {
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (this.#closed) return;
      const quietFor = Date.now() - this.#lastActivity;
      if (quietFor < this.#cfg.idleMs) { this.#arm(this.#cfg.idleMs - quietFor); return; }
      this.#bytes = 0;
      const before = process.memoryUsage().heapUsed;
      const t0 = performance.now();
      const gc = fullCollection();
      v8.setFlagsFromString('--compact-on-every-full-gc');
      try { gc(); } finally { v8.setFlagsFromString('--no-compact-on-every-full-gc'); }
      const freed = Math.max(0, before - process.memoryUsage().heapUsed) / MiB;
      const ms = performance.now() - t0;
      this.stats.collections++;
      this.stats.freedMB += freed;
      this.stats.maxPauseMs = Math.max(this.stats.maxPauseMs, ms);
      log.debug('gave memory back while idle', { freedMB: Math.round(freed), ms: Math.round(ms) });
    }, delay);
    this.#timer.unref?.();
  }

  close(): void {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
