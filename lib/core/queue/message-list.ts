/**
 * Ordered in-memory store of a list-structured queue's entries, by SCN. Removed entries leave
 * holes that are dropped from the front as it advances, and compacted when they dominate.
 * Entries carry an absolute position so consumers keep stable cursors across front trims.
 */
import type { Entry } from './entry.js';

export class MessageList {
  #items: Entry[] = [];
  /** Absolute position of #items[0]. */
  #base = 0;
  #live = 0;
  #bytes = 0;
  /** Bumped on compaction: cursors holding positions must re-find by SCN. */
  epoch = 0;
  /** While held (a dispatch scanning by position), removals leave their holes in place. */
  #holds = 0;

  get depth(): number { return this.#live; }
  get bytes(): number { return this.#bytes; }
  get start(): number { return this.#base; }
  get end(): number { return this.#base + this.#items.length; }

  append(e: Entry): void {
    e.pos = this.end;
    this.#items.push(e);
    this.#live++;
    this.#bytes += e.size;
  }

  at(pos: number): Entry | undefined { return this.#items[pos - this.#base]; }

  remove(e: Entry): boolean {
    if (e.removed) return false;
    e.removed = true;
    this.#live--;
    this.#bytes -= e.size;
    this.#trim();
    return true;
  }

  /**
   * Keeps positions stable while `fn` runs: a scan that removes entries as it walks (expired
   * ones, pre-settled deliveries) would otherwise see the list trimmed or renumbered under it.
   * The deferred trim runs once the outermost hold ends.
   */
  holdPositions<T>(fn: () => T): T {
    this.#holds++;
    try { return fn(); } finally { if (--this.#holds === 0) this.#trim(); }
  }

  /**
   * Takes `e` off the end of the list if it is the last entry and removed: an entry whose
   * publish was refused before it was stored (a transaction refused at prepare) gives its
   * SCN back, and the next publish reuses it; left as a hole, the list would hold that SCN
   * twice and positionAfter's binary search would land before the new entry. No cursor has
   * passed it: scans stop at an uncommitted entry.
   */
  dropLast(e: Entry): boolean {
    if (!e.removed || this.#items.length === 0 || this.#items[this.#items.length - 1] !== e) return false;
    this.#items.pop();
    return true;
  }

  /** First position whose SCN is greater than `scn`. */
  positionAfter(scn: number): number {
    let lo = 0, hi = this.#items.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#items[mid].scn <= scn) lo = mid + 1; else hi = mid;
    }
    return this.#base + lo;
  }

  /** Live entries oldest first. */
  *live(): IterableIterator<Entry> {
    for (const e of this.#items) if (!e.removed) yield e;
  }

  #trim(): void {
    if (this.#holds > 0) return;
    let n = 0;
    while (n < this.#items.length && this.#items[n].removed) n++;
    if (n > 0 && (n > 1024 || n === this.#items.length || n * 2 > this.#items.length)) {
      this.#items.splice(0, n);
      this.#base += n;
    } else if (this.#items.length > 4096 && this.#live * 2 < this.#items.length) {
      // Holes in the middle (LVQ replacements, out-of-order acks): compact and renumber.
      this.#items = this.#items.filter((x) => !x.removed);
      for (let i = 0; i < this.#items.length; i++) this.#items[i].pos = this.#base + i;
      this.epoch++;
    }
  }
}
