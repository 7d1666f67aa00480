/**
 * Legacy AMQP binding filters on the message subject (`apache.org:legacy-amqp-direct-binding`
 * and `…topic-binding`). Topic patterns are '.'-separated words: `*` matches exactly one
 * word, `#` zero or more words, anything else must equal the word. An empty subject has no
 * words (so only patterns made of `#` match it); a missing subject never matches.
 * Matching walks the subject in place (no split), backtracking only to the last `#`.
 */
import { FilterSyntaxError } from './errors.js';

export interface SubjectFilter {
  /** true when the subject matches; false for null/undefined. */
  matches(subject: string | undefined | null): boolean;
}

const STAR = 1, HASH = 2, WORD = 0;

export function compileSubjectFilter(pattern: string, kind: 'direct' | 'topic'): SubjectFilter {
  if (typeof pattern !== 'string') throw new TypeError('subject pattern must be a string');
  if (kind === 'direct') {
    return { matches: (subject) => subject === pattern };
  }
  if (kind !== 'topic') throw new FilterSyntaxError("'direct' or 'topic'", 0, String(kind));
  if (pattern.length > 65536) throw new FilterSyntaxError('at most 65536 characters', 65536, pattern, 'subject pattern too long');

  const words = pattern === '' ? [] : pattern.split('.');
  const kinds = Int8Array.from(words, (w) => (w === '*' ? STAR : w === '#' ? HASH : WORD));
  // Consecutive '#' are one '#'.
  const ws: string[] = [];
  const ks: number[] = [];
  for (let k = 0; k < words.length; k++) {
    if (kinds[k] === HASH && ks[ks.length - 1] === HASH) continue;
    ws.push(words[k]!);
    ks.push(kinds[k]!);
  }
  const m = ks.length;
  if (m === 1 && ks[0] === HASH) return { matches: (s) => typeof s === 'string' };

  return {
    matches(subject: string | undefined | null): boolean {
      if (typeof subject !== 'string') return false;
      const n = subject.length;
      const END = n + 1; // "past the last word"
      /** Offset of the word after the one at `s`. */
      const nextWord = (s: number): number => { const d = subject.indexOf('.', s); return d < 0 ? END : d + 1; };
      let s = n === 0 ? END : 0;
      let p = 0, starP = -1, starS = 0;
      while (s !== END) {
        const k = p < m ? ks[p] : -1;
        if (k === STAR) { p++; s = nextWord(s); continue; }
        if (k === WORD) {
          const w = ws[p]!;
          const d = subject.indexOf('.', s);
          const end = d < 0 ? n : d;
          if (end - s === w.length && subject.startsWith(w, s)) { p++; s = d < 0 ? END : d + 1; continue; }
        } else if (k === HASH) { starP = p++; starS = s; continue; }
        if (starP < 0) return false;
        p = starP + 1;
        starS = nextWord(starS);
        s = starS;
      }
      while (p < m && ks[p] === HASH) p++;
      return p === m;
    },
  };
}
