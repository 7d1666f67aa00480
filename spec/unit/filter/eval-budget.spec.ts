import { expect } from 'chai';
import { FILTER_LIMITS, FilterSyntaxError, compileFilter, lookupJsonPath, type FilterEnv } from '../../../lib/filter/index.js';

/**
 * Bounded work per filter (session 22 review, docs/filters.md "Limits"): the regex states of
 * one filter in all, and the steps of one evaluation over one message.
 */
const L = FILTER_LIMITS;
const HEAVY = '.{0,1000}'.repeat(9) + 'z'; // ~18,000 states, ~9,000 threads alive a character

function env(body: Record<string, unknown>, props: Record<string, unknown> = {}): FilterEnv {
  return { bodyPath: (p) => body[p[0] as string], property: (n) => props[n] };
}

function timed<T>(fn: () => T): [T, number] {
  const t0 = performance.now();
  const r = fn();
  return [r, performance.now() - t0];
}

describe('filter work limits', () => {
  describe(`regex states in one filter: at most ${L.MAX_FILTER_REGEX_PROGRAM}`, () => {
    it('two heavy patterns are accepted, a third is a FilterSyntaxError at its pattern naming the limit', () => {
      expect(() => compileFilter(`/a LIKE '${HEAVY}' OR /b LIKE '${HEAVY}'`)).not.to.throw();
      const text = `/a LIKE '${HEAVY}' OR /b LIKE '${HEAVY}' OR /c LIKE '${HEAVY}'`;
      let err: unknown;
      try { compileFilter(text); } catch (e) { err = e; }
      expect(err).to.be.instanceOf(FilterSyntaxError);
      expect((err as Error).message).to.match(/^LIKE patterns too complex in total \(more than 50000 regex states in one filter\) at \d+ in "/);
      expect((err as FilterSyntaxError).position).to.equal(text.lastIndexOf(`'${HEAVY}'`));
      expect((err as Error).message.length).to.be.below(400);
    });

    it('plain-literal patterns need no states: thousands are fine', () => {
      const text = Array.from({ length: 3000 }, (_, i) => `/s LIKE '^x${i}'`).join(' OR ');
      expect(compileFilter(text).matches(env({ s: 'x2999yz' }))).to.equal(true);
    });

    it('the auditor\'s 58 KB filter of 600 heavy LIKEs is refused at once (3.7 s and +331 MB before)', () => {
      const clause = `/s LIKE '${HEAVY}'`;
      const balanced = (n: number): string => (n === 1 ? clause : `(${balanced(n >> 1)} OR ${balanced(n - (n >> 1))})`);
      const text = balanced(600);
      expect(text.length).to.be.below(L.MAX_EXPRESSION_LENGTH);
      const [err, ms] = timed(() => { try { compileFilter(text); return null; } catch (e) { return e; } });
      expect(err).to.be.instanceOf(FilterSyntaxError);
      expect(ms).to.be.below(2500);
    });

    it('a filter using the whole allowance compiles quickly', () => {
      const p = '.{0,1000}'.repeat(8) + 'z'; // 16,002 states: three fit
      const [f, ms] = timed(() => compileFilter(`/a LIKE '${p}' OR /b LIKE '${p}' OR /c LIKE '${p}'`));
      expect(ms).to.be.below(1000);
      expect(f.matches(env({ a: 'xz' }))).to.equal(true);
    });
  });

  describe(`steps of one evaluation: at most ${L.MAX_EVAL_STEPS}`, () => {
    const long = 'a'.repeat(24000);

    it('a LIKE that would cost more is NULL: neither LIKE nor NOT LIKE matches, and it stops in time', () => {
      // 8.6 s in the broker before (the auditor's case).
      for (const text of [`/s LIKE '${HEAVY}'`, `/s NOT LIKE '${HEAVY}'`]) {
        const f = compileFilter(text);
        const [r, ms] = timed(() => f.evaluate(env({ s: long })));
        expect(r, text).to.equal(null);
        expect(f.matches(env({ s: long }))).to.equal(false);
        expect(ms).to.be.below(1000);
      }
    });

    it('the same pattern is exact where it costs less', () => {
      const f = compileFilter(`/s LIKE '${HEAVY}'`);
      expect(f.evaluate(env({ s: 'a'.repeat(50) + 'z' }))).to.equal(true);
      expect(f.evaluate(env({ s: 'a'.repeat(50) }))).to.equal(false);
    });

    it('is refilled for every evaluation', () => {
      const f = compileFilter(`/s LIKE '${HEAVY}'`);
      expect(f.evaluate(env({ s: long }))).to.equal(null);
      expect(f.evaluate(env({ s: 'az' }))).to.equal(true);
      expect(f.evaluate(env({ s: long }))).to.equal(null);
    });

    it('is one budget for the whole filter: once spent, every later LIKE is NULL; what came before stands', () => {
      const f = compileFilter(`/s LIKE '${HEAVY}' OR /t LIKE 'b'`);
      expect(f.evaluate(env({ s: long, t: 'b' })), 'the second LIKE is NULL too').to.equal(null);
      const g = compileFilter(`/t LIKE 'b' OR /s LIKE '${HEAVY}'`);
      expect(g.evaluate(env({ s: long, t: 'b' })), 'OR short-circuits before the heavy one').to.equal(true);
      const h = compileFilter(`/t LIKE 'x' AND /s LIKE '${HEAVY}'`);
      expect(h.evaluate(env({ s: long, t: 'b' })), 'FALSE AND NULL').to.equal(false);
    });

    it('many LIKEs over an array share it: an array of a million strings is NULL quickly', () => {
      const arr = Array.from({ length: 1_000_000 }, (_, i) => `v${i % 10}`);
      const f = compileFilter(Array.from({ length: 20 }, () => `/s LIKE 'v.x'`).join(' OR '));
      const [r, ms] = timed(() => f.evaluate(env({ s: arr })));
      expect(r).to.equal(null);
      expect(ms).to.be.below(2500);
      expect(f.evaluate(env({ s: ['v1', 'v3x'] }))).to.equal(true);
    });

    it('a selector of 7 LIKEs with 8000-character patterns over a 64 KB property takes milliseconds', () => {
      // One such LIKE held the broker 5.9 s before.
      const p = '%' + 'a'.repeat(8000) + 'b';
      const text = Array.from({ length: 7 }, () => `p LIKE '${p}'`).join(' OR ');
      expect(text.length).to.be.below(L.MAX_EXPRESSION_LENGTH);
      const f = compileFilter(text, 'selector');
      const [r, ms] = timed(() => f.evaluate(env({}, { p: 'a'.repeat(65000) })));
      expect(r).to.equal(false);
      expect(ms).to.be.below(500);
      expect(f.evaluate(env({}, { p: 'a'.repeat(65000) + 'b' }))).to.equal(true);
    });

    it('INSTR searches in linear time, and a search costing more than the budget is NULL', () => {
      const needle = 'a'.repeat(4000) + 'b' + 'a'.repeat(3999);
      const f = compileFilter(`INSTR(/s, '${needle}')`);
      const big = 'a'.repeat(1 << 19); // KMP: at most 2 steps a character, within the budget
      const [r, ms] = timed(() => f.evaluate(env({ s: big })));
      expect(r).to.equal(0); // V8's indexOf: 0.7 s here
      expect(ms).to.be.below(500);
      expect(f.evaluate(env({ s: 'xx' + needle }))).to.equal(3);
      const dyn = compileFilter('INSTR(/s, /t)');
      expect(dyn.evaluate(env({ s: big, t: needle }))).to.equal(0);
      expect(dyn.evaluate(env({ s: 'xy' + needle, t: needle }))).to.equal(3);
      expect(dyn.evaluate(env({ s: 'a'.repeat(L.MAX_EVAL_STEPS + 10), t: 'b' })), 'longer than the budget').to.equal(null);
      expect(dyn.evaluate(env({ s: 'b' + 'a'.repeat(L.MAX_EVAL_STEPS + 10), t: 'b' })), 'found early').to.equal(1);
    });

    it('UPPER/LOWER of a string longer than what is left are NULL', () => {
      const huge = 'a'.repeat(L.MAX_EVAL_STEPS + 1);
      expect(compileFilter('UPPER(/s)').evaluate(env({ s: huge }))).to.equal(null);
      expect(compileFilter('LOWER(/s) IS NULL').evaluate(env({ s: huge }))).to.equal(true);
      expect(compileFilter('UPPER(/s)').evaluate(env({ s: 'abc' }))).to.equal('ABC');
      const f = compileFilter(Array.from({ length: 40 }, () => 'UPPER(/s) = \'X\'').join(' OR '));
      const [r, ms] = timed(() => f.evaluate(env({ s: 'a'.repeat(1 << 20) })));
      expect(r, '40 × 1 MiB is past the budget').to.equal(null);
      expect(ms).to.be.below(1000);
    });

    it('BEGINS/ENDS WITH against computed items are charged the compared length', () => {
      const big = 'a'.repeat(1 << 20);
      const f = compileFilter(Array.from({ length: 40 }, () => '/a BEGINS WITH /b').join(' OR '));
      const [r, ms] = timed(() => f.evaluate(env({ a: big, b: big.slice(1) + 'b' })));
      expect(r).to.equal(null);
      expect(ms).to.be.below(1000);
      expect(compileFilter('/a BEGINS WITH /b').evaluate(env({ a: 'abc', b: 'ab' }))).to.equal(true);
      expect(compileFilter('/a ENDS WITH (/b, /c)').evaluate(env({ a: 'abc', b: 'x', c: 'bc' }))).to.equal(true);
    });

    describe('comparisons pay for what grows with the message', () => {
      it('two arrays compared visit each pair: 20,000 × 20,000 is NULL in milliseconds (4 s before)', () => {
        const a = new Array(20000).fill(1), b = new Array(20000).fill(2);
        const f = compileFilter('/a = /b');
        const [r, ms] = timed(() => f.evaluate(env({ a, b })));
        expect(r).to.equal(null);
        expect(ms).to.be.below(1000);
        expect(f.evaluate(env({ a: [1, 2, 3], b: [5, 3] })), 'exact within the budget').to.equal(true);
        expect(f.evaluate(env({ a: [1, 2, 3], b: [5, 4] }))).to.equal(false);
        expect(f.evaluate(env({ a: [1, 2], b: new Array(20000).fill(1) })), 'a pair found early is cheap').to.equal(true);
      });

      it('=, IN, BETWEEN and BEGINS WITH over an array of 3 M elements are NULL, many of them quickly', () => {
        const big = new Array(3_000_000).fill(0);
        for (const text of ['/a = 1', '/a IN (1, 2)', "/a IN (1, 'x')", '/a BETWEEN 1 AND 2', "/a BEGINS WITH 'x'", '/a = /n', '/a IN (/n)']) {
          const f = compileFilter(Array.from({ length: 50 }, () => text).join(' OR '));
          const [r, ms] = timed(() => f.evaluate(env({ a: big, n: 1 })));
          expect(r, text).to.equal(null);
          expect(ms, text).to.be.below(1500);
        }
        expect(compileFilter('/a = 0').evaluate(env({ a: big })), 'a match found early is cheap').to.equal(true);
        expect(compileFilter('/a = 1').evaluate(env({ a: [0, 1] }))).to.equal(true);
        expect(compileFilter('/a NOT BETWEEN 1 AND 2').evaluate(env({ a: [0, 5] }))).to.equal(true);
      });

      it('a long string read as a number costs its length; compared with a string, a 16th of it', () => {
        const digits = '1'.repeat(L.MAX_EVAL_STEPS + 1);
        expect(compileFilter('/x = 5').evaluate(env({ x: digits })), 'too long to read as a number').to.equal(null);
        expect(compileFilter('/x + 1 IS NULL').evaluate(env({ x: digits }))).to.equal(true);
        expect(compileFilter('-/x IS NULL').evaluate(env({ x: digits }))).to.equal(true);
        expect(compileFilter('/x > 5').evaluate(env({ x: '1'.repeat(1000) })), 'within it: exact').to.equal(true);
        expect(compileFilter('/x > 5').evaluate(env({ x: 'x'.repeat(L.MAX_EVAL_STEPS + 1) })), 'not numeric from its first character: free').to.equal(true);
        expect(compileFilter('(/x + 1) / 2').evaluate(env({ x: '2.0'.padStart(100, '0') })), 'decimal text').to.equal(1.5);
        const s1 = 'a'.repeat(16 * L.MAX_EVAL_STEPS + 32);
        const s2 = s1.slice(1) + 'b';
        expect(compileFilter('/x < /y').evaluate(env({ x: s1, y: s2 }))).to.equal(null);
        expect(compileFilter('/x < /y').evaluate(env({ x: 'a'.repeat(1000), y: 'a'.repeat(999) + 'b' }))).to.equal(true);
        const f = compileFilter(Array.from({ length: 200 }, () => '/x = /y').join(' OR '));
        const big = 'a'.repeat(1 << 20);
        const [r, ms] = timed(() => f.evaluate(env({ x: big, y: big.slice(1) + 'b' })));
        expect(r, '200 × 1 MiB / 16 is past the budget').to.equal(null);
        expect(ms).to.be.below(1000);
      });
    });

    it('a body path crossing an array pays a step per element (lookupJsonPath given the budget)', () => {
      const rec = { a: Array.from({ length: 1_000_000 }, () => ({ x: 0 })), s: 'ok' };
      const jenv: FilterEnv = { bodyPath: (p, b) => lookupJsonPath(rec, p, b), property: () => undefined };
      const f = compileFilter(Array.from({ length: 20 }, (_, i) => `/a/x = ${i + 1}`).join(' OR ') + " OR /s = 'ok'");
      const [r, ms] = timed(() => f.evaluate(jenv));
      expect(r, 'lookups that cross no array still read').to.equal(true);
      expect(ms, '6.9 s before').to.be.below(2500);
      expect(compileFilter('/a/x = 1').evaluate(jenv), 'one fan-out of 1 M fits').to.equal(false);
      expect(compileFilter('/a/x = 1 OR /a/x = 2 OR /a/x = 3').evaluate(jenv), 'the third does not').to.equal(null);
      expect(lookupJsonPath(rec, ['a', 'x'], { left: 10 }), 'a lookup that cannot pay is undefined').to.equal(undefined);
      expect((lookupJsonPath(rec, ['a', 'x']) as unknown[]).length, 'without a budget: exact').to.equal(1_000_000);
      expect(lookupJsonPath({ a: [{ b: [{ c: 1 }, { c: 2 }] }, { b: { c: 3 } }] }, ['a', 'b', 'c'], { left: 100 })).to.deep.equal([1, 2, 3]);
    });

    it('constant LIKEs are folded under one budget for the whole compile', () => {
      const lit = 'a'.repeat(L.MAX_LITERAL_LENGTH);
      const p = '.{0,1000}'.repeat(8) + 'z';
      const [f, ms] = timed(() => compileFilter(`'${lit}' LIKE '${p}' OR '${lit}' LIKE '${p}' OR '${lit}' LIKE '${p}'`));
      expect(ms).to.be.below(1500);
      expect(f.evaluate(env({}))).to.equal(null);
      expect(compileFilter("'abc' LIKE 'b'").evaluate(env({}))).to.equal(true);
    });
  });
});
