/** lib/ext/sow/paging.ts PageIndex: the sorted matching set in blocks, against a sorted-array model. */
import { expect } from 'chai';
import { PageIndex, type PageEntry } from '../../../lib/ext/sow/paging.js';
import { compileOrderBy } from '../../../lib/filter/index.js';
import type { FilterEnv } from '../../../lib/filter/index.js';

const envOf = (price: number | undefined) => ({ bodyPath: (p: readonly (string | number)[]) => (p[0] === 'price' ? price : undefined) }) as unknown as FilterEnv;

describe('PageIndex', function () {
  this.timeout(30000);
  for (const [label, order] of [['order_by /price DESC', '/price DESC'], ['no order_by (key order)', undefined]] as const) {
    it(`${label}: insert and remove answer the model's indexes and pages over 10000 seeded operations, across block splits`, function () {
      let seed = 11;
      const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
      const pg = new PageIndex(order ? compileOrderBy(order) : undefined, 7, 10);
      const model: PageEntry[] = [];
      const cmp = (a: PageEntry, b: PageEntry) => pg.compare(a, b);
      const make = (k: number): PageEntry => pg.entry(`k${k}`, k, k, Buffer.alloc(0), envOf(rnd() < 0.05 ? undefined : Math.floor(rnd() * 50)));
      // Start from a loaded snapshot, as a link does.
      const initial = Array.from({ length: 300 }, (_, k) => make(k)).sort(cmp);
      pg.load(initial);
      model.push(...initial);
      for (let step = 0; step < 10000; step++) {
        const k = Math.floor(rnd() * 3000);
        const key = `k${k}`;
        const at = model.findIndex((e) => e.key === key);
        const gotRemoved = pg.remove(key);
        expect(gotRemoved, `remove ${key} at step ${step}`).to.equal(at);
        if (at >= 0) model.splice(at, 1);
        if (rnd() < 0.7) {
          const e = make(k);
          let i = 0;
          while (i < model.length && cmp(model[i], e) < 0) i++;
          model.splice(i, 0, e);
          expect(pg.insert(e), `insert ${key} at step ${step}`).to.equal(i);
        }
        expect(pg.size).to.equal(model.length);
        if (step % 97 === 0) expect(pg.page().map((e) => e.key)).to.deep.equal(model.slice(7, 17).map((e) => e.key));
      }
      expect(pg.page().map((e) => e.key)).to.deep.equal(model.slice(7, 17).map((e) => e.key));
      for (const e of model) expect(pg.get(e.key)).to.equal(e);
    });
  }
});
