import { expect } from 'chai';
import { FilterSyntaxError, compileOrderBy, lookupJsonPath, type FilterEnv } from '../../../lib/filter/index.js';

const rec = (body: Record<string, unknown>): FilterEnv & { body: Record<string, unknown> } => ({
  body,
  bodyPath: (p) => lookupJsonPath(body, p),
  property: () => undefined,
});

function sortBy(spec: string, bodies: Record<string, unknown>[]): unknown[] {
  const o = compileOrderBy(spec);
  return bodies.map(rec).sort((a, b) => o.compare(a, b)).map((r) => r.body['id']);
}

describe('order_by', () => {
  it('parses keys and directions (default ASC, case-insensitive)', () => {
    expect(compileOrderBy('/price DESC, /id').keys).to.deep.equal([
      { path: ['price'], descending: true }, { path: ['id'], descending: false },
    ]);
    expect(compileOrderBy('/a/b[0] asc,/c desc').keys).to.deep.equal([
      { path: ['a', 'b', 0], descending: false }, { path: ['c'], descending: true },
    ]);
  });

  const mixed = [
    { id: 'n3', p: 3 }, { id: 'miss' }, { id: 'n1', p: 1 }, { id: 'sx', p: 'x' }, { id: 'n2', p: 2 },
    { id: 'bt', p: true }, { id: 'bf', p: false }, { id: 'nul', p: null }, { id: 'sa', p: 'a' }, { id: 'obj', p: { k: 1 } },
    { id: 'num10', p: '10' }, { id: 'empty', p: '' },
  ];

  it('ASC: numbers, strings, booleans, other values, then NULL/missing (in input order)', () => {
    expect(sortBy('/p', mixed)).to.deep.equal(['n1', 'n2', 'n3', 'num10', 'sa', 'sx', 'bf', 'bt', 'obj', 'miss', 'nul', 'empty']);
  });

  it('DESC: the reverse order, so NULL/missing first (ties still in input order)', () => {
    expect(sortBy('/p DESC', mixed)).to.deep.equal(['miss', 'nul', 'empty', 'obj', 'bt', 'bf', 'sx', 'sa', 'num10', 'n3', 'n2', 'n1']);
  });

  it('breaks ties with later keys and keeps input order on full ties', () => {
    const rows = [
      { id: 1, price: 10, sym: 'B' }, { id: 2, price: 20, sym: 'A' }, { id: 3, price: 10, sym: 'A' },
      { id: 4, price: 20, sym: 'A' }, { id: 5, price: 10, sym: 'B' },
    ];
    expect(sortBy('/price DESC, /sym', rows)).to.deep.equal([2, 4, 3, 1, 5]);
    expect(sortBy('/price', rows)).to.deep.equal([1, 3, 5, 2, 4]);
  });

  it('compares bigints, Dates and numbers on one scale', () => {
    const o = compileOrderBy('/t');
    const env = (v: unknown): FilterEnv => ({ bodyPath: () => v, property: () => undefined });
    expect(o.compare(env(new Date(5)), env(6))).to.be.below(0);
    expect(o.compare(env(2n ** 64n), env(1e300))).to.be.below(0);
    expect(o.compare(env(7n), env(7))).to.equal(0);
  });

  const errors: [string, number, string][] = [
    ['', 0, 'a /path'], ['price', 0, 'a /path'], ['/a DESC /b', 8, "ASC, DESC, ',' or end"], ['/a,', 3, 'a /path'],
    ['/a UP', 3, "ASC, DESC, ',' or end"],
  ];
  for (const [spec, pos, expected] of errors) {
    it(`rejects ${JSON.stringify(spec)}`, () => {
      let err: unknown;
      try { compileOrderBy(spec); } catch (e) { err = e; }
      expect(err).to.be.instanceOf(FilterSyntaxError);
      expect((err as FilterSyntaxError).position).to.equal(pos);
      expect((err as FilterSyntaxError).expected).to.equal(expected);
    });
  }
});
