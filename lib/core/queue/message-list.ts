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
