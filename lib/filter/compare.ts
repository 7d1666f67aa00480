/**
 * Value model and comparison rules shared by the evaluator and order_by.
 *
 * Values after `normalize`: null (NULL), number, bigint (only outside the safe integer
 * range), string (never ''), boolean, arrays, byte arrays (Uint8Array/Buffer), other objects.
 *
 * Given a Budget (a filter evaluation's, lib/filter/search.ts), comparisons pay for the work
 * that grows with the message: one step per array element (or pair of elements) visited,
 * one per code unit of a string longer than 64 read as a number, one per 16 code units of
 * two strings compared. What cannot be paid for is NULL. Without one (order_by, tools) they
 * are exact whatever they cost.
 */
import { spend, type Budget } from './search.js';

/** Strings up to this long are read as numbers free of charge. */
const FREE_NUMERIC_TEXT = 64;

/** Results of comparing two scalars. UEQ/UNE: equal/unequal but unordered (booleans, bytes). */
export const LT = -1, EQ = 0, GT = 1, UEQ = 2, UNE = 3, NUL = 4;
export type Cmp = typeof LT | typeof EQ | typeof GT | typeof UEQ | typeof UNE | typeof NUL;

/** Comparison operators as small integers (index into RESULT). */
export const OP_EQ = 0, OP_NE = 1, OP_LT = 2, OP_LE = 3, OP_GT = 4, OP_GE = 5;

const T = true, F = false, N = null;
/** RESULT[op * 6 + cmp + 1]: the three-valued outcome of `op` given a comparison result. */
const RESULT: readonly (boolean | null)[] = [
  /* =  */ F, T, F, T, F, N,
  /* <> */ T, F, T, F, T, N,
  /* <  */ T, F, F, N, N, N,
  /* <= */ T, T, F, N, N, N,
  /* >  */ F, F, T, N, N, N,
  /* >= */ F, T, T, N, N, N,
];

const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * Maps a value from the environment to the filter's value model: undefined, JSON null,
 * '' and NaN become NULL; a Date becomes its epoch milliseconds; a bigint in the safe range
 * becomes a number.
 */
export function normalize(v: unknown): unknown {
  switch (typeof v) {
    case 'number': return v === v ? v : null;
    case 'string': return v === '' ? null : v;
    case 'boolean': return v;
    case 'bigint': return v >= MIN_SAFE && v <= MAX_SAFE ? Number(v) : v;
    case 'object':
      if (v === null) return null;
      if (v instanceof Date) { const t = v.getTime(); return t === t ? t : null; }
      return v;
    default: return null;
  }
}

/** A bigint result back to a number when it is safe. */
export function normBig(v: bigint): number | bigint {
  return v >= MIN_SAFE && v <= MAX_SAFE ? Number(v) : v;
}

const INTEGER = /^[+-]?\d+$/;

/**
 * Whether `s` is numeric text: an optional sign, digits with an optional '.' (at least one
 * digit), an optional exponent. A scan, linear in the length: the regex it replaces,
 * /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/, backtracked quadratically on a run of digits
 * followed by anything else (40,000 digits and an 'x': 4.2 s; session 22), and every
 * comparison of a message's string with a number runs it.
 */
export function isNumericText(s: string): boolean {
  let i = 0;
  let c = s.charCodeAt(0);
  if (c === 43 || c === 45) c = s.charCodeAt(++i); // + -
  let digits = 0;
  while (c >= 48 && c <= 57) { digits++; c = s.charCodeAt(++i); }
  if (c === 46) { // .
    c = s.charCodeAt(++i);
    while (c >= 48 && c <= 57) { digits++; c = s.charCodeAt(++i); }
  }
  if (digits === 0) return false;
  if (c === 101 || c === 69) { // e E
    c = s.charCodeAt(++i);
    if (c === 43 || c === 45) c = s.charCodeAt(++i);
    let exp = 0;
    while (c >= 48 && c <= 57) { exp++; c = s.charCodeAt(++i); }
    if (exp === 0) return false;
  }
  return i === s.length;
}

/**
 * The number a string reads as (strictly: optional sign, digits, '.', exponent), else null;
 * undefined when `budget` cannot pay for reading it (one step per code unit past 64).
 */
export function parseNumeric(s: string, budget?: Budget): number | bigint | null | undefined {
  const c = s.charCodeAt(0);
  // Cheap reject before the scan: must start with a digit, sign or '.'.
  if (!((c >= 48 && c <= 57) || c === 43 || c === 45 || c === 46)) return null;
  if (budget !== undefined && s.length > FREE_NUMERIC_TEXT && !spend(budget, s.length)) return undefined;
  if (!isNumericText(s)) return null;
  const n = Number(s);
  if (!Number.isSafeInteger(n) && Number.isInteger(n) && INTEGER.test(s)) return normBig(BigInt(s));
  return Number.isFinite(n) ? n : null;
}

/** True when a numeric string is written as a decimal ('.' or exponent). */
export function isDecimalText(s: string): boolean {
  return s.includes('.') || s.includes('e') || s.includes('E');
}

export function isBytes(v: unknown): v is Uint8Array {
  return v instanceof Uint8Array;
}

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Numeric comparison of number/bigint in any mix (JavaScript compares these exactly). */
function cmpNum(a: number | bigint, b: number | bigint): Cmp {
  return a < b ? LT : a > b ? GT : EQ;
}

/**
 * Compares two normalized, non-NULL, non-array values:
 * numbers (and bigints) numerically; strings by UTF-16 code units; a string that reads as a
 * number against a number numerically; a non-numeric string is greater than any number;
 * booleans only with booleans and only for (in)equality; byte arrays only with byte arrays
 * and only for (in)equality; anything else is NUL (the comparison is NULL).
 */
export function compareScalars(a: unknown, b: unknown, budget?: Budget): Cmp {
  const ta = typeof a, tb = typeof b;
  if (ta === 'number' && tb === 'number') return (a as number) < (b as number) ? LT : (a as number) > (b as number) ? GT : EQ;
  if (ta === 'string' && tb === 'string') {
    if (budget !== undefined) {
      const cost = Math.min((a as string).length, (b as string).length) >> 4;
      if (cost > 0 && !spend(budget, cost)) return NUL;
    }
    return (a as string) < (b as string) ? LT : (a as string) > (b as string) ? GT : EQ;
  }
  const an = ta === 'number' || ta === 'bigint';
  const bn = tb === 'number' || tb === 'bigint';
  if (an && bn) return cmpNum(a as number | bigint, b as number | bigint);
  if (an && tb === 'string') {
    const x = parseNumeric(b as string, budget);
    return x === undefined ? NUL : x === null ? LT : cmpNum(a as number | bigint, x);
  }
  if (ta === 'string' && bn) {
    const x = parseNumeric(a as string, budget);
    return x === undefined ? NUL : x === null ? GT : cmpNum(x, b as number | bigint);
  }
  if (ta === 'boolean' && tb === 'boolean') return a === b ? UEQ : UNE;
  if (isBytes(a) && isBytes(b)) return bytesEqual(a, b) ? UEQ : UNE;
  return NUL;
}

/**
 * Three-valued `a op b` on normalized values. An array on either side is true when any
 * element satisfies the comparison (NULL if none does and some comparison was NULL; FALSE
 * for an empty array). With a budget, each element visited costs a step (two arrays: each
 * pair), and the elements left once it is spent make the result NULL unless one matched.
 */
export function compareValues(op: number, a: unknown, b: unknown, budget?: Budget): boolean | null {
  if (a === null || b === null) return null;
  if (Array.isArray(a)) {
    let r: boolean | null = false;
    for (let i = 0; i < a.length; i++) {
      if (budget !== undefined && !spend(budget, 1)) return null;
      const x = compareValues(op, normalize(a[i]), b, budget);
      if (x === true) return true;
      if (x === null) r = null;
    }
    return r;
  }
  if (Array.isArray(b)) {
    let r: boolean | null = false;
    for (let i = 0; i < b.length; i++) {
      if (budget !== undefined && !spend(budget, 1)) return null;
      const x = compareValues(op, a, normalize(b[i]), budget);
      if (x === true) return true;
      if (x === null) r = null;
    }
    return r;
  }
  return RESULT[op * 6 + compareScalars(a, b, budget) + 1]!;
}

/** The string a value reads as for string functions and LIKE/BEGINS/ENDS: strings, and numbers in decimal. */
export function stringView(v: unknown): string | null {
  switch (typeof v) {
    case 'string': return v;
    case 'number': return String(v);
    case 'bigint': return v.toString();
    default: return null;
  }
}

/** Number a value reads as for arithmetic: numbers, bigints, numeric strings; else null (also when `budget` cannot pay for reading it). */
export function numericView(v: unknown, budget?: Budget): number | bigint | null {
  switch (typeof v) {
    case 'number': return v;
    case 'bigint': return v;
    case 'string': return parseNumeric(v, budget) ?? null;
    default: return null;
  }
}

/** SQL three-valued NOT. */
export function not3(v: boolean | null): boolean | null {
  return v === null ? null : !v;
}

/** A value used as a condition: booleans are themselves, everything else is NULL. */
export function truth(v: unknown): boolean | null {
  return v === true ? true : v === false ? false : null;
}
