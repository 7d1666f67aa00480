/**
 * JMS selector LIKE: `%` any sequence, `_` exactly one UTF-16 code unit, an optional ESCAPE
 * character making the next pattern character literal; the whole value must match.
 * Matching is the iterative wildcard algorithm (backtracks only to the last `%`), so it is
 * O(value x pattern) at worst and never exponential; it allocates nothing per test.
 */
import type { StringMatcher } from './regex.js';

const ONE = -1;
const ANY = -2;

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
  const tok = Int32Array.from(toks);
  const m = tok.length;
  if (!tok.includes(ANY) && !tok.includes(ONE)) {
    const lit = String.fromCharCode(...toks);
    return { test: (s) => s === lit };
  }
  return {
    test(s: string): boolean {
      const n = s.length;
      let p = 0, i = 0, starP = -1, starI = 0;
      while (i < n) {
        const t = p < m ? tok[p]! : 0;
        if (p < m && (t === ONE || t === s.charCodeAt(i))) { p++; i++; }
        else if (p < m && t === ANY) { starP = p++; starI = i; }
        else if (starP >= 0) { p = starP + 1; i = ++starI; }
        else return false;
      }
      while (p < m && tok[p] === ANY) p++;
      return p === m;
    },
  };
}
