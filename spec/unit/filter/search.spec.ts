import { expect } from 'chai';
import { LiteralFinder, NATIVE_SEARCH_MAX, OUT_OF_BUDGET, findDynamic, findNative, unlimited } from '../../../lib/filter/search.js';

/** The reference: the first i >= from with the needle in [i, i + m) and i + m <= end. */
function reference(s: string, lit: string, from: number, end: number): number {
  const at = s.indexOf(lit, from);
  return at >= 0 && at + lit.length <= end ? at : -1;
}

describe('literal search (lib/filter/search.ts)', () => {
  let seed = 11;
  const rnd = (k: number) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % k; };
  const word = (len: number, alphabet: string) => { let s = ''; for (let i = 0; i < len; i++) s += alphabet[rnd(alphabet.length)]; return s; };

  it('agrees with indexOf for short (native) and long (KMP) needles, with from and end', () => {
    for (let k = 0; k < 3000; k++) {
      const alphabet = k % 3 === 0 ? 'ab' : k % 3 === 1 ? 'aab' : 'abc';
      const period = word(1 + rnd(4), alphabet);
      // Periodic needles and haystacks: where naive and Boyer-Moore searches do worst.
      const long = k % 2 === 0;
      const lit = (period.repeat(long ? 40 : 3) + word(rnd(3), alphabet)).slice(0, long ? NATIVE_SEARCH_MAX + 1 + rnd(100) : 1 + rnd(NATIVE_SEARCH_MAX));
      const s = period.repeat(rnd(200)) + (rnd(2) ? lit : '') + word(rnd(20), alphabet) + period.repeat(rnd(50));
      const from = rnd(s.length + 1), end = from + rnd(s.length - from + 1);
      const f = new LiteralFinder(lit);
      expect(f.find(s, from, end, unlimited()), `${JSON.stringify(lit)} in ${s.length} [${from}, ${end})`).to.equal(reference(s, lit, from, end));
    }
  });

  it('finds a needle straddling the native windows of a long haystack', () => {
    const W = 65536;
    for (const at of [0, W - 3, W - 1, W, 2 * W - 2, 3 * W + 7]) {
      const lit = 'xyzzy';
      const s = 'a'.repeat(at) + lit + 'a'.repeat(3 * W);
      expect(findNative(s, lit, 0, s.length, unlimited()), String(at)).to.equal(at);
      expect(findNative(s, lit, at + 1, s.length, unlimited())).to.equal(-1);
      expect(findNative(s, lit, 0, at + lit.length - 1, unlimited())).to.equal(-1);
    }
  });

  it('a long needle that V8 searches in quadratic time takes KMP time', () => {
    // 'a'.repeat(65536).indexOf(this) took 83-130 ms in V8; over 1 MiB 1.5 s.
    const lit = 'a'.repeat(4000) + 'b' + 'a'.repeat(3999);
    const s = 'a'.repeat(1 << 20);
    const f = new LiteralFinder(lit);
    const t0 = performance.now();
    expect(f.find(s, 0, s.length, unlimited())).to.equal(-1);
    expect(performance.now() - t0).to.be.below(100);
    expect(findDynamic(s + lit, lit, unlimited())).to.equal(s.length);
  });

  it('charges what it scans, and stops with OUT_OF_BUDGET when that is more than is left', () => {
    const s = 'a'.repeat(100000) + 'needle';
    for (const lit of ['needle', 'needle'.padStart(NATIVE_SEARCH_MAX + 10, 'x')]) {
      const f = new LiteralFinder(lit);
      const budget = { left: 1000 };
      expect(f.find(s, 0, s.length, budget)).to.equal(OUT_OF_BUDGET);
      expect(budget.left).to.equal(0);
      const plenty = { left: 1_000_000 };
      const want = lit === 'needle' ? 100000 : -1;
      expect(f.find(s, 0, s.length, plenty)).to.equal(want);
      expect(plenty.left).to.be.below(1_000_000 - 100000).and.above(1_000_000 - 3 * s.length);
    }
    // A hit near the start is cheap, however long the string.
    const near = { left: 100 };
    expect(new LiteralFinder('ab').find('xab' + 'c'.repeat(1 << 20), 0, (1 << 20) + 3, near)).to.equal(1);
    expect(near.left).to.be.above(90);
  });
});
