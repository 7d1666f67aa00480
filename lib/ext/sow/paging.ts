/**
 * Paginated subscriptions (semantics.md 5): `sow_and_subscribe` with `top_n` and `skip_n`.
 *
 * A `PageIndex` keeps, for one link, every record that currently matches the link's filter,
 * sorted by `order_by` (ties, and no `order_by` at all, in the byte order of the encoded
 * SOW key: the snapshot's order). The page is the slice [skip_n, skip_n + top_n).
 *
 * Complexity: memory O(M) for M matching records (key, sort values and the last state's
 * bytes, which the link needs to deliver a record that enters the page without being
 * changed). The sorted set is a list of blocks of at most BLOCK_MAX entries, so an event
 * costs O(log M) comparisons to locate, O(BLOCK_MAX) to splice within its block and O(M /
 * BLOCK_MAX) to count its rank; when it can change the page, O(top_n) more to compare the
 * page before and after. (One sorted array cost O(M) per event in splices: ~160 µs an event
 * at 100k matching records.) Events that only touch records after the page end never
 * compute the page.
 */
import type { FilterEnv, OrderBy } from '../../filter/index.js';

export interface PageEntry {
  key: string;
  /** The key as the store orders it (UTF-8 bytes). */
  kb: Buffer;
  /** order_by values, in order_by order. */
  vals: unknown[];
  /** Last state of the record. */
  scn: number;
  ts: number;
  bytes: Buffer;
  /** `vals` as the comparator reads them (built once, not per comparison). */
  env?: FilterEnv;
}

/** Entries per block at most (a full block splits in two halves). */
const BLOCK_MAX = 512;

/** A FilterEnv that answers order_by paths from precomputed values (compare needs nothing else). */
class ValuesEnv {
  constructor(readonly vals: unknown[], readonly index: Map<string, number>) {}
  bodyPath(p: readonly (string | number)[]): unknown {
    const i = this.index.get(p.join('\u0000'));
    return i === undefined ? undefined : this.vals[i];
  }
}

export class PageIndex {
  readonly skip: number;
  readonly top: number;
  readonly #order?: OrderBy;
  readonly #pathIndex = new Map<string, number>();
  /** Sorted blocks, none empty; a total order (key tie-break), so each entry has one place. */
  #blocks: PageEntry[][] = [];
  #size = 0;
  readonly #byKey = new Map<string, PageEntry>();

  constructor(order: OrderBy | undefined, skip: number, top: number) {
    this.#order = order;
    this.skip = skip;
    this.top = top;
    order?.keys.forEach((k, i) => this.#pathIndex.set(k.path.join('\u0000'), i));
  }

  /** End of the page (exclusive index). */
  get end(): number { return this.skip + this.top; }
  get size(): number { return this.#size; }

  /** The order_by values of a record. */
  valuesOf(env: FilterEnv): unknown[] {
    return this.#order ? this.#order.keys.map((k) => env.bodyPath(k.path)) : [];
  }

  entry(key: string, scn: number, ts: number, bytes: Buffer, env: FilterEnv): PageEntry {
    return { key, kb: Buffer.from(key, 'utf8'), vals: this.valuesOf(env), scn, ts, bytes };
  }

  compare(a: PageEntry, b: PageEntry): number {
    if (this.#order) {
      const c = this.#order.compare(this.#envOf(a), this.#envOf(b));
      if (c !== 0) return c;
    }
    return Buffer.compare(a.kb, b.kb);
  }

  #envOf(e: PageEntry): FilterEnv { return (e.env ??= new ValuesEnv(e.vals, this.#pathIndex) as unknown as FilterEnv); }

  /**
   * Loads the matching records, already in page order (the snapshot's sort). `indexed`: each
   * was given to index() as it was read (a large snapshot indexes its keys in slices: 300k
   * Map inserts in one go held the event loop ~0.1-0.3 s).
   */
  load(sorted: PageEntry[], indexed = false): void {
    this.#blocks = [];
    for (let i = 0; i < sorted.length; i += BLOCK_MAX / 2) this.#blocks.push(sorted.slice(i, i + BLOCK_MAX / 2));
    if (!indexed) {
      this.#byKey.clear();
      for (const e of sorted) this.#byKey.set(e.key, e);
    }
    this.#size = sorted.length;
  }

  /** Indexes by key an entry that load() will be given. */
  index(e: PageEntry): void { this.#byKey.set(e.key, e); }

  /** Block and index within it where `e` is or would go. */
  #search(e: PageEntry): { b: number; i: number } {
    const blocks = this.#blocks;
    if (blocks.length === 0) return { b: 0, i: 0 };
    // The first block whose last entry is not before e (or the last block: e goes at its end).
    let lo = 0, hi = blocks.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const blk = blocks[mid];
      if (this.compare(blk[blk.length - 1], e) < 0) lo = mid + 1; else hi = mid;
    }
    const a = blocks[lo];
    let i = 0, j = a.length;
    while (i < j) {
      const mid = (i + j) >>> 1;
      if (this.compare(a[mid], e) < 0) i = mid + 1; else j = mid;
    }
    return { b: lo, i };
  }

  /** The index in the whole order of entry `i` of block `b`. */
  #rank(b: number, i: number): number {
    let n = i;
    for (let k = 0; k < b; k++) n += this.#blocks[k].length;
    return n;
  }

  get(key: string): PageEntry | undefined { return this.#byKey.get(key); }

  /** Removes a key; its former index, or -1. */
  remove(key: string): number {
    const e = this.#byKey.get(key);
    if (!e) return -1;
    let { b, i } = this.#search(e);
    // The order is total, so the search lands on it; guard anyway against a comparator surprise.
    if (this.#blocks[b]?.[i] !== e) {
      b = this.#blocks.findIndex((blk) => blk.includes(e));
      i = this.#blocks[b].indexOf(e);
    }
    const at = this.#rank(b, i);
    const blk = this.#blocks[b];
    blk.splice(i, 1);
    if (blk.length === 0) this.#blocks.splice(b, 1);
    this.#byKey.delete(key);
    this.#size--;
    return at;
  }

  /** Inserts (a key not present); its index. */
  insert(e: PageEntry): number {
    const { b, i } = this.#search(e);
    if (this.#blocks.length === 0) this.#blocks.push([]);
    const blk = this.#blocks[b];
    blk.splice(i, 0, e);
    const at = this.#rank(b, i);
    if (blk.length > BLOCK_MAX) this.#blocks.splice(b + 1, 0, blk.splice(BLOCK_MAX / 2));
    this.#byKey.set(e.key, e);
    this.#size++;
    return at;
  }

  /** The page, in order. */
  page(): PageEntry[] {
    const out: PageEntry[] = [];
    let skip = this.skip;
    for (const blk of this.#blocks) {
      if (skip >= blk.length) { skip -= blk.length; continue; }
      for (let i = skip; i < blk.length && out.length < this.top; i++) out.push(blk[i]);
      skip = 0;
      if (out.length >= this.top) break;
    }
    return out;
  }
}
