/**
 * A binary min-heap ordered by a numeric key (expiry times). Callers delete lazily: they skip
 * stale items as they reach the top, and `keep` drops stale ones in one O(n) rebuild when
 * they pile up.
 */
export class MinHeap<T> {
  #items: T[] = [];
  readonly #key: (item: T) => number;

  constructor(key: (item: T) => number) { this.#key = key; }

  get size(): number { return this.#items.length; }

  peek(): T | undefined { return this.#items[0]; }

  push(item: T): void {
    const h = this.#items, key = this.#key;
    h.push(item);
    let i = h.length - 1;
    const k = key(item);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (key(h[p]) <= k) break;
      h[i] = h[p]; i = p;
    }
    h[i] = item;
  }

  pop(): T | undefined {
    const h = this.#items;
    if (h.length === 0) return undefined;
    const top = h[0];
    const last = h.pop()!;
    if (h.length) { h[0] = last; this.#down(0); }
    return top;
  }

  /** Keeps only the items `keep` accepts (O(n)). */
  keep(keep: (item: T) => boolean): void {
    this.#items = this.#items.filter(keep);
    for (let i = (this.#items.length >> 1) - 1; i >= 0; i--) this.#down(i);
  }

  #down(i: number): void {
    const h = this.#items, key = this.#key, n = h.length;
    const item = h[i], k = key(item);
    for (;;) {
      const l = 2 * i + 1, r = l + 1;
      let m = -1, mk = k;
      if (l < n && key(h[l]) < mk) { m = l; mk = key(h[l]); }
      if (r < n && key(h[r]) < mk) m = r;
      if (m < 0) break;
      h[i] = h[m]; i = m;
    }
    h[i] = item;
  }
}
