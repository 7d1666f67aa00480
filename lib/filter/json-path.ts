/**
 * A reference `bodyPath` over a parsed JSON value, for FilterEnv implementations and tests.
 * A string segment reads an own property of an object; on an array it reads that property
 * of every element and collects the values found (so `/items/sym` over
 * `{"items":[{"sym":"A"},{"sym":"B"}]}` is `["A","B"]`, and a comparison is true if any
 * matches). A number segment indexes an array (past the end: undefined). Anything else is
 * undefined. Allocates only when a path crosses an array by name.
 */
export function lookupJsonPath(root: unknown, path: readonly (string | number)[]): unknown {
  let v: unknown = root;
  for (let i = 0; i < path.length; i++) {
    const seg = path[i]!;
    if (typeof seg === 'number') {
      if (!Array.isArray(v)) return undefined;
      v = v[seg];
    } else if (Array.isArray(v)) {
      const out: unknown[] = [];
      for (const e of v) {
        const x = lookupJsonPath(e, path.slice(i));
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
