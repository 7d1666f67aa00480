import type { ArithOp, CompareOp, Expr, FunctionName } from './ast.js';
import { FilterSyntaxError } from './errors.js';
import { tokenize, type Token } from './lexer.js';
import { FILTER_LIMITS } from './limits.js';

export type Dialect = 'content' | 'selector';

/** Function name -> [min args, max args]. */
const FUNCTIONS: Readonly<Record<FunctionName, readonly [number, number]>> = {
  UPPER: [1, 1],
  LOWER: [1, 1],
  LENGTH: [1, 1],
  COALESCE: [1, Infinity],
  INSTR: [2, 2],
};

const COMPARE_OPS = new Set(['=', '<>', '<', '<=', '>', '>=']);

type Dist<T> = T extends unknown ? Omit<T, 'depth'> : never;
type NodeInit = Dist<Expr>;

/**
 * Recursive descent parser. Precedence, loosest first: OR, AND, NOT, predicates
 * (comparison, BETWEEN, IN, LIKE, BEGINS/ENDS WITH, IS NULL; they do not chain), `+ -`,
 * `* / %`, unary minus, primaries.
 */
class Parser {
  readonly #text: string;
  readonly #dialect: Dialect;
  readonly #tokens: Token[];
  #i = 0;
  #nesting = 0;
  #nodes = 0;

  constructor(text: string, dialect: Dialect) {
    this.#text = text;
    this.#dialect = dialect;
    this.#tokens = tokenize(text);
  }

  parse(): Expr {
    if (this.#peek().type === 'eof') this.#fail('an expression');
    const e = this.#or();
    const t = this.#peek();
    if (t.type !== 'eof') {
      if (t.type === 'op' && COMPARE_OPS.has(t.op)) this.#fail('AND or OR (comparisons do not chain)');
      if (t.type === 'punct' && t.char === ')') this.#fail('end of expression (unbalanced \')\')');
      this.#fail('an operator, AND, OR or end of expression');
    }
    return e;
  }

  // ---- token helpers ----
  #peek(k = 0): Token { return this.#tokens[Math.min(this.#i + k, this.#tokens.length - 1)]!; }
  #next(): Token { const t = this.#peek(); if (t.type !== 'eof') this.#i++; return t; }
  #fail(expected: string, pos = this.#peek().pos, detail?: string): never {
    throw new FilterSyntaxError(expected, pos, this.#text, detail);
  }
  #isKeyword(word: string, k = 0): boolean { const t = this.#peek(k); return t.type === 'keyword' && t.word === word; }
  #isWord(upper: string, k = 0): boolean { const t = this.#peek(k); return t.type === 'ident' && t.upper === upper; }
  #isPunct(ch: string, k = 0): boolean { const t = this.#peek(k); return t.type === 'punct' && t.char === ch; }
  #expectPunct(ch: '(' | ')' | ','): void {
    if (!this.#isPunct(ch)) this.#fail(`'${ch}'`);
    this.#next();
  }
  #enter(pos: number): void {
    if (++this.#nesting > FILTER_LIMITS.MAX_DEPTH) {
      this.#fail(`nesting depth of at most ${FILTER_LIMITS.MAX_DEPTH}`, pos,
        `expression nested too deeply (max ${FILTER_LIMITS.MAX_DEPTH})`);
    }
  }
  #leave(): void { this.#nesting--; }

  /** Creates a node, enforcing the node count and tree depth limits. */
  #node(init: NodeInit, ...children: readonly Expr[]): Expr {
    if (++this.#nodes > FILTER_LIMITS.MAX_NODES) {
      this.#fail(`at most ${FILTER_LIMITS.MAX_NODES} nodes`, init.pos,
        `expression too large (more than ${FILTER_LIMITS.MAX_NODES} nodes)`);
    }
    let depth = 0;
    for (const c of children) if (c.depth > depth) depth = c.depth;
    depth++;
    if (depth > FILTER_LIMITS.MAX_DEPTH) {
      this.#fail(`nesting depth of at most ${FILTER_LIMITS.MAX_DEPTH}`, init.pos,
        `expression nested too deeply (max ${FILTER_LIMITS.MAX_DEPTH})`);
    }
    return { ...init, depth } as Expr;
  }

  // ---- grammar ----
  #or(): Expr {
    const pos = this.#peek().pos;
    const first = this.#and();
    if (!this.#isKeyword('OR')) return first;
    const operands = [first];
    while (this.#isKeyword('OR')) { this.#next(); operands.push(this.#and()); }
    return this.#node({ kind: 'or', pos, operands }, ...operands);
  }

  #and(): Expr {
    const pos = this.#peek().pos;
    const first = this.#not();
    if (!this.#isKeyword('AND')) return first;
    const operands = [first];
    while (this.#isKeyword('AND')) { this.#next(); operands.push(this.#not()); }
    return this.#node({ kind: 'and', pos, operands }, ...operands);
  }

  #not(): Expr {
    if (!this.#isKeyword('NOT')) return this.#predicate();
    const pos = this.#next().pos;
    this.#enter(pos);
    const operand = this.#not();
    this.#leave();
    return this.#node({ kind: 'not', pos, operand }, operand);
  }

  #predicate(): Expr {
    const pos = this.#peek().pos;
    const value = this.#additive();
    const t = this.#peek();
    if (t.type === 'op' && COMPARE_OPS.has(t.op)) {
      this.#next();
      const right = this.#additive();
      const e = this.#node({ kind: 'compare', pos, op: t.op as CompareOp, left: value, right }, value, right);
      const after = this.#peek();
      if (after.type === 'op' && COMPARE_OPS.has(after.op)) this.#fail('AND or OR (comparisons do not chain)');
      return e;
    }
    if (this.#isKeyword('IS')) {
      this.#next();
      let negated = false;
      if (this.#isKeyword('NOT')) { this.#next(); negated = true; }
      if (!this.#isKeyword('NULL')) this.#fail('NULL');
      this.#next();
      return this.#node({ kind: 'isnull', pos, negated, value }, value);
    }
    let negated = false;
    if (this.#isKeyword('NOT')) {
      const k = this.#peek(1);
      const ok = (k.type === 'keyword' && (k.word === 'BETWEEN' || k.word === 'IN' || k.word === 'LIKE'))
        || (k.type === 'ident' && (k.upper === 'BEGINS' || k.upper === 'ENDS'));
      if (!ok) this.#fail('BETWEEN, IN, LIKE, BEGINS WITH or ENDS WITH after NOT', k.pos);
      this.#next();
      negated = true;
    }
    if (this.#isKeyword('BETWEEN')) {
      this.#next();
      const low = this.#additive();
      if (!this.#isKeyword('AND')) this.#fail('AND (of BETWEEN)');
      this.#next();
      const high = this.#additive();
      return this.#node({ kind: 'between', pos, negated, value, low, high }, value, low, high);
    }
    if (this.#isKeyword('IN')) {
      this.#next();
      const items = this.#list(true);
      return this.#node({ kind: 'in', pos, negated, value, items }, value, ...items);
    }
    if (this.#isKeyword('LIKE')) {
      this.#next();
      const p = this.#peek();
      if (p.type !== 'string') this.#fail('a string literal pattern after LIKE');
      this.#next();
      let escape: string | null = null;
      if (this.#isWord('ESCAPE')) {
        if (this.#dialect !== 'selector') this.#fail('end of LIKE (ESCAPE is only for selectors; content LIKE takes a regex)');
        this.#next();
        const e = this.#peek();
        if (e.type !== 'string' || e.value.length !== 1) this.#fail('a one-character string after ESCAPE');
        this.#next();
        escape = e.value;
      }
      return this.#node({
        kind: 'like', pos, negated, value, pattern: p.value, patternPos: p.pos,
        mode: this.#dialect === 'selector' ? 'jms' : 'regex', escape,
      }, value);
    }
    if (this.#isWord('BEGINS') || this.#isWord('ENDS')) {
      const kind = this.#isWord('BEGINS') ? 'begins' : 'ends';
      this.#next();
      if (!this.#isWord('WITH')) this.#fail('WITH');
      this.#next();
      const items = this.#isPunct('(') ? this.#list(false) : [this.#additive()];
      return this.#node({ kind, pos, negated, value, items }, value, ...items);
    }
    if (negated) this.#fail('BETWEEN, IN, LIKE, BEGINS WITH or ENDS WITH after NOT');
    return value;
  }

  /** '(' expr {',' expr} ')' */
  #list(required: boolean): Expr[] {
    if (required && !this.#isPunct('(')) this.#fail("'('");
    const open = this.#next();
    this.#enter(open.pos);
    const items: Expr[] = [];
    if (this.#isPunct(')')) this.#fail('a list item');
    for (;;) {
      items.push(this.#or());
      if (this.#isPunct(',')) { this.#next(); continue; }
      if (!this.#isPunct(')')) this.#fail("',' or ')'");
      this.#next();
      break;
    }
    this.#leave();
    return items;
  }

  #additive(): Expr {
    const pos = this.#peek().pos;
    let left = this.#multiplicative();
    for (;;) {
      const t = this.#peek();
      if (t.type !== 'op' || (t.op !== '+' && t.op !== '-')) return left;
      this.#next();
      const right = this.#multiplicative();
      left = this.#node({ kind: 'arith', pos, op: t.op as ArithOp, left, right }, left, right);
    }
  }

  #multiplicative(): Expr {
    const pos = this.#peek().pos;
    let left = this.#unary();
    for (;;) {
      const t = this.#peek();
      if (t.type !== 'op' || (t.op !== '*' && t.op !== '/' && t.op !== '%')) return left;
      this.#next();
      const right = this.#unary();
      left = this.#node({ kind: 'arith', pos, op: t.op as ArithOp, left, right }, left, right);
    }
  }

  #unary(): Expr {
    const t = this.#peek();
    if (t.type === 'op' && (t.op === '-' || t.op === '+')) {
      this.#next();
      this.#enter(t.pos);
      const operand = this.#unary();
      this.#leave();
      if (t.op === '+') return operand;
      // Fold a negative number literal so `x > -5` costs no arithmetic per message.
      if (operand.kind === 'literal' && (typeof operand.value === 'number' || typeof operand.value === 'bigint')) {
        let v: number | bigint = -operand.value;
        if (typeof v === 'bigint' && v >= -9007199254740991n) v = Number(v);
        return { ...operand, pos: t.pos, value: v };
      }
      return this.#node({ kind: 'negate', pos: t.pos, operand }, operand);
    }
    return this.#primary();
  }

  #primary(): Expr {
    const t = this.#peek();
    switch (t.type) {
      case 'number':
        this.#next();
        return this.#node({ kind: 'literal', pos: t.pos, value: t.value, decimal: t.decimal });
      case 'string':
        this.#next();
        return this.#node({ kind: 'literal', pos: t.pos, value: t.value, decimal: false });
      case 'path':
        if (this.#dialect === 'selector') this.#fail("an identifier, literal or '(' (selectors have no /paths)");
        this.#next();
        return this.#node({ kind: 'path', pos: t.pos, path: Object.freeze(t.segments.slice()) });
      case 'keyword':
        if (t.word === 'TRUE' || t.word === 'FALSE' || t.word === 'NULL') {
          this.#next();
          return this.#node({ kind: 'literal', pos: t.pos, value: t.word === 'NULL' ? null : t.word === 'TRUE', decimal: false });
        }
        break;
      case 'ident': {
        this.#next();
        if (!this.#isPunct('(')) return this.#node({ kind: 'property', pos: t.pos, name: t.name });
        const fn = t.upper as FunctionName;
        // Own keys only: the name is the client's (upper-cased, so no Object.prototype member today, but not by design).
        const arity = Object.hasOwn(FUNCTIONS, fn) ? FUNCTIONS[fn] : undefined;
        if (arity === undefined) this.#fail('a known function (UPPER, LOWER, LENGTH, COALESCE, INSTR)', t.pos, `unknown function ${t.name}`);
        const args = this.#list(true);
        if (args.length < arity[0] || args.length > arity[1]) {
          const want = arity[1] === Infinity ? `at least ${arity[0]}` : `${arity[0]}`;
          this.#fail(`${want} argument${arity[0] === 1 && arity[1] === 1 ? '' : 's'} for ${fn}`, t.pos);
        }
        return this.#node({ kind: 'call', pos: t.pos, fn, args }, ...args);
      }
      case 'punct':
        if (t.char === '(') {
          this.#next();
          this.#enter(t.pos);
          const e = this.#or();
          this.#leave();
          this.#expectPunct(')');
          return e;
        }
        break;
      default:
        break;
    }
    this.#fail(this.#dialect === 'selector' ? "an identifier, literal or '('" : "a path, identifier, literal or '('");
  }
}

/** Parses an expression into its tree; throws FilterSyntaxError. */
export function parseFilter(text: string, dialect: Dialect = 'content'): Expr {
  return new Parser(text, dialect).parse();
}
