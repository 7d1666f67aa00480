/**
 * Entries given back (released, modified) below an acquiring consumer's `skipTo`: the ones it
 * must look at again before it goes on from `skipTo`, lowest SCN first, so that a released
 * message still goes to it before later ones (FIFO). Before, a release moved `skipTo` back to
 * the released position and the consumer re-tested everything from there: with a filter that
 * matched nothing on a 100k-deep queue, each release re-tested the whole queue (a consumer
 * holding 1000 unsettled that closed held the event loop 4.9 s).
 */
import type { Entry } from './entry.js';
import { MinHeap } from '../min-heap.js';

const scnOf = (e: Entry): number => e.scn;

export class ReleasedEntries {
  #heap = new MinHeap<Entry>(scnOf);
  /** What the heap holds: an entry released again while waiting is not added twice. */
  readonly #held = new Set<Entry>();

  get size(): number { return this.#heap.size; }

  add(e: Entry): void {
    if (this.#held.has(e)) return;
    this.#held.add(e);
    this.#heap.push(e);
  }

  /** The lowest waiting entry, left in place. */
  peek(): Entry | undefined { return this.#heap.peek(); }

  pop(): Entry | undefined {
    const e = this.#heap.pop();
    if (e !== undefined) this.#held.delete(e);
    return e;
  }

  /** Drops the entries no consumer can take again (gone, or acquired: a new release adds them back). */
  prune(): void {
    this.#heap.keep((e) => {
      const keep = !e.removed && !e.acquiredBy;
      if (!keep) this.#held.delete(e);
      return keep;
    });
  }

  clear(): void {
    if (this.#heap.size === 0) return;
    this.#heap = new MinHeap<Entry>(scnOf);
    this.#held.clear();
  }
}
