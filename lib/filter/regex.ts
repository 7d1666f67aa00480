/**
 * A linear-time regular expression matcher for content-filter LIKE.
 *
 * Why not RegExp: V8's backtracking engine takes seconds on `/.*x/` against 64 KiB of 'a'
 * and effectively forever on `(a+)+b` or `a*a*a*x`; a filter comes from a client, so one
 * subscription could stall the broker. This engine compiles the pattern once to a Thompson
 * NFA and simulates it breadth-first (Pike/Thompson), so a test costs at most
 * O(input length x program size) whatever the pattern, and it allocates nothing per test.
 *
 * Syntax is JavaScript's (no flags, UTF-16 code units, case-sensitive), minus the features
 * that need backtracking: backreferences and lookaround are rejected. Supported: literals,
 * escapes (\n \t \xHH \uHHHH \cX, identity escapes), `.`, classes `[a-z]` `[^...]` with
 * \d \w \s \D \W \S, anchors ^ $ \b \B, groups (capturing, (?:...), (?<name>...)),
 * alternation, and quantifiers * + ? {n} {n,} {n,m} (lazy forms accepted; for a yes/no
 * test they mean the same). The pattern is unanchored: it matches anywhere unless ^ or $.
 */
import { FILTER_LIMITS } from './limits.js';

/** A pattern that cannot be compiled; `offset` is in the pattern text. */
export class RegexError extends Error {
  readonly offset: number;
  constructor(message: string, offset: number) {
    super(message);
    this.name = 'RegexError';
    this.offset = offset;
  }
}

/** A compiled pattern. `test` is safe to call with any input; it never backtracks. */
export interface StringMatcher {
  test(s: string): boolean;
}

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
      case '.': return { t: 'class', cls: new CharClass(LINE_TERMINATORS, true) };
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
  readonly classes: CharClass[] = [];

  emit(op: number, x = 0, y = 0): number {
    if (this.op.length >= FILTER_LIMITS.MAX_REGEX_PROGRAM) {
      throw new RegexError(`pattern too complex (more than ${FILTER_LIMITS.MAX_REGEX_PROGRAM} states)`, 0);
    }
    this.op.push(op); this.x.push(x); this.y.push(y);
    return this.op.length - 1;
  }

  get pc(): number { return this.op.length; }

  node(n: RNode): void {
    switch (n.t) {
      case 'char': this.emit(CHAR, n.c); break;
      case 'class': this.classes.push(n.cls); this.emit(CLASS, this.classes.length - 1); break;
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

class NfaMatcher implements StringMatcher {
  readonly #op: Uint8Array;
  readonly #x: Int32Array;
  readonly #y: Int32Array;
  readonly #classes: CharClass[];
  readonly #anchored: boolean;
  // Work arrays, allocated once per pattern and reused by every test.
  #clist: Int32Array;
  #nlist: Int32Array;
  readonly #mark: Int32Array;
  readonly #stack: Int32Array;
  #gen = 0;

  constructor(e: Emitter, anchored: boolean) {
    this.#op = Uint8Array.from(e.op);
    this.#x = Int32Array.from(e.x);
    this.#y = Int32Array.from(e.y);
    this.#classes = e.classes;
    this.#anchored = anchored;
    const len = e.op.length;
    this.#clist = new Int32Array(len);
    this.#nlist = new Int32Array(len);
    this.#mark = new Int32Array(len);
    this.#stack = new Int32Array(2 * len + 2);
  }

  /** Adds the thread at `pc0` and everything it reaches without consuming; -1 when MATCH is reached. */
  #add(list: Int32Array, count: number, pc0: number, pos: number, s: string, g: number): number {
    const op = this.#op, x = this.#x, y = this.#y, mark = this.#mark, stack = this.#stack;
    let sp = 0;
    stack[sp++] = pc0;
    while (sp > 0) {
      const pc = stack[--sp]!;
      if (mark[pc] === g) continue;
      mark[pc] = g;
      switch (op[pc]) {
        case JMP: stack[sp++] = x[pc]!; break;
        case SPLIT: stack[sp++] = y[pc]!; stack[sp++] = x[pc]!; break;
        case MATCH: return -1;
        case BOL: if (pos === 0) stack[sp++] = pc + 1; break;
        case EOL: if (pos === s.length) stack[sp++] = pc + 1; break;
        case WORDB: case NWORDB: {
          const before = pos > 0 && isWordChar(s.charCodeAt(pos - 1));
          const after = pos < s.length && isWordChar(s.charCodeAt(pos));
          if ((before !== after) === (op[pc] === WORDB)) stack[sp++] = pc + 1;
          break;
        }
        default: list[count++] = pc;
      }
    }
    return count;
  }

  test(s: string): boolean {
    const n = s.length;
    if (this.#gen > 0x3fffffff - n) { this.#mark.fill(0); this.#gen = 0; }
    const base = this.#gen + 1;
    this.#gen += n + 2;
    const op = this.#op, x = this.#x, classes = this.#classes;
    let cl = this.#clist, nl = this.#nlist;
    let cn = 0;
    for (let i = 0; ; i++) {
      const g = base + i;
      if (i === 0 || !this.#anchored) {
        cn = this.#add(cl, cn, 0, i, s, g);
        if (cn < 0) return true;
      }
      if (i >= n || cn === 0 && this.#anchored) return false;
      const c = s.charCodeAt(i);
      let nn = 0;
      for (let k = 0; k < cn; k++) {
        const pc = cl[k]!;
        const hit = op[pc] === CHAR ? x[pc] === c : classes[x[pc]!]!.has(c);
        if (hit) {
          nn = this.#add(nl, nn, pc + 1, i + 1, s, g + 1);
          if (nn < 0) return true;
        }
      }
      const t = cl; cl = nl; nl = t;
      cn = nn;
    }
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

/** Compiles a content-filter LIKE pattern; throws RegexError. */
export function compileRegex(pattern: string): StringMatcher {
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
    if (anchoredStart && anchoredEnd) return { test: (s) => s === lit };
    if (anchoredStart) return { test: (s) => s.startsWith(lit) };
    if (anchoredEnd) return { test: (s) => s.endsWith(lit) };
    return { test: (s) => s.includes(lit) };
  }

  const e = new Emitter();
  e.node(tree);
  e.emit(MATCH);
  return new NfaMatcher(e, anchoredStart);
}
