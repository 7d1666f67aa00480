/**
 * Which versions of each key the `hist` table holds, in memory: per key the ascending SCNs
 * of its rows (superseded versions, tombstones and the current version alike).
 *
 * Why: a historical query needs per key the newest version at or below S. Found by scanning
 * the table it visits every retained version (1M rows for 100k keys x 10 versions), and
 * LevelDB through classic-level costs ~1.2 us per row visited even reading keys only: over
 * a second before the first record leaves. With this index the query visits each key once,
 * picks its version here and reads exactly those rows (historical-scan.ts).
 * Cost per retained version: 8 bytes in a plain array up to 32 versions of a key, 4 bytes
 * off the JS heap past that; plus ~150 bytes per key (docs/performance.md).
 *
 * Kept in step with the table at commit time (sow-structure.ts: a version is added when its
 * batch is durable, and removed when the batch that deletes its row is), so at a quiescent
 * point of the committer the index and a LevelDB snapshot taken there agree. A reader that
 * streams from such a snapshot (IndexReader) must go on seeing the index as it was then:
 * additions are SCNs above its S, so they change nothing it asks; a removal of the version it
 * would pick for a key (the newest at or below its S) is noted in that reader's pins, and
 * the index itself moves on. So a reader opened later sees the table as it is then, and a
 * reader held open for long (a stalled consumer) costs at most one pin per key it lost, not
 * every removal meanwhile (removals used to be held back while any reader was open: a
 * historical query opened meanwhile was answered from a newer snapshot that no longer had
 * the held rows, and lost those keys).
 *
 * Key order, the order of the answer, is UTF-8 byte order (LevelDB's order of the table).
 * The sorted list is kept between queries; keys new since the last query are sorted and
 * merged in when the next one opens.
 */

import { SlicedFilter, atOnce, eachTurn, type SliceScheduler } from '../../core/slices.js';

/** Versions a key keeps in a plain array before they move to a Float64Array. */
const SMALL = 32;
/** Keys with no versions left that may wait for a merge; past it (and a quarter of the keys) they are compacted away. */
const COMPACT_MIN = 1024;

/**
 * A key's ascending SCNs past SMALL of them (fewer are a plain number[] in the map): a
 * typed array (doubling) off the JS heap, so a deep history costs 4 bytes a version and
 * nothing for the GC to mark or keep headroom for (the broker's RSS stays near flat as
 * versions accumulate). It holds offsets from the first SCN (Uint32Array), or SCNs
 * themselves (Float64Array) once an offset would not fit 32 bits.
 */
class DeepList {
  #big: Uint32Array | Float64Array;
  #base: number;
  length: number;

  constructor(scns: number[]) {
    this.#base = scns[0];
    this.#big = new Uint32Array(SMALL * 4);
    this.length = 0;
    for (const scn of scns) this.push(scn);
  }

  at(i: number): number { return this.#base + this.#big[i]; }

  push(scn: number): void {
    let big = this.#big;
    if (big instanceof Uint32Array && scn - this.#base > 0xffffffff) {
      const abs = new Float64Array(big.length);
      for (let i = 0; i < this.length; i++) abs[i] = this.#base + big[i];
      this.#big = big = abs;
      this.#base = 0;
    }
    if (this.length === big.length) {
      const grown = new (big.constructor as Uint32ArrayConstructor | Float64ArrayConstructor)(big.length * 2);
      grown.set(big);
      this.#big = big = grown;
    }
    big[this.length++] = scn - this.#base;
  }

  /** Removes index i; halves the array when three quarters are unused (a purge took most of a deep history). */
  removeAt(i: number): void {
    const b = this.#big;
    b.copyWithin(i, i + 1, this.length);
    this.length--;
    if (this.length * 4 < b.length && b.length > SMALL * 4) this.#big = b.slice(0, b.length / 2);
  }

  toArray(): number[] {
    const out: number[] = [];
    for (let i = 0; i < this.length; i++) out.push(this.at(i));
    return out;
  }
}

type Scns = number[] | DeepList;
const at = (v: Scns, i: number) => (Array.isArray(v) ? v[i] : v.at(i));

/** Index of the first SCN >= scn, or with `above` the first > scn: a binary search. */
function bound(v: Scns, scn: number, above: boolean): number {
  let lo = 0, hi = v.length;
  if (Array.isArray(v)) {
    while (lo < hi) { const mid = (lo + hi) >>> 1; const x = v[mid]; if (x < scn || (above && x === scn)) lo = mid + 1; else hi = mid; }
  } else {
    while (lo < hi) { const mid = (lo + hi) >>> 1; const x = v.at(mid); if (x < scn || (above && x === scn)) lo = mid + 1; else hi = mid; }
  }
  return lo;
}

/** The index as a snapshot taken at S sees it (VersionIndex.openReader). */
export interface IndexReader {
  /** The keys in UTF-8 byte order when it opened (empty unless asked for). */
  readonly keys: readonly string[];
  /** The newest version of `key` at or below S; `newest` as in VersionIndex.versionAt. */
  versionAt(key: string, newest?: { is: boolean }): number | undefined;
  close(): void;
}

export class VersionIndex {
  readonly #entries = new Map<string, Scns>();
  /** Keys in byte order, as of the last merge (some may have no versions left). */
  #sorted: string[] = [];
  /** Keys added since the last merge, in no order. */
  #fresh: string[] = [];
  /** Keys of #sorted with no versions left (dropped at the next merge). */
  #empty = 0;
  /** Open readers: their S and the versions at S removed since they opened. */
  readonly #readers = new Set<{ S: number; pins: Map<string, number> }>();
  /** Retained versions indexed. */
  size = 0;
  /** The compaction pass under way (compactSoon), if any. */
  #compaction?: SlicedFilter;
  readonly #schedule: SliceScheduler;

  constructor(schedule: SliceScheduler = eachTurn) { this.#schedule = schedule; }

  /** A version committed now (its SCN is above every SCN of the key already here). */
  add(key: string, scn: number): void { this.#put(key, scn, this.#fresh); }

  /**
   * Recovery: rows read in table order, (key, SCN) ascending, so keys arrive sorted and go
   * straight to the sorted list.
   */
  load(key: string, scn: number): void { this.#put(key, scn, this.#sorted); }

  /** Adds a version; a key seen for the first time joins `keys` (the fresh or the sorted list). */
  #put(key: string, scn: number, keys: string[]): void {
    const e = this.#entries.get(key);
    if (!e) {
      this.#entries.set(key, [scn]);
      keys.push(key);
    } else {
      this.#append(key, e, scn);
    }
    this.size++;
  }

  #append(key: string, e: Scns, scn: number): void {
    if (e.length === 0) this.#empty--;
    if (!Array.isArray(e)) e.push(scn);
    else if (e.length < SMALL) e.push(scn);
    else { const d = new DeepList(e); d.push(scn); this.#entries.set(key, d); }
  }

  /** A version's row was deleted (history window, granularity). */
  remove(key: string, scn: number): void {
    const e = this.#entries.get(key);
    if (!e) return;
    const i = bound(e, scn, false);
    if (i >= e.length || at(e, i) !== scn) return;
    if (this.#readers.size) {
      // The version a reader at S picks for this key is the newest at or below S: this one if
      // the next (if any) is above S. Such a reader keeps it; no other reader needs it.
      const next = i + 1 < e.length ? at(e, i + 1) : Infinity;
      for (const r of this.#readers) if (scn <= r.S && next > r.S && !r.pins.has(key)) r.pins.set(key, scn);
    }
    if (Array.isArray(e)) e.splice(i, 1);
    else {
      e.removeAt(i);
      if (e.length <= SMALL / 2) this.#entries.set(key, e.toArray()); // short again
    }
    this.size--;
    if (e.length === 0 && ++this.#empty > Math.max(COMPACT_MIN, this.#entries.size / 4)) this.compactSoon();
  }

  /**
   * Drops the keys with no versions left (their entry, and their place in the key lists). The
   * next historical query's merge did it, and only that: a queue whose keys churn (order ids,
   * created and deleted) and that nobody queried at a bookmark kept an entry and a listed key
   * for every key the sweep purged, without bound (session 23 review: 300k keys, 84 MB). Run
   * from remove() once a quarter of the keys are empty, a slice per event-loop turn (in one
   * go it held the broker 0.35 s at a million keys). New arrays: a reader holds the key list
   * it opened with, and its pins. A key given a version again after the pass dropped it is
   * listed again by add(), once.
   */
  compactSoon(schedule: SliceScheduler = this.#schedule): void {
    if (this.#compaction || this.#empty === 0) return;
    const filter = new SlicedFilter(this.#sorted, this.#fresh, (k) => {
      const e = this.#entries.get(k);
      if (e === undefined) return false;
      if (e.length > 0) return true;
      this.#entries.delete(k);
      this.#empty--;
      return false;
    });
    this.#compaction = filter;
    schedule(() => this.#compaction !== filter || this.#compactionStep());
  }

  /** One slice of the pass under way; true once it is done (and its lists are in place). */
  #compactionStep(): boolean {
    const filter = this.#compaction!;
    if (!filter.step()) return false;
    this.#sorted = filter.sortedOut;
    this.#fresh = filter.freshOut.concat(this.#fresh.slice(filter.freshEnd));
    this.#compaction = undefined;
    return true;
  }

  /**
   * Ends the pass under way now. Not dropped half done: the entries it has deleted are
   * still listed, and #empty no longer counts them.
   */
  #finishCompaction(): void {
    while (this.#compaction && !this.#compactionStep()) { /* next slice */ }
  }

  /** compactSoon() done now (tests, tools). */
  compact(): void {
    this.#finishCompaction();
    this.compactSoon(atOnce);
  }

  /** A compaction pass is under way (tests). */
  get compacting(): boolean { return this.#compaction !== undefined; }

  /** Keys with an entry (tests, statistics: those with no versions left count until a merge or compaction drops them). */
  get keyCount(): number { return this.#entries.size; }

  /**
   * The newest version of `key` at or below `S`, or undefined. With `newest`, also says
   * whether that version is the key's newest one here: only then can it be the key's current
   * record (a later version in the index was committed, so the record moved past it), and a
   * scan asks the records map for no other key.
   */
  versionAt(key: string, S: number, newest?: { is: boolean }): number | undefined {
    const e = this.#entries.get(key);
    if (!e) return undefined;
    const i = bound(e, S, true) - 1; // the last SCN <= S
    if (newest) newest.is = i === e.length - 1;
    return i < 0 ? undefined : at(e, i);
  }

  /** Every SCN of `key` (tests, tools). */
  versionsOf(key: string): number[] {
    const e = this.#entries.get(key);
    return !e ? [] : Array.isArray(e) ? [...e] : e.toArray();
  }

  /**
   * Opens a reader of the index as it is now, at `S` (call where its snapshot is taken, at a
   * quiescent point): what it picks for a key stays what the snapshot holds, whatever is
   * removed later. `keys`: the keys in byte order (an array nobody changes while it is held);
   * `withKeys` false skips merging them (a reader that has its own key list).
   */
  openReader(S: number, withKeys = true): IndexReader {
    const keys: readonly string[] = withKeys ? this.#merged() : [];
    const r = { S, pins: new Map<string, number>() };
    this.#readers.add(r);
    return {
      keys,
      versionAt: (key, newest) => {
        const pinned = r.pins.get(key);
        if (pinned === undefined) return this.versionAt(key, S, newest);
        if (newest) newest.is = false; // removed since: a later version replaced it
        return pinned;
      },
      close: () => { this.#readers.delete(r); },
    };
  }

  /** Readers open now (statistics, tests: every link that ends closes its reader). */
  get openReaders(): number { return this.#readers.size; }

  /** Each key with versions, and its newest SCN (recovery: the keys' current rows). */
  *newest(): IterableIterator<[string, number]> {
    for (const [k, e] of this.#entries) if (e.length > 0) yield [k, at(e, e.length - 1)];
  }

  /** The sorted list with the fresh keys merged in and the keys with no versions left dropped. */
  #merged(): string[] {
    // (Readers hold their own key list and pins: dropping a key with no versions left changes neither.)
    this.#finishCompaction(); // (a reader now: the rest of the pass is done in this turn)
    const prune = this.#empty > 0;
    if (this.#fresh.length === 0 && !prune) return this.#sorted;
    const fresh = this.#fresh;
    this.#fresh = [];
    sortBytewise(fresh);
    const old = this.#sorted;
    const out: string[] = new Array(old.length + fresh.length);
    let i = 0, j = 0, n = 0;
    const keep = (k: string) => {
      if (!prune) return true;
      const e = this.#entries.get(k)!;
      if (e.length > 0) return true;
      this.#entries.delete(k);
      return false;
    };
    while (i < old.length || j < fresh.length) {
      const k = j >= fresh.length || (i < old.length && compareBytewise(old[i], fresh[j]) <= 0) ? old[i++] : fresh[j++];
      if (keep(k)) out[n++] = k;
    }
    out.length = n;
    if (prune) this.#empty = 0;
    this.#sorted = out;
    return out;
  }
}

const SURROGATE = /[\ud800-\udfff]/;

/**
 * UTF-8 byte order is code point order; JS compares UTF-16 code units, which differs only
 * between a surrogate pair (U+10000 and up) and a code unit from U+E000 to U+FFFF.
 */
export function compareBytewise(a: string, b: string): number {
  if (a === b) return 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i), y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800 && y >= 0xd800) return rank(x) - rank(y);
    return x - y;
  }
  return a.length - b.length;
}

/** For a code unit from U+D800 up: surrogates rank above U+E000-U+FFFF, as their code points do. */
function rank(c: number): number { return c >= 0xe000 ? c - 0x800 : c + 0x2000; }

/** Sorts in UTF-8 byte order: the engine's own sort when no key has a surrogate (the same order then). */
export function sortBytewise(keys: string[]): void {
  if (keys.some((k) => SURROGATE.test(k))) keys.sort(compareBytewise);
  else keys.sort();
}
