/**
 * A first-in first-out queue over an array with a moving head. `Array.prototype.shift` copies
 * the whole array once it is large (V8: past ~16k elements), so draining a 100k-row sorted
 * snapshot with it was quadratic (6.8 s of copying for 100k rows). Here a shift is O(1); the
 * consumed front is cut off once it is at least half the array.
 */
export class Fifo<T> {
  #items: T[];
  #head = 0;

  constructor(items: T[] = []) { this.#items = items; }

  get length(): number { return this.#items.length - this.#head; }

  push(item: T): void { this.#items.push(item); }

  shift(): T | undefined {
    if (this.#head >= this.#items.length) return undefined;
    const item = this.#items[this.#head];
    this.#items[this.#head++] = undefined as T; // let it go before the front is cut off
    if (this.#head === this.#items.length) { this.#items = []; this.#head = 0; }
    else if (this.#head >= 1024 && this.#head * 2 >= this.#items.length) { this.#items = this.#items.slice(this.#head); this.#head = 0; }
    return item;
  }

  /** The item `i` places from the front (0 = the next shift). */
  at(i: number): T | undefined { return i < 0 ? undefined : this.#items[this.#head + i]; }
}
