/** lib/ext/sow/sorted-answer.ts: order_by answers sorted in slices, and top_n kept in a bounded heap, against Array.sort. */
import { expect } from 'chai';
import { TopN, sortInSlices, sortValues, sortableCompare, type Sortable } from '../../../lib/ext/sow/sorted-answer.js';
import { compileOrderBy } from '../../../lib/filter/index.js';
import type { FilterEnv } from '../../../lib/filter/index.js';

let seed = 7;
const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
const envOf = (body: Record<string, unknown>) => ({ bodyPath: (p: readonly (string | number)[]) => body[p[0] as string] }) as unknown as FilterEnv;
/** A mix of what order_by meets: numbers (duplicates too), strings, booleans, null, missing, objects. */
const value = (): unknown => {
  const x = rnd();
  if (x < 0.5) return Math.floor(rnd() * 100);
  if (x < 0.7) return ['a', 'b', 'B', '10', ''][Math.floor(rnd() * 5)];
  if (x < 0.8) return rnd() < 0.5;
  if (x < 0.9) return null;
  if (x < 0.95) return undefined;
  return { o: 1 };
};

describe('sorted answers (sorted-answer.ts)', function () {
  this.timeout(60000);
  for (const spec of ['/a', '/a DESC', '/a, /b DESC', '/b DESC, /a']) {
    it(`${spec}: the order OrderBy.compare gives, key order on ties (Array.sort is stable)`, async function () {
      const order = compileOrderBy(spec);
      const bodies = Array.from({ length: 5000 }, () => ({ a: value(), b: value() }));
      const want = bodies.map((b, i) => ({ b, i })).sort((x, y) => order.compare(envOf(x.b), envOf(y.b))).map((x) => x.i);
      const items: Sortable<number>[] = bodies.map((b, i) => ({ row: i, vals: sortValues(order, envOf(b)), seq: i }));
      const got = await sortInSlices(items, sortableCompare<number>(order), async () => { /* no pause needed */ });
      expect(got.map((x) => x.row)).to.deep.equal(want);
    });
  }

  for (const n of [0, 1, 2047, 2048, 2049, 10000, 150001]) {
    it(`sortInSlices of ${n} items equals Array.sort (runs and merges; pauses between slices)`, async function () {
      const items = Array.from({ length: n }, (_, i) => ({ v: Math.floor(rnd() * (n / 3 + 1)), i }));
      const cmp = (x: { v: number; i: number }, y: { v: number; i: number }) => x.v - y.v;
      const want = items.slice().sort(cmp);
      let pauses = 0;
      const got = await sortInSlices(items, cmp, () => { pauses++; return new Promise<void>((r) => setImmediate(r)); });
      expect(got).to.deep.equal(want); // stable: equal v keep their order
      if (n === 150001) console.log(`      ${pauses} pauses`);
    });
  }

  it('TopN keeps the k smallest, as the first k of a sort', function () {
    for (const k of [1, 3, 100, 1000, 5000]) {
      const order = compileOrderBy('/a DESC, /b');
      const cmp = sortableCompare<number>(order);
      const items: Sortable<number>[] = Array.from({ length: 3000 }, (_, i) => ({ row: i, vals: sortValues(order, envOf({ a: value(), b: value() })), seq: i }));
      const top = new TopN(k, cmp);
      for (const x of items) top.add(x);
      const want = items.slice().sort(cmp).slice(0, k).map((x) => x.row);
      expect(top.items().sort(cmp).map((x) => x.row), `k ${k}`).to.deep.equal(want);
    }
  });
});
