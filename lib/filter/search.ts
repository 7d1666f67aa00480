/**
 * Work accounting and worst-case linear literal search for the filter's string operations.
 *
 * Every LIKE (both dialects), INSTR, UPPER/LOWER and BEGINS/ENDS against a computed item
 * draws on a `Budget` of FILTER_LIMITS.MAX_EVAL_STEPS steps, refilled when a compiled filter
 * starts evaluating a message. An operation that would take more than what is left gives
 * NULL (docs/filters.md "Limits"), so one message × filter evaluation is bounded whatever
 * the pattern and the value.
 *
 * Why not always `String.prototype.indexOf`: V8's search is not linear for long needles.
 * Measured here (Node 20), `'a'.repeat(65536).indexOf('a'.repeat(4000) + 'b' + 'a'.repeat(3999))`
 * takes 83-130 ms and the same needle over 1 MiB 1.5 s; for needles of up to 64 code units
 * it stays linear (under 1.3 ms over 1 MiB in the same test). Longer needles use
 * Knuth-Morris-Pratt here: at most 2n character steps.
 */

/** Work left for the current evaluation, in steps (about one character or NFA thread each). */
export interface Budget {
  left: number;
}

/** Takes `cost` steps from the budget: false (and nothing left) when there are not that many. */
export function spend(budget: Budget, cost: number): boolean {
  if (cost > budget.left) { budget.left = 0; return false; }
  budget.left -= cost;
  return true;
}

/** A budget that never runs out: exact answers whatever they cost (tests, tools). */
export function unlimited(): Budget {
  return { left: Infinity };
}

/** Needles up to this length are searched with V8's indexOf (linear for them). */
export const NATIVE_SEARCH_MAX = 64;

/** Longest stretch one native indexOf call is given (then the budget is checked). */
const NATIVE_WINDOW = 65536;

/** Returned by searches when the budget ran out before an answer. */
export const OUT_OF_BUDGET = -2;

/** The KMP failure table of `p`: fail[j] = length of the longest proper border of p[0..j]. */
function failureTable(p: Uint16Array): Int32Array {
  const fail = new Int32Array(p.length);
  let k = 0;
  for (let j = 1; j < p.length; j++) {
    while (k > 0 && p[j] !== p[k]) k = fail[k - 1]!;
    if (p[j] === p[k]) k++;
    fail[j] = k;
  }
  return fail;
}

/**
 * A literal needle compiled for search: `find` is O(scanned length) in the worst case.
 * Immutable once built; safe to share.
 */
export class LiteralFinder {
  readonly lit: string;
  readonly #codes: Uint16Array | null;
  readonly #fail: Int32Array | null;

  constructor(lit: string) {
    this.lit = lit;
    if (lit.length > NATIVE_SEARCH_MAX) {
      const codes = new Uint16Array(lit.length);
      for (let i = 0; i < lit.length; i++) codes[i] = lit.charCodeAt(i);
      this.#codes = codes;
      this.#fail = failureTable(codes);
    } else {
      this.#codes = null;
      this.#fail = null;
    }
  }

  /**
   * The first index i >= from with s[i, i + lit.length) === lit and i + lit.length <= end,
   * -1 when there is none, or OUT_OF_BUDGET when finding out would cost more than
   * `budget.left` (which is then 0). Charges the characters scanned.
   */
  find(s: string, from: number, end: number, budget: Budget): number {
    const m = this.lit.length;
    if (end - from < m) return -1;
    const codes = this.#codes;
    if (codes === null) return findNative(s, this.lit, from, end, budget);
    // KMP: at most 2 steps per character scanned.
    const fail = this.#fail!;
    const left = budget.left;
    let j = 0, steps = 0;
    for (let i = from; i < end; i++) {
      const c = s.charCodeAt(i);
      while (j > 0 && codes[j] !== c) { j = fail[j - 1]!; steps++; }
      if (++steps > left) { budget.left = 0; return OUT_OF_BUDGET; }
      if (codes[j] === c && ++j === m) {
        budget.left = left - steps;
        return i - m + 1;
      }
    }
    budget.left = left - steps;
    return -1;
  }
}

/**
 * V8's indexOf for a needle of at most NATIVE_SEARCH_MAX code units (linear for those), over
 * windows of NATIVE_WINDOW code units so that no call scans more than that before the budget
 * is checked (a message's string may be megabytes). Same contract as LiteralFinder.find.
 */
export function findNative(s: string, lit: string, from: number, end: number, budget: Budget): number {
  const m = lit.length;
  if (end - from < m) return -1;
  for (let pos = from; ;) {
    let hit: number, stop: number;
    if (s.length - pos <= NATIVE_WINDOW) {
      stop = s.length;
      hit = s.indexOf(lit, pos);
    } else {
      stop = Math.min(end, pos + NATIVE_WINDOW + m - 1);
      const k = s.slice(pos, stop).indexOf(lit);
      hit = k < 0 ? -1 : pos + k;
    }
    // What indexOf looked at: up to the hit, or to the end of what it was given.
    const cost = 1 + (hit >= 0 ? hit + m : stop) - pos;
    if (cost > budget.left) { budget.left = 0; return OUT_OF_BUDGET; }
    budget.left -= cost;
    if (hit >= 0) return hit + m <= end ? hit : -1;
    if (stop >= end) return -1;
    pos = stop - m + 1; // windows overlap by m - 1: no occurrence falls between them
  }
}

/** `s.indexOf(t)` for a needle known only per message, in linear time and on the budget. */
export function findDynamic(s: string, t: string, budget: Budget): number {
  if (t.length <= NATIVE_SEARCH_MAX) return findNative(s, t, 0, s.length, budget);
  // Building the KMP table: about 2 steps per needle character.
  if (2 * t.length > budget.left) { budget.left = 0; return OUT_OF_BUDGET; }
  budget.left -= 2 * t.length;
  return new LiteralFinder(t).find(s, 0, s.length, budget);
}
