/** Expression tree produced by the parser. Built once per filter; never touched per message. */

export type CompareOp = '=' | '<>' | '<' | '<=' | '>' | '>=';
export type ArithOp = '+' | '-' | '*' | '/' | '%';
export type FunctionName = 'UPPER' | 'LOWER' | 'LENGTH' | 'COALESCE' | 'INSTR';

interface Base {
  /** Offset in the expression text where this node starts. */
  readonly pos: number;
  /** Height of the subtree (a leaf is 1); bounded by FILTER_LIMITS.MAX_DEPTH. */
  readonly depth: number;
}

export type Expr =
  | Base & { readonly kind: 'literal'; readonly value: null | number | bigint | string | boolean; readonly decimal: boolean }
  | Base & { readonly kind: 'path'; readonly path: readonly (string | number)[] }
  | Base & { readonly kind: 'property'; readonly name: string }
  | Base & { readonly kind: 'negate'; readonly operand: Expr }
  | Base & { readonly kind: 'arith'; readonly op: ArithOp; readonly left: Expr; readonly right: Expr }
  | Base & { readonly kind: 'compare'; readonly op: CompareOp; readonly left: Expr; readonly right: Expr }
  | Base & { readonly kind: 'and' | 'or'; readonly operands: readonly Expr[] }
  | Base & { readonly kind: 'not'; readonly operand: Expr }
  | Base & { readonly kind: 'between'; readonly negated: boolean; readonly value: Expr; readonly low: Expr; readonly high: Expr }
  | Base & { readonly kind: 'in'; readonly negated: boolean; readonly value: Expr; readonly items: readonly Expr[] }
  /** `mode` 'regex': content dialect (unanchored regex); 'jms': selector dialect (% _ ESCAPE, anchored). */
  | Base & { readonly kind: 'like'; readonly negated: boolean; readonly value: Expr; readonly pattern: string; readonly patternPos: number; readonly mode: 'regex' | 'jms'; readonly escape: string | null }
  | Base & { readonly kind: 'begins' | 'ends'; readonly negated: boolean; readonly value: Expr; readonly items: readonly Expr[] }
  | Base & { readonly kind: 'isnull'; readonly negated: boolean; readonly value: Expr }
  | Base & { readonly kind: 'call'; readonly fn: FunctionName; readonly args: readonly Expr[] };

function lit(v: null | number | bigint | string | boolean, decimal: boolean): string {
  if (v === null) return 'NULL';
  if (typeof v === 'string') return `'${v.replace(/'/g, "''")}'`;
  if (typeof v === 'boolean') return v ? 'TRUE' : 'FALSE';
  if (typeof v === 'bigint') return v.toString();
  return decimal && Number.isInteger(v) ? `${v}.0` : String(v);
}

function pathText(path: readonly (string | number)[]): string {
  let s = '';
  for (const seg of path) s += typeof seg === 'number' ? `[${seg}]` : `/${seg}`;
  return s;
}

/** Canonical, fully parenthesised S-expression of a tree; for tests and diagnostics. */
export function show(e: Expr): string {
  const not = (neg: boolean, word: string) => (neg ? `NOT ${word}` : word);
  switch (e.kind) {
    case 'literal': return lit(e.value, e.decimal);
    case 'path': return pathText(e.path);
    case 'property': return e.name;
    case 'negate': return `(- ${show(e.operand)})`;
    case 'arith': case 'compare': return `(${e.op} ${show(e.left)} ${show(e.right)})`;
    case 'and': case 'or': return `(${e.kind.toUpperCase()} ${e.operands.map(show).join(' ')})`;
    case 'not': return `(NOT ${show(e.operand)})`;
    case 'between': return `(${not(e.negated, 'BETWEEN')} ${show(e.value)} ${show(e.low)} ${show(e.high)})`;
    case 'in': return `(${not(e.negated, 'IN')} ${show(e.value)} ${e.items.map(show).join(' ')})`;
    case 'like': return `(${not(e.negated, 'LIKE')} ${show(e.value)} ${lit(e.pattern, false)}${e.escape === null ? '' : ` ESCAPE ${lit(e.escape, false)}`})`;
    case 'begins': case 'ends':
      return `(${not(e.negated, e.kind === 'begins' ? 'BEGINS WITH' : 'ENDS WITH')} ${show(e.value)} ${e.items.map(show).join(' ')})`;
    case 'isnull': return `(${e.negated ? 'IS NOT NULL' : 'IS NULL'} ${show(e.value)})`;
    case 'call': return `(${e.fn} ${e.args.map(show).join(' ')})`;
    default: { const never: never = e; return never; }
  }
}

/** True when the tree reads the JSON body (contains a `/path`). */
export function readsBody(e: Expr): boolean {
  switch (e.kind) {
    case 'literal': case 'property': return false;
    case 'path': return true;
    case 'negate': case 'not': return readsBody(e.operand);
    case 'arith': case 'compare': return readsBody(e.left) || readsBody(e.right);
    case 'and': case 'or': return e.operands.some(readsBody);
    case 'between': return readsBody(e.value) || readsBody(e.low) || readsBody(e.high);
    case 'in': case 'begins': case 'ends': return readsBody(e.value) || e.items.some(readsBody);
    case 'like': case 'isnull': return readsBody(e.value);
    case 'call': return e.args.some(readsBody);
    default: { const never: never = e; return never; }
  }
}
