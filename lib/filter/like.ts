/**
 * JMS selector LIKE: `%` any sequence, `_` exactly one UTF-16 code unit, an optional ESCAPE
 * character making the next pattern character literal; the whole value must match.
 *
 * The pattern is split on `%` into segments of fixed length (literal code units and `_`).
 * The first segment must sit at the start of the value and the last at its end (unless the
 * pattern starts / ends with `%`); the ones between are placed left to right, each at its
 * leftmost occurrence after the previous one. Leftmost placement is always right: it leaves
 * the most room for what follows, and a `%` on each side absorbs whatever lies between.
 *
 * Cost: a literal segment is found by LiteralFinder (V8's indexOf for short ones, KMP for
 * long ones), so a pattern without `_` in its middle segments costs O(value + pattern). A
 * middle segment with `_` is found through its longest literal run and then compared whole
 * where the run occurs; that is O(value x segment) at worst (`%a_a_a_…b%` over `aaaa…`), and
 * the evaluation's Budget turns such a test into NULL past MAX_EVAL_STEPS. (Until session 22
 * this was the iterative wildcard matcher, O(value x pattern): `%aaaa…(8000)b` over a 64 KB
 * property held the broker for 5.9 s.) Nothing is allocated per test.
 */
import { LiteralFinder, NATIVE_SEARCH_MAX, OUT_OF_BUDGET, findNative, type Budget } from './search.js';
import type { StringMatcher } from './regex.js';

/** `_` in a segment's code units. */
const ONE = -1;
const ANY = -2;

const UNLIMITED: Budget = { left: Infinity };

/**
 * A pattern split on `%` into segments, kept in flat arrays (a selector may hold thousands
 * of segments: `%a%a%…`; a few dozen bytes each).
 */
class JmsLikeMatcher implements StringMatcher {
  readonly states = 0;
  /** Every segment's code units, one after another (`_` as ONE). */
  readonly #codes: Int32Array;
  /** Segment k is #codes[#start[k], #start[k + 1]). */
  readonly #start: Int32Array;
  /** Offset in segment k of its longest literal run (the whole segment when it has no `_`), -1 if it is all `_`. */
  readonly #runAt: Int32Array;
  /** That run's text (searched for with V8's indexOf when short). */
  readonly #run: readonly string[];
  /** That run as a KMP finder, for runs longer than NATIVE_SEARCH_MAX only. */
  readonly #finder: readonly (LiteralFinder | null)[];
  /** Whether segment k has no `_`. */
  readonly #literal: Uint8Array;
  /** Shortest matching value. */
  readonly #minLen: number;

  /** `segments`: at least two (there is a `%`); the first sits at the start of the value, the last at its end; either may be empty. */
  constructor(segments: readonly (readonly number[])[]) {
    const k = segments.length;
    let total = 0;
    for (const seg of segments) total += seg.length;
    this.#minLen = total;
    this.#codes = new Int32Array(total);
    this.#start = new Int32Array(k + 1);
    this.#runAt = new Int32Array(k);
    this.#literal = new Uint8Array(k);
    const runs: string[] = [];
    const finders: (LiteralFinder | null)[] = [];
    let at = 0;
    for (let i = 0; i < k; i++) {
      const seg = segments[i]!;
      this.#start[i] = at;
      this.#codes.set(seg, at);
      at += seg.length;
      let best = -1, bestLen = 0;
      for (let j = 0; j < seg.length;) {
        if (seg[j] === ONE) { j++; continue; }
        let e = j;
        while (e < seg.length && seg[e] !== ONE) e++;
        if (e - j > bestLen) { best = j; bestLen = e - j; }
        j = e;
      }
      this.#runAt[i] = best;
      this.#literal[i] = bestLen === seg.length ? 1 : 0;
      const run = best < 0 ? '' : String.fromCharCode(...seg.slice(best, best + bestLen));
      runs.push(run);
      finders.push(run.length > NATIVE_SEARCH_MAX && i > 0 && i < k - 1 ? new LiteralFinder(run) : null);
    }
    this.#start[k] = at;
    this.#run = Object.freeze(runs);
    this.#finder = Object.freeze(finders);
  }

  test(s: string): boolean {
    return this.match(s, UNLIMITED) === true;
  }

  /** Whether segment k matches s at i (there is room); charges the code units compared. */
  #at(k: number, s: string, i: number, budget: Budget): boolean | null {
    const codes = this.#codes, a = this.#start[k]!, m = this.#start[k + 1]! - a;
    let j = 0;
    while (j < m && (codes[a + j] === ONE || codes[a + j] === s.charCodeAt(i + j))) j++;
    if (j + 1 > budget.left) { budget.left = 0; return null; }
    budget.left -= j + 1;
    return j === m;
  }

  /** The leftmost i >= from with i + len <= end where segment k matches, -1 if none, or OUT_OF_BUDGET. */
  #find(k: number, s: string, from: number, end: number, budget: Budget): number {
    const m = this.#start[k + 1]! - this.#start[k]!;
    if (end - from < m) return -1;
    const runAt = this.#runAt[k]!;
    if (runAt < 0) return from; // only `_`: anywhere there is room
    const run = this.#run[k]!, finder = this.#finder[k]!;
    if (this.#literal[k] === 1) return finder !== null ? finder.find(s, from, end, budget) : findNative(s, run, from, end, budget);
    // Candidates where the longest literal run occurs; then the whole segment there.
    const runEnd = end - m + runAt + run.length;
    for (let c = from + runAt; ;) {
      const hit = finder !== null ? finder.find(s, c, runEnd, budget) : findNative(s, run, c, runEnd, budget);
      if (hit < 0) return hit;
      const r = this.#at(k, s, hit - runAt, budget);
      if (r === null) return OUT_OF_BUDGET;
      if (r) return hit - runAt;
      c = hit + 1;
    }
  }

  match(s: string, budget: Budget): boolean | null {
    const n = s.length;
    if (n < this.#minLen) {
      if (budget.left < 1) { budget.left = 0; return null; }
      budget.left--;
      return false;
    }
    const last = this.#start.length - 2;
    const end = n - (this.#start[last + 1]! - this.#start[last]!);
    const h = this.#at(0, s, 0, budget);
    if (h !== true) return h;
    const t = this.#at(last, s, end, budget);
    if (t !== true) return t;
    let pos = this.#start[1]!; // the first segment's length
    for (let k = 1; k < last; k++) {
      const at = this.#find(k, s, pos, end, budget);
      if (at === OUT_OF_BUDGET) return null;
      if (at < 0) return false;
      pos = at + this.#start[k + 1]! - this.#start[k]!;
    }
    return true;
  }
}

/** A pattern without `%`: the value must have its length and match it code unit by code unit. */
class FixedMatcher implements StringMatcher {
  readonly states = 0;
  readonly #codes: Int32Array;
  readonly #lit: string | null;

  constructor(codes: readonly number[]) {
    this.#codes = Int32Array.from(codes);
    this.#lit = codes.includes(ONE) ? null : String.fromCharCode(...codes);
  }

  test(s: string): boolean {
    return this.match(s, UNLIMITED) === true;
  }

  match(s: string, budget: Budget): boolean | null {
    const codes = this.#codes, m = codes.length;
    if (s.length !== m) {
      if (budget.left < 1) { budget.left = 0; return null; }
      budget.left--;
      return false;
    }
    const cost = 1 + m;
    if (cost > budget.left) { budget.left = 0; return null; }
    budget.left -= cost;
    if (this.#lit !== null) return s === this.#lit;
    for (let j = 0; j < m; j++) if (codes[j] !== ONE && codes[j] !== s.charCodeAt(j)) return false;
    return true;
  }
}

/** Compiles a JMS LIKE pattern; throws Error with an offset-free message on a dangling escape. */
export function compileJmsLike(pattern: string, escape: string | null): StringMatcher {
  const toks: number[] = [];
  const esc = escape === null ? -1 : escape.charCodeAt(0);
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern.charCodeAt(i);
    if (c === esc) {
      if (i + 1 >= pattern.length) throw new Error('ESCAPE character at the end of the LIKE pattern');
      toks.push(pattern.charCodeAt(++i));
    } else if (c === 37 /* % */) {
      if (toks[toks.length - 1] !== ANY) toks.push(ANY);
    } else if (c === 95 /* _ */) toks.push(ONE);
    else toks.push(c);
  }
  if (!toks.includes(ANY)) return new FixedMatcher(toks);
  const segments: number[][] = [];
  let from = 0;
  for (let i = 0; i <= toks.length; i++) {
    if (i === toks.length || toks[i] === ANY) {
      segments.push(toks.slice(from, i));
      from = i + 1;
    }
  }
  return new JmsLikeMatcher(segments);
}
