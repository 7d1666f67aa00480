/**
 * Long in-memory passes done a slice per event-loop turn, so other clients are served between
 * slices: pruning a SOW queue's key lists at a million keys took 0.3-2.4 s in one go, inside
 * the publish of the delete that made it due (session 24).
 */

/** Runs `step` until it returns true; how (synchronously in tests, or one call per turn). */
export type SliceScheduler = (step: () => boolean) => void;

/** One step per event-loop turn (setImmediate: I/O callbacks run between steps). */
export const eachTurn: SliceScheduler = (step) => {
  const next = (): void => { if (!step()) setImmediate(next); };
  setImmediate(next);
};

/** Every step at once (unit tests that want the old synchronous behaviour). */
export const atOnce: SliceScheduler = (step) => { while (!step()) { /* next slice */ } };

/** Items one slice of a key-list pass looks at (a Map lookup each: about 1-2 ms). */
export const KEYS_PER_SLICE = 16384;

/**
 * A filter over a sorted list and the first items of an unsorted list appended to since,
 * a slice at a time: what a key list keeps after dropping keys that have gone. Items
 * appended to `fresh` after the pass started are not looked at (the owner keeps them).
 */
export class SlicedFilter {
  readonly #sorted: readonly string[];
  readonly #fresh: readonly string[];
  readonly #freshEnd: number;
  readonly #keep: (key: string) => boolean;
  #i = 0;
  readonly sortedOut: string[] = [];
  readonly freshOut: string[] = [];
  cancelled = false;

  constructor(sorted: readonly string[], fresh: readonly string[], keep: (key: string) => boolean) {
    this.#sorted = sorted; this.#fresh = fresh; this.#freshEnd = fresh.length; this.#keep = keep;
  }

  /** Where `fresh` ended when the pass started: items after it were not looked at. */
  get freshEnd(): number { return this.#freshEnd; }

  /** Looks at up to `budget` more items; true once every item is looked at. */
  step(budget = KEYS_PER_SLICE): boolean {
    const sorted = this.#sorted, nSorted = sorted.length, total = nSorted + this.#freshEnd;
    const end = Math.min(total, this.#i + budget);
    for (let i = this.#i; i < end; i++) {
      if (i < nSorted) { const k = sorted[i]; if (this.#keep(k)) this.sortedOut.push(k); }
      else { const k = this.#fresh[i - nSorted]; if (this.#keep(k)) this.freshOut.push(k); }
    }
    this.#i = end;
    return end >= total;
  }
}
