/**
 * Compiles an expression tree into a tree of closures, once per filter. Evaluation then
 * allocates nothing of its own for the common operators (comparisons, AND/OR/NOT, IN,
 * BETWEEN, LIKE, BEGINS/ENDS, IS NULL, arithmetic on safe integers and decimals): paths are
 * pre-split, literal lists are pre-built (string and number IN lists become Sets), LIKE
 * patterns are pre-compiled. Only the string functions (UPPER, LOWER) and bigint arithmetic
 * create new values.
 *
 * The work that grows with the message (LIKE, INSTR, UPPER/LOWER, BEGINS/ENDS against
 * computed items, elements of arrays visited, long strings compared or read as numbers) draws
 * on one Budget per compiled filter, refilled to FILTER_LIMITS.MAX_EVAL_STEPS each time
 * `matches`/`evaluate` starts; an operation that would go past what is left is NULL
 * (lib/filter/search.ts).
 *
 * Values are three-valued where it matters: a condition is true, false or null (NULL).
 */
import type { Expr } from './ast.js';
import { readsBody } from './ast.js';
import {
  OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE,
  compareValues, isDecimalText, normBig, normalize, not3, numericView, stringView, truth,
} from './compare.js';
import { FilterSyntaxError } from './errors.js';
import { compileJmsLike } from './like.js';
import { FILTER_LIMITS } from './limits.js';
import { parseFilter, type Dialect } from './parser.js';
import { RegexError, RegexTotalError, compileRegex, type StringMatcher } from './regex.js';
import { LiteralFinder, OUT_OF_BUDGET, findDynamic, spend, type Budget } from './search.js';
import type { Filter, FilterEnv } from './types.js';

type Fn = (env: FilterEnv) => unknown;

/** How a parent learns whether a numeric child result is a decimal (for `/`). */
const DK_INT = 0, DK_DEC = 1, DK_RAW = 2, DK_REG = 3;

interface Compiled {
  readonly fn: Fn;
  /** DK_INT/DK_DEC: known statically; DK_RAW: look at the value; DK_REG: read LAST_DEC. */
  readonly dec: number;
  /** Constant (no lookups): `value` is the result. */
  readonly konst: boolean;
  readonly value?: unknown;
}

/**
 * Set by every arithmetic closure just before it returns: whether its result is a decimal.
 * A register rather than a boxed result, so arithmetic allocates nothing. Read by the parent
 * immediately after the child returns (evaluation is synchronous and single-threaded).
 */
let LAST_DEC = false;

/**
 * Whether a value is a decimal for `/`. A long string costs a step per 16 code units; when
 * the budget cannot pay, false: arithmetic on that string is NULL anyway, as reading it as a
 * number then finds the budget spent.
 */
function isDecValue(v: unknown, budget: Budget): boolean {
  if (typeof v === 'number') return !Number.isInteger(v);
  if (typeof v !== 'string') return false;
  if (v.length > 64 && !spend(budget, v.length >> 4)) return false;
  return isDecimalText(v);
}

const COMPARE_CODES = { '=': OP_EQ, '<>': OP_NE, '<': OP_LT, '<=': OP_LE, '>': OP_GT, '>=': OP_GE } as const;
/** The operator that gives the same result with the operands swapped. */
const SWAPPED = [OP_EQ, OP_NE, OP_GT, OP_GE, OP_LT, OP_LE] as const;

const NO_ENV: FilterEnv = {
  bodyPath: () => { throw new Error('constant folding read the body'); },
  property: () => { throw new Error('constant folding read a property'); },
};

function constant(value: unknown, dec: number): Compiled {
  return { fn: () => value, dec, konst: true, value };
}

function and3(a: boolean | null, b: boolean | null): boolean | null {
  return a === false || b === false ? false : a === null || b === null ? null : true;
}

function negateIf(negated: boolean, fn: Fn): Fn {
  return negated ? (env) => not3(fn(env) as boolean | null) : fn;
}

// ---- helpers used per evaluation (no closures created here) ----

function inList(v: unknown, vals: readonly unknown[], budget: Budget): boolean | null {
  let r: boolean | null = false;
  for (let i = 0; i < vals.length; i++) {
    const c = compareValues(OP_EQ, v, vals[i], budget);
    if (c === true) return true;
    if (c === null) r = null;
  }
  return r;
}

function between(v: unknown, lo: unknown, hi: unknown, budget: Budget): boolean | null {
  if (Array.isArray(v)) {
    let r: boolean | null = false;
    for (let i = 0; i < v.length; i++) {
      if (!spend(budget, 1)) return null;
      const e = normalize(v[i]);
      const x = e === null ? null : between(e, lo, hi, budget);
      if (x === true) return true;
      if (x === null) r = null;
    }
    return r;
  }
  return and3(compareValues(OP_GE, v, lo, budget), compareValues(OP_LE, v, hi, budget));
}

function likeTest(m: StringMatcher, v: unknown, budget: Budget): boolean | null {
  if (v === null) return null;
  if (Array.isArray(v)) {
    let r: boolean | null = false;
    for (let i = 0; i < v.length; i++) {
      if (!spend(budget, 1)) return null; // an element visited: a step (an array may hold millions)
      const x = likeTest(m, normalize(v[i]), budget);
      if (x === true) return true;
      if (x === null) r = null;
    }
    return r;
  }
  const s = stringView(v);
  if (s === null || s.length > FILTER_LIMITS.MAX_MATCH_INPUT) return null;
  return m.match(s, budget);
}

/** BEGINS WITH / ENDS WITH against constant strings (`hasNull`: a NULL item was listed). */
function affixTest(v: unknown, list: readonly string[], hasNull: boolean, ends: boolean, budget: Budget): boolean | null {
  if (v === null) return null;
  if (Array.isArray(v)) {
    let r: boolean | null = false;
    for (let i = 0; i < v.length; i++) {
      if (!spend(budget, 1)) return null; // an element visited: a step
      const x = affixTest(normalize(v[i]), list, hasNull, ends, budget);
      if (x === true) return true;
      if (x === null) r = null;
    }
    return r;
  }
  const s = stringView(v);
  if (s === null) return null;
  for (let i = 0; i < list.length; i++) {
    if (ends ? s.endsWith(list[i]!) : s.startsWith(list[i]!)) return true;
  }
  return hasNull ? null : false;
}

/**
 * BEGINS WITH / ENDS WITH against items computed per message. Each comparison costs the
 * shorter length in steps (both strings may be as long as the message).
 */
function affixDynamic(v: unknown, env: FilterEnv, fns: readonly Fn[], ends: boolean, budget: Budget): boolean | null {
  if (v === null) return null;
  if (Array.isArray(v)) {
    let r: boolean | null = false;
    for (let i = 0; i < v.length; i++) {
      if (!spend(budget, 1)) return null; // an element visited: a step
      const x = affixDynamic(normalize(v[i]), env, fns, ends, budget);
      if (x === true) return true;
      if (x === null) r = null;
    }
    return r;
  }
  const s = stringView(v);
  if (s === null) return null;
  let r: boolean | null = false;
  for (let i = 0; i < fns.length; i++) {
    const p = stringView(fns[i]!(env));
    if (p === null) r = null;
    else if (!spend(budget, 1 + Math.min(s.length, p.length))) return null;
    else if (ends ? s.endsWith(p) : s.startsWith(p)) return true;
  }
  return r;
}

const ADD = 0, SUB = 1, MUL = 2, DIV = 3, MOD = 4;
const ARITH_CODES = { '+': ADD, '-': SUB, '*': MUL, '/': DIV, '%': MOD } as const;

/** `a op b`; integer division truncates unless `dec`; x/0 and x%0 are NULL. */
function arith(op: number, a: number | bigint, b: number | bigint, dec: boolean): number | bigint | null {
  if (typeof a === 'number' && typeof b === 'number') {
    let r: number;
    switch (op) {
      case ADD: r = a + b; break;
      case SUB: r = a - b; break;
      case MUL: r = a * b; break;
      case DIV:
        if (b === 0) return null;
        r = dec ? a / b : Math.trunc(a / b);
        break;
      default:
        if (b === 0) return null;
        r = a % b;
    }
    if (!dec && op <= MUL && !Number.isSafeInteger(r) && Number.isFinite(r)) {
      return arith(op, BigInt(a), BigInt(b), false); // exact integers past 2^53
    }
    return r === r ? (r === 0 ? 0 : r) : null; // NaN is NULL; -0 is 0
  }
  if (dec || (typeof a === 'number' && !Number.isInteger(a)) || (typeof b === 'number' && !Number.isInteger(b))) {
    return arith(op, Number(a), Number(b), true);
  }
  const x = BigInt(a), y = BigInt(b);
  switch (op) {
    case ADD: return normBig(x + y);
    case SUB: return normBig(x - y);
    case MUL: return normBig(x * y);
    case DIV: return y === 0n ? null : normBig(x / y);
    default: return y === 0n ? null : normBig(x % y);
  }
}

// ---- compilation ----

class Compiler {
  readonly #text: string;
  /**
   * The budget every compiled closure of this filter draws on. While compiling it is the
   * budget of constant folding, one for the whole filter (so folding costs at most
   * MAX_EVAL_STEPS in all); CompiledFilter refills it before each evaluation.
   */
  readonly budget: Budget = { left: FILTER_LIMITS.MAX_EVAL_STEPS };
  /** Regex program states compiled so far (MAX_FILTER_REGEX_PROGRAM in all). */
  #regexStates = 0;
  constructor(text: string) { this.#text = text; }

  compile(e: Expr): Compiled {
    return this.#compile(e);
  }

  /** Folds a node whose operands are all constant into its value. */
  #fold(children: readonly Compiled[], c: Compiled): Compiled {
    for (const ch of children) if (!ch.konst) return c;
    LAST_DEC = false;
    const value = c.fn(NO_ENV);
    const dec = c.dec === DK_REG ? (LAST_DEC ? DK_DEC : DK_INT) : c.dec;
    return constant(value, dec);
  }

  #compile(e: Expr): Compiled {
    switch (e.kind) {
      case 'literal': {
        const v = normalize(e.value);
        return constant(v, typeof v === 'string' ? DK_RAW : e.decimal ? DK_DEC : DK_INT);
      }
      case 'path': {
        const path = e.path, budget = this.budget;
        return {
          fn: (env) => {
            const v = env.bodyPath(path, budget);
            return typeof v === 'number' ? (v === v ? v : null) : typeof v === 'string' ? (v === '' ? null : v) : normalize(v);
          },
          dec: DK_RAW, konst: false,
        };
      }
      case 'property': {
        const name = e.name;
        return {
          fn: (env) => {
            const v = env.property(name);
            return typeof v === 'number' ? (v === v ? v : null) : typeof v === 'string' ? (v === '' ? null : v) : normalize(v);
          },
          dec: DK_RAW, konst: false,
        };
      }
      case 'negate': {
        const o = this.#compile(e.operand);
        const f = o.fn, k = o.dec, budget = this.budget;
        return this.#fold([o], {
          fn: (env) => {
            const v = f(env);
            LAST_DEC = k === DK_REG ? LAST_DEC : k === DK_RAW ? isDecValue(v, budget) : k === DK_DEC;
            const n = numericView(v, budget);
            if (n === null) return null;
            return typeof n === 'number' ? (n === 0 ? 0 : -n) : normBig(-n);
          },
          dec: DK_REG, konst: false,
        });
      }
      case 'arith': {
        const l = this.#compile(e.left), r = this.#compile(e.right);
        const lf = l.fn, rf = r.fn, lk = l.dec, rk = r.dec;
        const op = ARITH_CODES[e.op], budget = this.budget;
        return this.#fold([l, r], {
          fn: (env) => {
            const av = lf(env);
            const ad = lk === DK_REG ? LAST_DEC : lk === DK_RAW ? isDecValue(av, budget) : lk === DK_DEC;
            const bv = rf(env);
            const bd = rk === DK_REG ? LAST_DEC : rk === DK_RAW ? isDecValue(bv, budget) : rk === DK_DEC;
            const a = numericView(av, budget), b = numericView(bv, budget);
            LAST_DEC = ad || bd;
            if (a === null || b === null) return null;
            return arith(op, a, b, ad || bd);
          },
          dec: DK_REG, konst: false,
        });
      }
      case 'compare': {
        const l = this.#compile(e.left), r = this.#compile(e.right);
        return this.#fold([l, r], { fn: compileCompare(COMPARE_CODES[e.op], l, r, this.budget), dec: DK_INT, konst: false });
      }
      case 'and': case 'or': {
        const cs = e.operands.map((o) => this.#compile(o));
        const fns = cs.map((c) => c.fn);
        return this.#fold(cs, { fn: e.kind === 'and' ? compileAnd(fns) : compileOr(fns), dec: DK_INT, konst: false });
      }
      case 'not': {
        const o = this.#compile(e.operand);
        const f = o.fn;
        return this.#fold([o], { fn: (env) => not3(truth(f(env))), dec: DK_INT, konst: false });
      }
      case 'isnull': {
        const o = this.#compile(e.value);
        const f = o.fn;
        return this.#fold([o], { fn: e.negated ? (env) => f(env) !== null : (env) => f(env) === null, dec: DK_INT, konst: false });
      }
      case 'between': {
        const v = this.#compile(e.value), lo = this.#compile(e.low), hi = this.#compile(e.high);
        const vf = v.fn, lf = lo.fn, hf = hi.fn, budget = this.budget;
        let fn: Fn;
        if (lo.konst && hi.konst && typeof lo.value === 'number' && typeof hi.value === 'number') {
          const a = lo.value, b = hi.value;
          fn = (env) => {
            const x = vf(env);
            if (typeof x === 'number') return x >= a && x <= b;
            return x === null ? null : between(x, a, b, budget);
          };
        } else {
          fn = (env) => {
            const x = vf(env);
            if (x === null) return null;
            const a = lf(env), b = hf(env);
            if (typeof x === 'number' && typeof a === 'number' && typeof b === 'number') return x >= a && x <= b;
            return between(x, a, b, budget);
          };
        }
        return this.#fold([v, lo, hi], { fn: negateIf(e.negated, fn), dec: DK_INT, konst: false });
      }
      case 'in': {
        const v = this.#compile(e.value);
        const items = e.items.map((i) => this.#compile(i));
        const vf = v.fn, budget = this.budget;
        let fn: Fn;
        if (items.every((i) => i.konst)) {
          const vals = Object.freeze(items.map((i) => i.value));
          const strSet = vals.every((x) => typeof x === 'string') ? new Set(vals as string[]) : null;
          const numSet = vals.every((x) => typeof x === 'number') ? new Set(vals as number[]) : null;
          fn = (env) => {
            const x = vf(env);
            if (x === null) return null;
            if (strSet !== null && typeof x === 'string') return strSet.has(x);
            if (numSet !== null && typeof x === 'number') return numSet.has(x);
            return inList(x, vals, budget);
          };
        } else {
          const fns = items.map((i) => i.fn);
          fn = (env) => {
            const x = vf(env);
            if (x === null) return null;
            let r: boolean | null = false;
            for (let i = 0; i < fns.length; i++) {
              const c = compareValues(OP_EQ, x, fns[i]!(env), budget);
              if (c === true) return true;
              if (c === null) r = null;
            }
            return r;
          };
        }
        return this.#fold([v, ...items], { fn: negateIf(e.negated, fn), dec: DK_INT, konst: false });
      }
      case 'like': {
        const v = this.#compile(e.value);
        const m = this.#likeMatcher(e);
        const vf = v.fn, budget = this.budget;
        return this.#fold([v], { fn: negateIf(e.negated, (env) => likeTest(m, vf(env), budget)), dec: DK_INT, konst: false });
      }
      case 'begins': case 'ends': {
        const v = this.#compile(e.value);
        const items = e.items.map((i) => this.#compile(i));
        const vf = v.fn;
        const ends = e.kind === 'ends';
        let fn: Fn;
        if (items.every((i) => i.konst)) {
          const views = items.map((i) => stringView(i.value));
          const list = Object.freeze(views.filter((s): s is string => s !== null));
          const hasNull = list.length !== views.length;
          const budget = this.budget;
          fn = (env) => affixTest(vf(env), list, hasNull, ends, budget);
        } else {
          const fns = Object.freeze(items.map((i) => i.fn));
          const budget = this.budget;
          fn = (env) => affixDynamic(vf(env), env, fns, ends, budget);
        }
        return this.#fold([v, ...items], { fn: negateIf(e.negated, fn), dec: DK_INT, konst: false });
      }
      case 'call': return this.#call(e);
      default: { const never: never = e; return never; }
    }
  }

  #likeMatcher(e: Expr & { kind: 'like' }): StringMatcher {
    try {
      if (e.mode === 'jms') return compileJmsLike(e.pattern, e.escape);
      const m = compileRegex(e.pattern, FILTER_LIMITS.MAX_FILTER_REGEX_PROGRAM - this.#regexStates);
      this.#regexStates += m.states;
      return m;
    } catch (err) {
      if (err instanceof RegexTotalError) {
        throw new FilterSyntaxError(`LIKE patterns of at most ${FILTER_LIMITS.MAX_FILTER_REGEX_PROGRAM} regex states in all`,
          e.patternPos, this.#text, err.message);
      }
      const offset = err instanceof RegexError ? err.offset : 0;
      const pos = Math.min(e.patternPos + 1 + offset, this.#text.length);
      throw new FilterSyntaxError(e.mode === 'regex' ? 'a supported regular expression' : 'a valid LIKE pattern',
        pos, this.#text, `invalid LIKE pattern: ${(err as Error).message}`);
    }
  }

  #call(e: Expr & { kind: 'call' }): Compiled {
    const args = e.args.map((a) => this.#compile(a));
    const f0 = args[0]!.fn;
    const budget = this.budget;
    let fn: Fn;
    switch (e.fn) {
      case 'UPPER': // one step per code unit: a message's string may be megabytes
        fn = (env) => { const s = stringView(f0(env)); return s === null || !spend(budget, 1 + s.length) ? null : s.toUpperCase(); };
        break;
      case 'LOWER':
        fn = (env) => { const s = stringView(f0(env)); return s === null || !spend(budget, 1 + s.length) ? null : s.toLowerCase(); };
        break;
      case 'LENGTH':
        fn = (env) => {
          const v = f0(env);
          if (Array.isArray(v)) return v.length;
          const s = stringView(v);
          return s === null ? null : s.length;
        };
        break;
      case 'COALESCE': {
        // Passes on whether the chosen argument is a decimal (a register, like arithmetic):
        // judged from its value alone, the 5 of `/d * 2` with d = 2.5 was an integer to `/`.
        const fns = Object.freeze(args.map((a) => a.fn));
        const decs = Int8Array.from(args, (a) => a.dec);
        const coalesce: Fn = (env) => {
          for (let i = 0; i < fns.length; i++) {
            const v = fns[i]!(env);
            if (v !== null) {
              const k = decs[i];
              LAST_DEC = k === DK_REG ? LAST_DEC : k === DK_RAW ? isDecValue(v, budget) : k === DK_DEC;
              return v;
            }
          }
          LAST_DEC = false;
          return null;
        };
        return this.#fold(args, { fn: coalesce, dec: DK_REG, konst: false });
      }
      case 'INSTR': {
        // Linear search (indexOf is not, for long needles: lib/filter/search.ts), on the budget.
        const a1 = args[1]!;
        const f1 = a1.fn;
        const k = a1.konst ? stringView(a1.value) : null;
        const finder = k === null ? null : new LiteralFinder(k);
        fn = (env) => {
          const s = stringView(f0(env));
          if (s === null) return null;
          let at: number;
          if (finder !== null) at = finder.find(s, 0, s.length, budget);
          else {
            const t = stringView(f1(env));
            if (t === null) return null;
            at = findDynamic(s, t, budget);
          }
          return at === OUT_OF_BUDGET ? null : at + 1;
        };
        break;
      }
      default: { const never: never = e.fn; return never; }
    }
    return this.#fold(args, { fn, dec: DK_RAW, konst: false });
  }
}

function compileCompare(op: number, l: Compiled, r: Compiled, budget: Budget): Fn {
  if (l.konst && !r.konst) return compileCompare(SWAPPED[op]!, r, l, budget);
  const lf = l.fn, rf = r.fn;
  if (r.konst) {
    const k = r.value;
    if (k === null) return () => null;
    if (typeof k === 'number') {
      switch (op) {
        case OP_EQ: return (env) => { const a = lf(env); return typeof a === 'number' ? a === k : compareValues(OP_EQ, a, k, budget); };
        case OP_NE: return (env) => { const a = lf(env); return typeof a === 'number' ? a !== k : compareValues(OP_NE, a, k, budget); };
        case OP_LT: return (env) => { const a = lf(env); return typeof a === 'number' ? a < k : compareValues(OP_LT, a, k, budget); };
        case OP_LE: return (env) => { const a = lf(env); return typeof a === 'number' ? a <= k : compareValues(OP_LE, a, k, budget); };
        case OP_GT: return (env) => { const a = lf(env); return typeof a === 'number' ? a > k : compareValues(OP_GT, a, k, budget); };
        default: return (env) => { const a = lf(env); return typeof a === 'number' ? a >= k : compareValues(OP_GE, a, k, budget); };
      }
    }
    if (typeof k === 'string' && (op === OP_EQ || op === OP_NE)) {
      const eq = op === OP_EQ;
      return (env) => { const a = lf(env); return typeof a === 'string' ? (a === k) === eq : compareValues(op, a, k, budget); };
    }
    return (env) => compareValues(op, lf(env), k, budget);
  }
  return (env) => compareValues(op, lf(env), rf(env), budget);
}

function compileAnd(fns: readonly Fn[]): Fn {
  if (fns.length === 2) {
    const [f0, f1] = fns as [Fn, Fn];
    return (env) => {
      const a = truth(f0(env));
      if (a === false) return false;
      const b = truth(f1(env));
      if (b === false) return false;
      return a === null || b === null ? null : true;
    };
  }
  if (fns.length === 3) {
    const [f0, f1, f2] = fns as [Fn, Fn, Fn];
    return (env) => {
      const a = truth(f0(env));
      if (a === false) return false;
      const b = truth(f1(env));
      if (b === false) return false;
      const c = truth(f2(env));
      if (c === false) return false;
      return a === null || b === null || c === null ? null : true;
    };
  }
  return (env) => {
    let r: boolean | null = true;
    for (let i = 0; i < fns.length; i++) {
      const v = truth(fns[i]!(env));
      if (v === false) return false;
      if (v === null) r = null;
    }
    return r;
  };
}

function compileOr(fns: readonly Fn[]): Fn {
  if (fns.length === 2) {
    const [f0, f1] = fns as [Fn, Fn];
    return (env) => {
      const a = truth(f0(env));
      if (a === true) return true;
      const b = truth(f1(env));
      if (b === true) return true;
      return a === null || b === null ? null : false;
    };
  }
  return (env) => {
    let r: boolean | null = false;
    for (let i = 0; i < fns.length; i++) {
      const v = truth(fns[i]!(env));
      if (v === true) return true;
      if (v === null) r = null;
    }
    return r;
  };
}

class CompiledFilter implements Filter {
  readonly text: string;
  readonly dialect: Dialect;
  readonly usesBody: boolean;
  readonly #fn: Fn;
  readonly #budget: Budget;

  constructor(text: string, dialect: Dialect, usesBody: boolean, fn: Fn, budget: Budget) {
    this.text = text;
    this.dialect = dialect;
    this.usesBody = usesBody;
    this.#fn = fn;
    this.#budget = budget;
  }

  matches(env: FilterEnv): boolean {
    this.#budget.left = FILTER_LIMITS.MAX_EVAL_STEPS;
    return this.#fn(env) === true;
  }

  /** The three-valued result (true, false or null for NULL), or a non-boolean value; for tests and tools. */
  evaluate(env: FilterEnv): unknown {
    this.#budget.left = FILTER_LIMITS.MAX_EVAL_STEPS;
    return this.#fn(env);
  }
}

/**
 * Compiles a filter expression once; the result is immutable and cheap to evaluate.
 * @param dialect 'content' (default): `/paths` and regex LIKE; 'selector': JMS selector
 *   (properties only, LIKE with % _ and ESCAPE).
 * @throws FilterSyntaxError on bad syntax or a breached limit (length, depth, nodes, literal, regex).
 */
export function compileFilter(text: string, dialect: Dialect = 'content'): Filter & { evaluate(env: FilterEnv): unknown } {
  if (typeof text !== 'string') throw new TypeError('filter text must be a string');
  if (dialect !== 'content' && dialect !== 'selector') throw new TypeError(`unknown filter dialect ${String(dialect)}`);
  const ast = parseFilter(text, dialect);
  const compiler = new Compiler(text);
  const c = compiler.compile(ast);
  return new CompiledFilter(text, dialect, readsBody(ast), c.fn, compiler.budget);
}
