/**
 * Paginated subscriptions (semantics.md 5): `sow_and_subscribe` with `top_n` and `skip_n`.
 *
 * A `PageIndex` keeps, for one link, every record that currently matches the link's filter,
 * sorted by `order_by` (ties, and no `order_by` at all, in the byte order of the encoded
 * SOW key: the snapshot's order). The page is the slice [skip_n, skip_n + top_n).
 *
 * Complexity: memory O(M) for M matching records (key, sort values and the last state's
 * bytes, which the link needs to deliver a record that enters the page without being
 * changed). An event costs O(log M) to locate plus O(M) for the array splice (a memmove of
 * pointers, fast for the moderate M this is meant for) and, when it can change the page,
 * O(top_n) to compare the page before and after. Events that only touch records after the
 * page end never compute the page.
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
}

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
  /** Sorted; a total order (key tie-break), so each entry has one place. */
  readonly #entries: PageEntry[] = [];
  readonly #byKey = new Map<string, PageEntry>();

  constructor(order: OrderBy | undefined, skip: number, top: number) {
    this.#order = order;
    this.skip = skip;
    this.top = top;
    order?.keys.forEach((k, i) => this.#pathIndex.set(k.path.join('\u0000'), i));
  }

  /** End of the page (exclusive index). */
  get end(): number { return this.skip + this.top; }
  get size(): number { return this.#entries.length; }

  /** The order_by values of a record. */
  valuesOf(env: FilterEnv): unknown[] {
    return this.#order ? this.#order.keys.map((k) => env.bodyPath(k.path)) : [];
  }

  entry(key: string, scn: number, ts: number, bytes: Buffer, env: FilterEnv): PageEntry {
    return { key, kb: Buffer.from(key, 'utf8'), vals: this.valuesOf(env), scn, ts, bytes };
  }

  compare(a: PageEntry, b: PageEntry): number {
    if (this.#order) {
      const c = this.#order.compare(new ValuesEnv(a.vals, this.#pathIndex) as unknown as FilterEnv, new ValuesEnv(b.vals, this.#pathIndex) as unknown as FilterEnv);
      if (c !== 0) return c;
    }
    return Buffer.compare(a.kb, b.kb);
  }

  /** Loads the matching records, already in page order (the snapshot's sort). */
  load(sorted: PageEntry[]): void {
    this.#entries.length = 0;
    this.#byKey.clear();
    for (const e of sorted) { this.#entries.push(e); this.#byKey.set(e.key, e); }
  }

  /** Index where `e` is or would go. */
  #search(e: PageEntry): number {
    const a = this.#entries;
    let lo = 0, hi = a.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.compare(a[mid], e) < 0) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  get(key: string): PageEntry | undefined { return this.#byKey.get(key); }

  /** Removes a key; its former index, or -1. */
  remove(key: string): number {
    const e = this.#byKey.get(key);
    if (!e) return -1;
    const i = this.#search(e);
    // The order is total, so the search lands on it; guard anyway against a comparator surprise.
    const at = this.#entries[i] === e ? i : this.#entries.indexOf(e);
    this.#entries.splice(at, 1);
    this.#byKey.delete(key);
    return at;
  }

  /** Inserts (a key not present); its index. */
  insert(e: PageEntry): number {
    const i = this.#search(e);
    this.#entries.splice(i, 0, e);
    this.#byKey.set(e.key, e);
    return i;
  }

  /** The page, in order. */
  page(): PageEntry[] { return this.#entries.slice(this.skip, this.end); }
}
