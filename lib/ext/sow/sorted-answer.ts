/**
 * Sorting a SOW answer (`order_by`) without holding the event loop (session 22 security
 * review: one synchronous Array.sort over 300k records, its comparator looking up JSON paths
 * per comparison, held the broker 6.5 s while other clients waited).
 *
 * - Each record's sort values are extracted once, when it is read (decorate-sort-undecorate);
 *   a comparison is then a few value compares, with the record's place in the answer (key
 *   order) as the last tie-break, so the order is total and equal values keep key order.
 * - With `top_n` (and nothing else needing every record) only the best skip_n + top_n are kept,
 *   in a bounded heap: O(n log k) for n records, memory O(k).
 * - Whatever remains to sort is sorted in slices: runs sorted by Array.sort, then merged pairwise,
 *   and the caller's `pause` (setImmediate) runs whenever a slice has taken SLICE_MS, so other
 *   clients are served between slices.
 */
import { orderCompare, type OrderBy } from '../../filter/order-by.js';
import { normalize } from '../../filter/compare.js';
import type { FilterEnv } from '../../filter/index.js';

/** A record of the answer with what it sorts by. */
export interface Sortable<R> { row: R; /** normalized order_by values */ vals: readonly unknown[]; /** place in key order */ seq: number }

/** Milliseconds of work between pauses. */
export const SLICE_MS = 8;
/** Records per run sorted by one Array.sort call before the merges. */
const RUN = 2048;

const NO_VALUES: readonly unknown[] = [];

/** The normalized order_by values of a record, read once. */
export function sortValues(order: OrderBy | undefined, env: FilterEnv): readonly unknown[] {
  if (!order) return NO_VALUES;
  const keys = order.keys;
  const vals = new Array<unknown>(keys.length);
  for (let k = 0; k < keys.length; k++) vals[k] = normalize(env.bodyPath(keys[k].path));
  return vals;
}

/** The comparator of an order_by over extracted values (as OrderBy.compare orders them), key order last. */
export function sortableCompare<R>(order: OrderBy | undefined): (a: Sortable<R>, b: Sortable<R>) => number {
  const desc = order ? order.keys.map((k) => k.descending) : [];
  const n = desc.length;
  return (a, b) => {
    for (let k = 0; k < n; k++) {
      const c = orderCompare(a.vals[k], b.vals[k]);
      if (c !== 0) return desc[k] ? -c : c;
    }
    return a.seq - b.seq;
  };
}

/** Keeps the `limit` smallest items under `cmp` (a max-heap of them: the worst on top). */
export class TopN<T> {
  readonly #heap: T[] = [];
  readonly #limit: number;
  readonly #cmp: (a: T, b: T) => number;

  constructor(limit: number, cmp: (a: T, b: T) => number) { this.#limit = limit; this.#cmp = cmp; }

  get size(): number { return this.#heap.length; }

  add(x: T): void {
    const h = this.#heap, cmp = this.#cmp;
    if (h.length < this.#limit) {
      let i = h.length;
      h.push(x);
      while (i > 0) {
        const p = (i - 1) >> 1;
        if (cmp(h[p], x) >= 0) break;
        h[i] = h[p]; i = p;
      }
      h[i] = x;
      return;
    }
    if (h.length === 0 || cmp(x, h[0]) >= 0) return;
    // Replace the worst and sift down.
    const n = h.length;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && cmp(h[r], h[l]) > 0 ? r : l;
      if (cmp(h[c], x) <= 0) break;
      h[i] = h[c]; i = c;
    }
    h[i] = x;
  }

  /** The items kept, in no order. */
  items(): T[] { return this.#heap; }
}

/**
 * Sorts `items` (stable), calling `pause` whenever a slice of work has taken SLICE_MS.
 * Returns the sorted array (`items` itself, or another array).
 */
export async function sortInSlices<T>(items: T[], cmp: (a: T, b: T) => number, pause: () => Promise<void>): Promise<T[]> {
  const n = items.length;
  if (n <= RUN) return items.sort(cmp);
  let t = performance.now();
  let src = items;
  for (let lo = 0; lo < n; lo += RUN) {
    const run = src.slice(lo, lo + RUN).sort(cmp);
    for (let k = 0; k < run.length; k++) src[lo + k] = run[k];
    if (performance.now() - t >= SLICE_MS) { await pause(); t = performance.now(); }
  }
  let dst = new Array<T>(n);
  for (let width = RUN; width < n; width *= 2) {
    for (let lo = 0; lo < n; lo += 2 * width) {
      const mid = Math.min(lo + width, n), hi = Math.min(lo + 2 * width, n);
      let i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        // (the left one on a tie: stable)
        dst[k++] = cmp(src[j], src[i]) < 0 ? src[j++] : src[i++];
        if ((k & 4095) === 0 && performance.now() - t >= SLICE_MS) { await pause(); t = performance.now(); }
      }
      while (i < mid) dst[k++] = src[i++];
      while (j < hi) dst[k++] = src[j++];
    }
    const done = src; src = dst; dst = done;
  }
  return src;
}
