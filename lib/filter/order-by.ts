/**
 * `order_by` for sow queries: "/price DESC, /id". Keys are body paths with an optional ASC
 * (default) or DESC, compared left to right.
 *
 * Order of values within one key, ascending: numbers (number, bigint, Date as epoch ms)
 * numerically; then strings by UTF-16 code units (a numeric string sorts as a string here,
 * so the order is total); then booleans (FALSE before TRUE); then other values (objects,
 * arrays, bytes), which tie; then NULL/missing last. DESC reverses all of it, so NULL comes
 * first. Records that tie on every key compare 0: use a stable sort (Array.prototype.sort
 * is) and they keep their input order.
 */
import { normalize } from './compare.js';
import { FilterSyntaxError } from './errors.js';
import { tokenize } from './lexer.js';
import type { FilterEnv } from './types.js';

export interface OrderByKey {
  /** Body path, pre-split like FilterEnv.bodyPath expects. */
  path: (string | number)[];
  /** true for DESC. */
  descending: boolean;
}

export interface OrderBy {
  readonly keys: readonly OrderByKey[];
  /** Negative when a sorts before b, positive after, 0 on a tie. */
  compare(a: FilterEnv, b: FilterEnv): number;
}

function rank(v: unknown): number {
  switch (typeof v) {
    case 'number': case 'bigint': return 0;
    case 'string': return 1;
    case 'boolean': return 2;
    default: return v === null ? 4 : 3;
  }
}

/** Total order on normalized values (see the module comment). */
export function orderCompare(a: unknown, b: unknown): number {
  const ra = rank(a), rb = rank(b);
  if (ra !== rb) return ra - rb;
  if (ra === 3 || ra === 4) return 0;
  return (a as number) < (b as number) ? -1 : (a as number) > (b as number) ? 1 : 0;
}

export function compileOrderBy(spec: string): OrderBy {
  if (typeof spec !== 'string') throw new TypeError('order_by must be a string');
  const tokens = tokenize(spec);
  const keys: OrderByKey[] = [];
  let i = 0;
  const fail = (expected: string): never => { throw new FilterSyntaxError(expected, tokens[i]!.pos, spec); };
  for (;;) {
    const t = tokens[i]!;
    if (t.type !== 'path') return fail('a /path');
    i++;
    let descending = false;
    const d = tokens[i]!;
    if (d.type === 'ident' && (d.upper === 'ASC' || d.upper === 'DESC')) {
      descending = d.upper === 'DESC';
      i++;
    }
    keys.push({ path: t.segments.slice(), descending });
    const sep = tokens[i]!;
    if (sep.type === 'eof') break;
    if (sep.type !== 'punct' || sep.char !== ',') return fail("ASC, DESC, ',' or end");
    i++;
  }
  const paths = keys.map((k) => Object.freeze(k.path.slice()));
  const desc = keys.map((k) => k.descending);
  const n = keys.length;
  return {
    keys: Object.freeze(keys.map((k) => Object.freeze(k))),
    compare(a: FilterEnv, b: FilterEnv): number {
      for (let k = 0; k < n; k++) {
        const c = orderCompare(normalize(a.bodyPath(paths[k]!)), normalize(b.bodyPath(paths[k]!)));
        if (c !== 0) return desc[k] ? -c : c;
      }
      return 0;
    },
  };
}
