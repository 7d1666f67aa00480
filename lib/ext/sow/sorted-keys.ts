/**
 * The keys of a SOW queue's records in UTF-8 byte order (the `sow` table's order), kept
 * between snapshots: current snapshots walk it (current-snapshot.ts).
 *
 * Sorting every key when a snapshot opens blocked the event loop for the sort (~0.3 s at a
 * million keys). Here a key new since the last snapshot is only noted, and the next
 * snapshot sorts just those and merges them in; a SOW whose keys stay the same (updates
 * only) costs nothing. Deletes are only counted: the next merge drops the keys that have no
 * record any more (one pass), so the list never holds more than the live keys for long.
 *
 * A list handed out is never changed afterwards (a merge makes a new one), so a snapshot can
 * walk it while the queue goes on.
 */
import { sortBytewise, compareBytewise } from './version-index.js';

/** Removed keys that may wait for the next snapshot's merge (see removed()). */
const COMPACT_MIN = 1024;

export class SortedKeys {
  /** The keys as of the last merge, in byte order; possibly some without a record now. */
  #sorted: string[] = [];
  /** Keys noted since the last merge, in no order (a key deleted and made again may be in both lists). */
  #fresh: string[] = [];
  /** Keys removed since the last merge. */
  #removed = 0;

  /** Recovery: keys read in table order, so already sorted. */
  load(key: string): void { this.#sorted.push(key); }

  /** A key got a record it did not have. */
  added(key: string): void { this.#fresh.push(key); }

  /**
   * A key lost its record. True when the keys removed since the last merge are due to be
   * dropped (past COMPACT_MIN and a quarter of the keys listed): the owner then calls list()
   * without waiting for a snapshot. Only a snapshot merged them, so a queue whose keys churn
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
   * The keys in byte order: every key with a record (`hasRecord`), and every key without one
   * that a snapshot must still look at (`held`: a delete on its way). Do not change the list
   * returned.
   */
  list(hasRecord: (key: string) => boolean, held: (key: string) => boolean): readonly string[] {
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
