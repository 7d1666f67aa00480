/**
 * The keys of a SOW queue's records in UTF-8 byte order (the `sow` table's order), kept
 * between snapshots: current snapshots walk it (current-snapshot.ts).
 *
 * Sorting every key when a snapshot opens blocked the event loop for the sort (~0.3 s at a
 * million keys). Here a key new since the last snapshot is only noted, and the next
 * snapshot sorts just those and merges them in; a SOW whose keys stay the same (updates
 * only) costs nothing. Deletes are only counted: the next merge drops the keys that have no
 * record any more (one pass), so the list never holds more than the live keys for long. Once
 * they are due without a snapshot (removed()), pruneSoon() drops them a slice per event-loop
 * turn, without sorting: done in one go inside the delete's publish it held the broker
 * 0.35 s at a million keys, 2.4 s when they were all fresh (the sort).
 *
 * A list handed out is never changed afterwards (a merge makes a new one), so a snapshot can
 * walk it while the queue goes on.
 */
import { sortBytewise, compareBytewise } from './version-index.js';
import { SlicedFilter, eachTurn, type SliceScheduler } from '../../core/slices.js';

/** Removed keys that may wait for the next snapshot's merge (see removed()). */
const COMPACT_MIN = 1024;

export class SortedKeys {
  /** The keys as of the last merge, in byte order; possibly some without a record now. */
  #sorted: string[] = [];
  /** Keys noted since the last merge, in no order (a key deleted and made again may be in both lists). */
  #fresh: string[] = [];
  /** Keys removed since the last merge. */
  #removed = 0;
  /** The pruning pass under way (pruneSoon), if any. */
  #prune?: { filter: SlicedFilter; removedAtStart: number };
  readonly #schedule: SliceScheduler;

  constructor(schedule: SliceScheduler = eachTurn) { this.#schedule = schedule; }

  /** Recovery: keys read in table order, so already sorted. */
  load(key: string): void { this.#sorted.push(key); }

  /** A key got a record it did not have. */
  added(key: string): void { this.#fresh.push(key); }

  /**
   * A key lost its record. True when the keys removed since the last merge are due to be
   * dropped (past COMPACT_MIN and a quarter of the keys listed): the owner then calls
   * pruneSoon() without waiting for a snapshot. Only a snapshot merged them, so a queue whose keys churn
   * (order ids) and that nobody took a current snapshot of kept every key it ever had in
   * #fresh (a key made and deleted again and again, once per making).
   */
  removed(): boolean { return ++this.#removed - this.#heldAtMerge > Math.max(COMPACT_MIN, (this.#sorted.length + this.#fresh.length) / 4); }
  /**
   * Keys the last merge kept without a record (deletes on their way): not counted toward the
   * next one, or a batch deleting most keys would merge again at every delete after the first.
   */
  #heldAtMerge = 0;

  /**
   * Drops the keys without a record (`hasRecord`) that no snapshot must still look at (`held`:
   * a delete on its way), a slice per turn; nothing new when a pass is under way. A key made
   * again after the pass looked at it was noted again (added()), so it stays listed; a key
   * removed after it was looked at is counted for the next pass.
   */
  pruneSoon(hasRecord: (key: string) => boolean, held: (key: string) => boolean): void {
    if (this.#prune) return;
    let keptHeld = 0;
    const filter = new SlicedFilter(this.#sorted, this.#fresh, (k) => {
      if (hasRecord(k)) return true;
      if (!held(k)) return false;
      keptHeld++;
      return true;
    });
    const job = { filter, removedAtStart: this.#removed };
    this.#prune = job;
    this.#schedule(() => {
      if (filter.cancelled) return true; // a list() merged meanwhile
      if (!filter.step()) return false;
      this.#sorted = filter.sortedOut;
      this.#fresh = filter.freshOut.concat(this.#fresh.slice(filter.freshEnd));
      // As list() counts: the held keys are looked at again by the next pass.
      this.#removed = this.#removed - job.removedAtStart + keptHeld;
      this.#heldAtMerge = keptHeld;
      this.#prune = undefined;
      return true;
    });
  }

  /** A pruning pass is under way (tests). */
  get pruning(): boolean { return this.#prune !== undefined; }

  /**
   * The keys in byte order: every key with a record (`hasRecord`), and every key without one
   * that a snapshot must still look at (`held`: a delete on its way). Do not change the list
   * returned.
   */
  list(hasRecord: (key: string) => boolean, held: (key: string) => boolean): readonly string[] {
    // A snapshot now: the merge below prunes too, and the pass's lists would be stale after it.
    if (this.#prune) { this.#prune.filter.cancelled = true; this.#prune = undefined; }
    if (this.#fresh.length === 0 && this.#removed === 0) return this.#sorted;
    const old = this.#sorted, fresh = this.#fresh;
    sortBytewise(fresh);
    const out: string[] = new Array(old.length + fresh.length);
    let i = 0, j = 0, n = 0, kept = 0;
    const prune = this.#removed > 0;
    while (i < old.length || j < fresh.length) {
      const k = j >= fresh.length || (i < old.length && compareBytewise(old[i], fresh[j]) <= 0) ? old[i++] : fresh[j++];
      if (n > 0 && out[n - 1] === k) continue; // listed twice: deleted and made again
      if (prune && !hasRecord(k)) {
        if (!held(k)) continue;
        kept++;
      }
      out[n++] = k;
    }
    out.length = n;
    this.#sorted = out;
    this.#fresh = [];
    // Keys kept only for a delete on its way: the next list looks at them again.
    this.#removed = this.#heldAtMerge = kept;
    return out;
  }

  /** Keys listed (tests, statistics). */
  get size(): number { return this.#sorted.length + this.#fresh.length; }
}
