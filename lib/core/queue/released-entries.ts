/**
 * The list positions of entries given back (released, modified) below an acquiring
 * consumer's `skipTo`: the ones it must look at again before it goes on from `skipTo`, lowest
 * first, so that a released message still goes to it before later ones (FIFO). Before, a
 * release moved `skipTo` back to the released position and the consumer re-tested everything
 * from there: with a filter that matched nothing on a 100k-deep queue, each release re-tested
 * the whole queue (a consumer holding 1000 unsettled that closed held the event loop 4.9 s).
 *
 * Positions, not entries: a consumer without credit keeps its set until it reads again, and
 * entries held here kept their messages' bytes after another consumer had taken them (2000 x
 * 32 KB released behind an idle selector consumer: 66 MB held for an empty queue). Positions
 * hold within a list epoch; the owner empties the set when the epoch changes.
 */
import { MinHeap } from '../min-heap.js';

const itself = (p: number): number => p;

export class ReleasedEntries {
  #heap = new MinHeap<number>(itself);
  /** What the heap holds: a position released again while waiting is not added twice. */
  readonly #held = new Set<number>();

  get size(): number { return this.#heap.size; }

  add(pos: number): void {
    if (this.#held.has(pos)) return;
    this.#held.add(pos);
    this.#heap.push(pos);
  }

  /** The lowest waiting position, left in place. */
  peek(): number | undefined { return this.#heap.peek(); }

  pop(): number | undefined {
    const p = this.#heap.pop();
    if (p !== undefined) this.#held.delete(p);
    return p;
  }

  /** Drops the positions no consumer can take again (`takeable` false: gone, or acquired; a new release adds them back). */
  prune(takeable: (pos: number) => boolean): void {
    this.#heap.keep((p) => {
      const keep = takeable(p);
      if (!keep) this.#held.delete(p);
      return keep;
    });
  }

  clear(): void {
    if (this.#heap.size === 0) return;
    this.#heap = new MinHeap<number>(itself);
    this.#held.clear();
  }
}
