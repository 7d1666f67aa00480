import { expect } from 'chai';
import { isNumericText, parseNumeric } from '../../../lib/filter/compare.js';
import { compileFilter } from '../../../lib/filter/index.js';

describe('numeric text (a string compared with a number)', () => {
  /** The regex used before session 22: right, but quadratic on digits followed by anything else. */
  const OLD = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

  it('accepts exactly what the regex accepted (differential fuzz)', () => {
    let seed = 3;
    const rnd = (k: number) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % k; };
    const alphabet = '0123456789..+-eE x';
    for (let k = 0; k < 50000; k++) {
      let s = '';
      const len = rnd(9);
      for (let j = 0; j < len; j++) s += alphabet[rnd(rnd(3) === 0 ? alphabet.length : 10)];
      expect(isNumericText(s), JSON.stringify(s)).to.equal(OLD.test(s));
    }
    for (const s of ['5', '-5', '+.5', '5.', '1e5', '1E+5', '1.5e-3', '.e1', '.', '', '+', '1e', '1e+', ' 1', '1 ', '0x10', 'Infinity', '1..2', '١٢']) {
      expect(isNumericText(s), JSON.stringify(s)).to.equal(OLD.test(s));
    }
  });

  it('is linear: 1M digits and an x in milliseconds (the regex took 4.2 s for 40,000)', () => {
    const s = '1'.repeat(1_000_000) + 'x';
    const t0 = performance.now();
    expect(parseNumeric(s)).to.equal(null);
    expect(parseNumeric('1'.repeat(1_000_000) + '.5'), 'Infinity: not a finite number').to.equal(null);
    expect(performance.now() - t0).to.be.below(200);
  });

  it('a selector comparing a long non-numeric string property with a number stays fast and keeps its meaning', () => {
    const f = compileFilter('qty > 10', 'selector');
    const env = (v: unknown) => ({ bodyPath: () => undefined, property: () => v });
    const t0 = performance.now();
    expect(f.evaluate(env('1'.repeat(200_000) + 'x')), 'a non-numeric string is greater than any number').to.equal(true);
    expect(performance.now() - t0).to.be.below(200);
    expect(f.evaluate(env('12'))).to.equal(true);
    expect(f.evaluate(env('9.5'))).to.equal(false);
  });
});
