/**
 * A linear-time regular expression matcher for content-filter LIKE.
 *
 * Why not RegExp: V8's backtracking engine takes seconds on `/.*x/` against 64 KiB of 'a'
 * and effectively forever on `(a+)+b` or `a*a*a*x`; a filter comes from a client, so one
 * subscription could stall the broker. This engine compiles the pattern once to a Thompson
 * NFA and simulates it breadth-first (Pike/Thompson), so a test costs at most
 * O(input length x program size) whatever the pattern, and it allocates nothing per test.
 * That product can still be large (64 KiB x 20,000 states), so a test inside a filter
 * evaluation counts its steps (threads examined plus states visited) against the
 * evaluation's Budget and gives up with NULL past it (lib/filter/search.ts). The work arrays
 * are shared by all programs (one test runs at a time), so a compiled pattern keeps only its
 * 12 bytes per state.
 *
 * Syntax is JavaScript's (no flags, UTF-16 code units, case-sensitive), minus the features
 * that need backtracking: backreferences and lookaround are rejected. Supported: literals,
 * escapes (\n \t \xHH \uHHHH \cX, identity escapes), `.`, classes `[a-z]` `[^...]` with
 * \d \w \s \D \W \S, anchors ^ $ \b \B, groups (capturing, (?:...), (?<name>...)),
 * alternation, and quantifiers * + ? {n} {n,} {n,m} (lazy forms accepted; for a yes/no
 * test they mean the same). The pattern is unanchored: it matches anywhere unless ^ or $.
 */
import { FILTER_LIMITS } from './limits.js';
import { LiteralFinder, OUT_OF_BUDGET, type Budget } from './search.js';

/** A pattern that cannot be compiled; `offset` is in the pattern text. */
export class RegexError extends Error {
  readonly offset: number;
  constructor(message: string, offset: number) {
    super(message);
    this.name = 'RegexError';
    this.offset = offset;
  }
}

/**
 * The regex LIKE patterns of one filter together need more states than
 * FILTER_LIMITS.MAX_FILTER_REGEX_PROGRAM (the pattern itself may be within MAX_REGEX_PROGRAM).
 */
export class RegexTotalError extends RegexError {
  constructor(limit: number) {
    super(`LIKE patterns too complex in total (more than ${limit} regex states in one filter)`, 0);
    this.name = 'RegexTotalError';
  }
}

/** A compiled LIKE pattern (either dialect). It never backtracks. */
export interface StringMatcher {
  /** The exact answer whatever it costs (tests, tools): O(input x program) at worst. */
  test(s: string): boolean;
  /**
   * The answer, or null when it would cost more than `budget.left` steps (which is then 0);
   * subtracts what the test cost. What a filter evaluation calls.
   */
  match(s: string, budget: Budget): boolean | null;
  /** Program states held (0 when no NFA is needed): what counts toward MAX_FILTER_REGEX_PROGRAM. */
  readonly states: number;
}

/** A budget that never runs out (Infinity minus anything stays Infinity), for `test`. */
const UNLIMITED: Budget = { left: Infinity };

// ---- character classes ----

/** Set of UTF-16 code units: a bitmap for ASCII plus sorted ranges above it. */
class CharClass {
  readonly #ascii = new Uint32Array(4);
  readonly #ranges: number[] = [];
  readonly #negated: boolean;

  constructor(ranges: readonly number[], negated: boolean) {
    this.#negated = negated;
    const high: [number, number][] = [];
    for (let k = 0; k < ranges.length; k += 2) {
      let lo = ranges[k]!;
      const hi = ranges[k + 1]!;
      for (; lo <= hi && lo < 128; lo++) this.#ascii[lo >> 5]! |= 1 << (lo & 31);
      if (lo <= hi) high.push([lo, hi]);
    }
    high.sort((a, b) => a[0] - b[0]);
    for (const [lo, hi] of high) {
      const last = this.#ranges.length - 1;
      if (last > 0 && lo <= this.#ranges[last]! + 1) this.#ranges[last] = Math.max(this.#ranges[last]!, hi);
      else this.#ranges.push(lo, hi);
    }
  }

  has(c: number): boolean {
    let r: boolean;
    if (c < 128) r = ((this.#ascii[c >> 5]! >>> (c & 31)) & 1) === 1;
    else {
      r = false;
      const rs = this.#ranges;
      for (let k = 0; k < rs.length; k += 2) {
        if (c < rs[k]!) break;
        if (c <= rs[k + 1]!) { r = true; break; }
      }
    }
    return r !== this.#negated;
  }
}

const DIGIT = [48, 57];
const WORD = [48, 57, 65, 90, 95, 95, 97, 122];
const SPACE = [9, 13, 32, 32, 160, 160, 5760, 5760, 8192, 8202, 8232, 8233, 8239, 8239, 8287, 8287, 12288, 12288, 65279, 65279];
const LINE_TERMINATORS = [10, 10, 13, 13, 8232, 8233];
/** `.`: one immutable class shared by every pattern. */
const DOT = new CharClass(LINE_TERMINATORS, true);

/** Complement of sorted, disjoint ranges within [0, 0xFFFF]. */
function complement(ranges: readonly number[]): number[] {
  const out: number[] = [];
  let next = 0;
  for (let k = 0; k < ranges.length; k += 2) {
    if (ranges[k]! > next) out.push(next, ranges[k]! - 1);
    next = ranges[k + 1]! + 1;
  }
  if (next <= 0xffff) out.push(next, 0xffff);
  return out;
}

function setNode(ranges: readonly number[], negated: boolean): RNode {
  return { t: 'class', cls: new CharClass(ranges, negated), ranges: negated ? complement(ranges) : ranges };
}

function isWordChar(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || c === 95 || (c >= 97 && c <= 122);
}

// ---- pattern tree ----

type RNode =
  | { t: 'char'; c: number }
  /** `ranges`: the members as [lo, hi] pairs, kept for class escapes used inside [...]. */
  | { t: 'class'; cls: CharClass; ranges?: readonly number[] }
  | { t: 'bol' } | { t: 'eol' } | { t: 'wordb'; negated: boolean }
  | { t: 'cat'; items: RNode[] }
  | { t: 'alt'; items: RNode[] }
  | { t: 'rep'; node: RNode; min: number; max: number /* -1: unbounded */ };

const HEX = /^[0-9A-Fa-f]+$/;

class PatternParser {
  readonly #p: string;
  #i = 0;
  constructor(p: string) { this.#p = p; }

  parse(): RNode {
    const node = this.#alt(0);
    if (this.#i < this.#p.length) throw new RegexError(`unmatched ')'`, this.#i);
    return node;
  }

  #alt(depth: number): RNode {
    if (depth > FILTER_LIMITS.MAX_DEPTH) throw new RegexError(`groups nested too deeply (max ${FILTER_LIMITS.MAX_DEPTH})`, this.#i);
    const items = [this.#seq(depth)];
    while (this.#p[this.#i] === '|') { this.#i++; items.push(this.#seq(depth)); }
    return items.length === 1 ? items[0]! : { t: 'alt', items };
  }

  #seq(depth: number): RNode {
    const items: RNode[] = [];
    const p = this.#p;
    while (this.#i < p.length && p[this.#i] !== '|' && p[this.#i] !== ')') {
      const at = this.#i;
      const atom = this.#atom(depth);
      const q = this.#quantifier();
      if (q === null) { items.push(atom); continue; }
      if (atom.t === 'bol' || atom.t === 'eol' || atom.t === 'wordb') throw new RegexError('nothing to repeat', at);
      items.push({ t: 'rep', node: atom, min: q[0], max: q[1] });
    }
    return items.length === 1 ? items[0]! : { t: 'cat', items };
  }

  /** Reads a quantifier if one follows: [min, max] (max -1 = unbounded), or null. */
  #quantifier(): [number, number] | null {
    const p = this.#p;
    const ch = p[this.#i];
    let q: [number, number] | null = null;
    if (ch === '*') { q = [0, -1]; this.#i++; }
    else if (ch === '+') { q = [1, -1]; this.#i++; }
    else if (ch === '?') { q = [0, 1]; this.#i++; }
    else if (ch === '{') {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(p.slice(this.#i, this.#i + 32));
      if (m === null) return null; // a literal '{', as JavaScript reads it
      const min = Number(m[1]);
      const max = m[2] === undefined ? min : m[3] === '' ? -1 : Number(m[3]);
      if (min > FILTER_LIMITS.MAX_REGEX_REPEAT || max > FILTER_LIMITS.MAX_REGEX_REPEAT) {
        throw new RegexError(`repetition count too large (max ${FILTER_LIMITS.MAX_REGEX_REPEAT})`, this.#i);
      }
      if (max !== -1 && max < min) throw new RegexError('numbers out of order in {} quantifier', this.#i);
      q = [min, max];
      this.#i += m[0].length;
    }
    if (q !== null) {
      if (p[this.#i] === '?') this.#i++; // lazy: same language
      const next = p[this.#i];
      if (next === '*' || next === '+' || next === '?') throw new RegexError('nothing to repeat', this.#i);
    }
    return q;
  }

  #atom(depth: number): RNode {
    const p = this.#p;
    const at = this.#i;
    const ch = p[this.#i++]!;
    switch (ch) {
      case '(': {
        if (p[this.#i] === '?') {
          const next = p[this.#i + 1];
          if (next === ':') this.#i += 2;
          else if (next === '<' && p[this.#i + 2] !== '=' && p[this.#i + 2] !== '!') {
            const close = p.indexOf('>', this.#i);
            if (close < 0) throw new RegexError('unterminated group name', this.#i);
            this.#i = close + 1;
          } else throw new RegexError('lookaround is not supported', at);
        }
        const inner = this.#alt(depth + 1);
        if (p[this.#i] !== ')') throw new RegexError(`expected ')'`, this.#i);
        this.#i++;
        return inner;
      }
      case '[': return { t: 'class', cls: this.#class() };
      case '.': return { t: 'class', cls: DOT };
      case '^': return { t: 'bol' };
      case '$': return { t: 'eol' };
      case '*': case '+': case '?': throw new RegexError('nothing to repeat', at);
      case '{':
        if (/^\d+(,\d*)?\}/.test(p.slice(this.#i, this.#i + 32))) throw new RegexError('nothing to repeat', at);
        return { t: 'char', c: 123 };
      case '\\': {
        const e = this.#escape(false);
        if (typeof e === 'number') return { t: 'char', c: e };
        return e;
      }
      default:
        return { t: 'char', c: ch.charCodeAt(0) };
    }
  }

  /** After a backslash: a code unit, a class (\d ...) or, outside classes, an assertion (\b). */
  #escape(inClass: boolean): number | RNode {
    const p = this.#p;
    const at = this.#i - 1;
    if (this.#i >= p.length) throw new RegexError('\\ at end of pattern', at);
    const ch = p[this.#i++]!;
    switch (ch) {
      case 'd': return setNode(DIGIT, false);
      case 'D': return setNode(DIGIT, true);
      case 'w': return setNode(WORD, false);
      case 'W': return setNode(WORD, true);
      case 's': return setNode(SPACE, false);
      case 'S': return setNode(SPACE, true);
      case 'b': return inClass ? 8 : { t: 'wordb', negated: false };
      case 'B':
        if (inClass) return 66;
        return { t: 'wordb', negated: true };
      case 'n': return 10;
      case 'r': return 13;
      case 't': return 9;
      case 'v': return 11;
      case 'f': return 12;
      case '0':
        if (p[this.#i] !== undefined && p[this.#i]! >= '0' && p[this.#i]! <= '9') throw new RegexError('octal escapes are not supported', at);
        return 0;
      case 'x': {
        const h = p.slice(this.#i, this.#i + 2);
        if (h.length === 2 && HEX.test(h)) { this.#i += 2; return parseInt(h, 16); }
        return 120;
      }
      case 'u': {
        const h = p.slice(this.#i, this.#i + 4);
        if (h.length === 4 && HEX.test(h)) { this.#i += 4; return parseInt(h, 16); }
        return 117;
      }
      case 'c': {
        const l = p.charCodeAt(this.#i);
        if ((l >= 65 && l <= 90) || (l >= 97 && l <= 122)) { this.#i++; return l % 32; }
        this.#i--; // JavaScript reads `\c` + non-letter as a literal backslash
        return 92;
      }
      case 'k':
        if (p[this.#i] === '<') throw new RegexError('backreferences are not supported', at);
        return 107;
      default:
        if (ch >= '1' && ch <= '9') throw new RegexError('backreferences are not supported', at);
        return ch.charCodeAt(0);
    }
  }

  /** After '[': reads through the closing ']'. */
  #class(): CharClass {
    const p = this.#p;
    const start = this.#i - 1;
    let negated = false;
    if (p[this.#i] === '^') { negated = true; this.#i++; }
    const ranges: number[] = [];
    const addSet = (set: RNode) => {
      if (set.t === 'class' && set.ranges !== undefined) ranges.push(...set.ranges);
    };
    for (;;) {
      if (this.#i >= p.length) throw new RegexError("unterminated character class, expected ']'", start);
      let ch = p[this.#i++]!;
      if (ch === ']') break;
      let lo: number;
      if (ch === '\\') {
        const e = this.#escape(true);
        if (typeof e !== 'number') { addSet(e); continue; }
        lo = e;
      } else lo = ch.charCodeAt(0);
      // A range `a-z`, unless '-' is last or the other end is a class escape.
      if (p[this.#i] === '-' && p[this.#i + 1] !== undefined && p[this.#i + 1] !== ']') {
        const save = this.#i;
        this.#i++;
        ch = p[this.#i++]!;
        let hi: number;
        if (ch === '\\') {
          const e = this.#escape(true);
          if (typeof e !== 'number') { // `[a-\d]`: '-' is literal, as in JavaScript without /u
            ranges.push(lo, lo, 45, 45);
            addSet(e);
            continue;
          }
          hi = e;
        } else hi = ch.charCodeAt(0);
        if (hi < lo) throw new RegexError('range out of order in character class', save);
        ranges.push(lo, hi);
        continue;
      }
      ranges.push(lo, lo);
    }
    return new CharClass(ranges, negated);
  }
}

// ---- program ----

const CHAR = 0, CLASS = 1, SPLIT = 2, JMP = 3, MATCH = 4, BOL = 5, EOL = 6, WORDB = 7, NWORDB = 8;

class Emitter {
  readonly op: number[] = [];
  readonly x: number[] = [];
  readonly y: number[] = [];
  /** Distinct classes; CLASS instructions index this (a class repeated by `{n}` is kept once). */
  readonly classes: CharClass[] = [];
  readonly #classIndex = new Map<CharClass, number>();

  emit(op: number, x = 0, y = 0): number {
    if (this.op.length >= FILTER_LIMITS.MAX_REGEX_PROGRAM) {
      throw new RegexError(`pattern too complex (more than ${FILTER_LIMITS.MAX_REGEX_PROGRAM} states)`, 0);
    }
    this.op.push(op); this.x.push(x); this.y.push(y);
    return this.op.length - 1;
  }

  #classOf(cls: CharClass): number {
    let k = this.#classIndex.get(cls);
    if (k === undefined) { k = this.classes.length; this.classes.push(cls); this.#classIndex.set(cls, k); }
    return k;
  }

  get pc(): number { return this.op.length; }

  node(n: RNode): void {
    switch (n.t) {
      case 'char': this.emit(CHAR, n.c); break;
      case 'class': this.emit(CLASS, this.#classOf(n.cls)); break;
      case 'bol': this.emit(BOL); break;
      case 'eol': this.emit(EOL); break;
      case 'wordb': this.emit(n.negated ? NWORDB : WORDB); break;
      case 'cat': for (const item of n.items) this.node(item); break;
      case 'alt': {
        const jumps: number[] = [];
        for (let k = 0; k < n.items.length - 1; k++) {
          const s = this.emit(SPLIT);
          this.x[s] = this.pc;
          this.node(n.items[k]!);
          jumps.push(this.emit(JMP));
          this.y[s] = this.pc;
        }
        this.node(n.items[n.items.length - 1]!);
        for (const j of jumps) this.x[j] = this.pc;
        break;
      }
      case 'rep': {
        const { node, min, max } = n;
        if (max === -1 && min > 0) {
          for (let k = 0; k < min - 1; k++) this.node(node);
          const loop = this.pc; // x+ : x, then SPLIT back
          this.node(node);
          const s = this.emit(SPLIT, loop);
          this.y[s] = this.pc;
        } else if (max === -1) {
          const s = this.emit(SPLIT); // x* : SPLIT body/out, body, JMP SPLIT
          this.x[s] = this.pc;
          this.node(node);
          this.emit(JMP, s);
          this.y[s] = this.pc;
        } else {
          for (let k = 0; k < min; k++) this.node(node);
          const splits: number[] = [];
          for (let k = min; k < max; k++) {
            const s = this.emit(SPLIT);
            this.x[s] = this.pc;
            this.node(node);
            splits.push(s);
          }
          for (const s of splits) this.y[s] = this.pc;
        }
        break;
      }
      default: { const never: never = n; return never; }
    }
  }
}

// Work arrays shared by every program: a test runs to completion before another starts
// (evaluation is synchronous), so one set as large as the largest allowed program serves all
// (400 KB, allocated when the first program is compiled). `mark` holds generations from one
// counter (`gen`) for all programs, so no stale mark is ever current.
interface Work { clist: Int32Array; nlist: Int32Array; mark: Int32Array; stack: Int32Array; gen: number }
let WORK: Work | null = null;

function work(): Work {
  if (WORK === null) {
    const len = FILTER_LIMITS.MAX_REGEX_PROGRAM;
    WORK = { clist: new Int32Array(len), nlist: new Int32Array(len), mark: new Int32Array(len), stack: new Int32Array(2 * len + 2), gen: 0 };
  }
  return WORK;
}

const NO_CLASSES: readonly CharClass[] = Object.freeze([]);

class NfaMatcher implements StringMatcher {
  readonly states: number;
  /** The program, 3 slots a state: opcode, x, y (one typed array: a few hundred bytes less per pattern than three). */
  readonly #prog: Int32Array;
  readonly #classes: readonly CharClass[];
  readonly #anchored: boolean;
  /** Unanchored patterns that begin with literal text: where a match can start (no live thread). */
  readonly #prefix: LiteralFinder | null;
  readonly #work: Work;
  readonly #mark: Int32Array;
  readonly #stack: Int32Array;
  /** States visited by #add since match() last took them (the steps of following empty transitions). */
  #pops = 0;

  constructor(e: Emitter, anchored: boolean, prefix: string) {
    this.#prefix = anchored || prefix === '' ? null : new LiteralFinder(prefix);
    const len = e.op.length;
    const prog = new Int32Array(3 * len);
    for (let pc = 0; pc < len; pc++) { prog[3 * pc] = e.op[pc]!; prog[3 * pc + 1] = e.x[pc]!; prog[3 * pc + 2] = e.y[pc]!; }
    this.#prog = prog;
    this.#classes = e.classes.length === 0 ? NO_CLASSES : e.classes.slice();
    this.#anchored = anchored;
    this.states = e.op.length;
    this.#work = work();
    this.#mark = this.#work.mark;
    this.#stack = this.#work.stack;
  }

  /** Adds the thread at `pc0` and everything it reaches without consuming; -1 when MATCH is reached. */
  #add(list: Int32Array, count: number, pc0: number, pos: number, s: string, g: number): number {
    const prog = this.#prog, mark = this.#mark, stack = this.#stack;
    let sp = 0, pops = 0;
    stack[sp++] = pc0;
    while (sp > 0) {
      const pc = stack[--sp]!;
      pops++;
      if (mark[pc] === g) continue;
      mark[pc] = g;
      const op = prog[3 * pc]!;
      switch (op) {
        case JMP: stack[sp++] = prog[3 * pc + 1]!; break;
        case SPLIT: stack[sp++] = prog[3 * pc + 2]!; stack[sp++] = prog[3 * pc + 1]!; break;
        case MATCH: this.#pops += pops; return -1;
        case BOL: if (pos === 0) stack[sp++] = pc + 1; break;
        case EOL: if (pos === s.length) stack[sp++] = pc + 1; break;
        case WORDB: case NWORDB: {
          const before = pos > 0 && isWordChar(s.charCodeAt(pos - 1));
          const after = pos < s.length && isWordChar(s.charCodeAt(pos));
          if ((before !== after) === (op === WORDB)) stack[sp++] = pc + 1;
          break;
        }
        default: list[count++] = pc;
      }
    }
    this.#pops += pops;
    return count;
  }

  test(s: string): boolean {
    return this.match(s, UNLIMITED) === true;
  }

  match(s: string, budget: Budget): boolean | null {
    const n = s.length;
    const w = this.#work;
    if (w.gen > 0x3fffffff - n) { w.mark.fill(0); w.gen = 0; }
    const base = w.gen + 1;
    w.gen += n + 2;
    const prog = this.#prog, classes = this.#classes, anchored = this.#anchored, prefix = this.#prefix;
    let cl = w.clist, nl = w.nlist;
    let left = budget.left;
    let cn = 0;
    let result = false;
    this.#pops = 0;
    for (let i = 0; ; i++) {
      if (cn === 0 && prefix !== null) {
        // No thread alive: a match can only start where the literal prefix occurs (the
        // program's first states are its characters, in order). Skip to it.
        budget.left = left;
        const at = prefix.find(s, i, n, budget);
        if (at === OUT_OF_BUDGET) return null;
        left = budget.left;
        if (at < 0) break;
        i = at;
      }
      const g = base + i;
      if (i === 0 || !anchored) {
        cn = this.#add(cl, cn, 0, i, s, g);
        if (cn < 0) { result = true; break; }
      }
      if (i >= n || cn === 0 && anchored) break;
      const c = s.charCodeAt(i);
      let nn = 0;
      for (let k = 0; k < cn; k++) {
        const pc = cl[k]!;
        const arg = prog[3 * pc + 1]!;
        const hit = prog[3 * pc] === CHAR ? arg === c : classes[arg]!.has(c);
        if (hit) {
          nn = this.#add(nl, nn, pc + 1, i + 1, s, g + 1);
          if (nn < 0) break;
        }
      }
      // This character's steps: the threads examined and the states their successors visited.
      left -= cn + this.#pops;
      this.#pops = 0;
      if (left < 0) { budget.left = 0; return null; }
      if (nn < 0) { result = true; break; }
      const t = cl; cl = nl; nl = t;
      cn = nn;
    }
    left -= this.#pops + 1;
    if (left < 0) { budget.left = 0; return null; }
    budget.left = left;
    return result;
  }
}

/** Plain text, optionally anchored: no NFA. `includes` runs in linear time (LiteralFinder). */
class LiteralMatcher implements StringMatcher {
  readonly states = 0;
  readonly #lit: string;
  readonly #kind: 0 | 1 | 2 | 3;
  readonly #finder: LiteralFinder | null;

  /** kind: 0 equals, 1 starts with, 2 ends with, 3 contains. */
  constructor(lit: string, kind: 0 | 1 | 2 | 3) {
    this.#lit = lit;
    this.#kind = kind;
    this.#finder = kind === 3 ? new LiteralFinder(lit) : null;
  }

  test(s: string): boolean {
    return this.match(s, UNLIMITED) === true;
  }

  match(s: string, budget: Budget): boolean | null {
    const lit = this.#lit;
    if (this.#finder !== null) {
      const at = this.#finder.find(s, 0, s.length, budget);
      return at === OUT_OF_BUDGET ? null : at >= 0;
    }
    // One comparison of at most the literal's length.
    const cost = 1 + Math.min(s.length, lit.length);
    if (cost > budget.left) { budget.left = 0; return null; }
    budget.left -= cost;
    return this.#kind === 0 ? s === lit : this.#kind === 1 ? s.startsWith(lit) : s.endsWith(lit);
  }
}

/** The literal text of a pattern made only of plain characters, else null. */
function literalOf(nodes: readonly RNode[]): string | null {
  let s = '';
  for (const n of nodes) {
    if (n.t !== 'char') return null;
    s += String.fromCharCode(n.c);
  }
  return s;
}

/**
 * Compiles a content-filter LIKE pattern; throws RegexError.
 * @param maxStates most program states it may use (what is left of the filter's
 *   MAX_FILTER_REGEX_PROGRAM); more throws RegexTotalError. At most MAX_REGEX_PROGRAM.
 */
export function compileRegex(pattern: string, maxStates: number = FILTER_LIMITS.MAX_REGEX_PROGRAM): StringMatcher {
  try {
    new RegExp(pattern); // reject what JavaScript itself would reject, with its message
  } catch (err) {
    throw new RegexError((err as Error).message.replace(/^Invalid regular expression: /, ''), 0);
  }
  const tree = new PatternParser(pattern).parse();
  const items = tree.t === 'cat' ? tree.items : [tree];

  // Fast paths for plain text, optionally anchored: no NFA needed.
  const anchoredStart = items[0]?.t === 'bol';
  const anchoredEnd = items.length > 0 && items[items.length - 1]!.t === 'eol';
  const inner = items.slice(anchoredStart ? 1 : 0, anchoredEnd ? items.length - 1 : items.length);
  const lit = literalOf(inner);
  if (lit !== null) {
    return new LiteralMatcher(lit, anchoredStart && anchoredEnd ? 0 : anchoredStart ? 1 : anchoredEnd ? 2 : 3);
  }

  const e = new Emitter();
  e.node(tree);
  e.emit(MATCH);
  if (e.op.length > maxStates) throw new RegexTotalError(FILTER_LIMITS.MAX_FILTER_REGEX_PROGRAM);
  // The leading plain characters: the program's first states (only used when unanchored).
  let prefix = '';
  for (const n of items) {
    if (n.t !== 'char') break;
    prefix += String.fromCharCode(n.c);
  }
  return new NfaMatcher(e, anchoredStart, prefix);
}
