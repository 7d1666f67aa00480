import { spend, type Budget } from './search.js';

/**
 * A reference `bodyPath` over a parsed JSON value, for FilterEnv implementations and tests.
 * A string segment reads an own property of an object; on an array it reads that property
 * of every element and collects the values found (so `/items/sym` over
 * `{"items":[{"sym":"A"},{"sym":"B"}]}` is `["A","B"]`, and a comparison is true if any
 * matches). A number segment indexes an array (past the end: undefined). Anything else is
 * undefined. Allocates only when a path crosses an array by name.
 *
 * With a `budget` (a filter evaluation's), crossing an array costs one step per element
 * visited, and a lookup that cannot pay is undefined (NULL): a body of 16 MiB can hold a
 * million objects, and each filter clause reading `/a/x` walked them all (20 clauses over
 * 1 M objects: 6.9 s before session 22).
 */
export function lookupJsonPath(root: unknown, path: readonly (string | number)[], budget?: Budget): unknown {
  return walk(root, path, 0, budget);
}

/** The lookup of path[from…] in `root`. */
function walk(root: unknown, path: readonly (string | number)[], from: number, budget?: Budget): unknown {
  let v: unknown = root;
  for (let i = from; i < path.length; i++) {
    const seg = path[i]!;
    if (typeof seg === 'number') {
      if (!Array.isArray(v)) return undefined;
      v = v[seg];
    } else if (Array.isArray(v)) {
      const out: unknown[] = [];
      for (let k = 0; k < v.length; k++) {
        if (budget !== undefined && !spend(budget, 1)) return undefined;
        const x = walk(v[k], path, i, budget);
        if (x === undefined) continue;
        if (Array.isArray(x) && i < path.length - 1) { for (const y of x) out.push(y); }
        else out.push(x);
      }
      return out.length === 0 ? undefined : out;
    } else {
      if (v === null || typeof v !== 'object' || !Object.prototype.hasOwnProperty.call(v, seg)) return undefined;
      v = (v as Record<string, unknown>)[seg];
    }
    if (v === undefined) return undefined;
  }
  return v;
}
