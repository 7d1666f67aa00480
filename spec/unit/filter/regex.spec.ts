import { expect } from 'chai';
import { RegexError, RegexTotalError, compileRegex } from '../../../lib/filter/regex.js';
import { FILTER_LIMITS } from '../../../lib/filter/index.js';
import { unlimited } from '../../../lib/filter/search.js';

describe('filter regex engine (linear-time LIKE)', () => {
  // Each pattern is checked against JavaScript's RegExp on every input.
  const cases: [string, string[]][] = [
    ['abc', ['abc', 'xabcx', 'ab', '', 'ABC']],
    ['^abc', ['abc', 'xabc', 'abcd']],
    ['abc$', ['abc', 'abcx', 'xxabc']],
    ['^abc$', ['abc', 'abcc', '']],
    ['^$', ['', 'a']],
    ['', ['', 'a']],
    ['a.c', ['abc', 'a\nc', 'ac', 'a.c']],
    ['a\\.c', ['abc', 'a.c']],
    ['ab*c', ['ac', 'abc', 'abbbc', 'adc']],
    ['ab+c', ['ac', 'abc', 'abbbc']],
    ['ab?c', ['ac', 'abc', 'abbc']],
    ['^a{2}$', ['a', 'aa', 'aaa']],
    ['^a{2,}$', ['a', 'aa', 'aaaaa']],
    ['^a{1,3}$', ['', 'a', 'aaa', 'aaaa']],
    ['^a{0,2}b', ['b', 'aab', 'aaab']],
    ['a{', ['a{', 'a']],
    ['x{2,1', ['x{2,1', 'xx']],
    ['^(ab)+$', ['ab', 'abab', 'aba', '']],
    ['^(?:ab|cd)*e$', ['e', 'abcde', 'abce', 'cdabe']],
    ['^(?<g>a|b)c$', ['ac', 'bc', 'cc']],
    ['cat|dog', ['cat', 'hotdog', 'cow']],
    ['^(cat|dog)s?$', ['cats', 'dog', 'dogss']],
    ['[abc]+', ['xxbxx', 'xyz']],
    ['^[a-z0-9_]+$', ['abc_12', 'ab-c', 'ABC']],
    ['^[^0-9]+$', ['abc', 'ab1']],
    ['[-a]', ['-', 'a', 'b']],
    ['[a-]', ['-', 'b']],
    ['[\\d-z]', ['-', '5', 'z', 'q']],
    ['[]', ['a', '']],
    ['[^]', ['a', '', '\n']],
    ['^\\d+$', ['123', '12a', '']],
    ['\\D', ['123', '12a']],
    ['^\\w+$', ['abc_9', 'a b']],
    ['\\W', ['abc', 'a b']],
    ['\\s', ['a b', 'ab', 'a\tb', 'a\u00a0b', 'a\u3000b']],
    ['^\\S+$', ['ab', 'a b']],
    ['[\\s\\d]', ['a b', 'ab', 'a1']],
    ['[^\\s]', ['   ', '  x']],
    ['\\bfoo\\b', ['foo', 'a foo b', 'foobar', 'xfoo']],
    ['\\Boo', ['foo', 'oo']],
    ['\\x41\\u0042', ['AB', 'ab']],
    ['\\t\\n', ['\t\n', 'tn']],
    ['\\cJ', ['\n', 'cJ']],
    ['\\/\\-', ['/-']],
    ['a*?b', ['aaab', 'b', 'a']],
    ['(a+)+b', ['aaab', 'aaaa']],
    ['(a|ab)(c|bcd)(d*)', ['abcd', 'abc']],
    ['^(a*)*$', ['', 'aaa', 'aab']],
    ['é+', ['café', 'cafe']],
    ['[à-ÿ]', ['é', 'e']],
    ['^.{3}$', ['abc', 'ab', '😀x']],
    ['\\$\\^', ['$^', 'x']],
  ];
  for (const [pattern, inputs] of cases) {
    it(`/${pattern}/ agrees with RegExp`, () => {
      const m = compileRegex(pattern);
      const r = new RegExp(pattern);
      for (const s of inputs) expect(m.test(s), JSON.stringify(s)).to.equal(r.test(s));
    });
  }

  it('agrees with RegExp on random inputs for a set of patterns', () => {
    const patterns = ['a(b|c)*d', '^(ab|a)(bc|c)?$', '[ab]{2,3}c', 'b+a*b', '(a|b)*abb', '^(a?){3}a{3}$', '\\bab'];
    let seed = 7;
    const rnd = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed; };
    for (const p of patterns) {
      const m = compileRegex(p);
      const r = new RegExp(p);
      for (let k = 0; k < 300; k++) {
        let s = '';
        const len = rnd() % 9;
        for (let j = 0; j < len; j++) s += 'abc '[rnd() % 4];
        expect(m.test(s), `${p} on ${JSON.stringify(s)}`).to.equal(r.test(s));
      }
    }
  });

  it('agrees with RegExp on random patterns (differential fuzz, literal prefixes and long literals included)', () => {
    let seed = 31;
    const rnd = (k: number) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % k; };
    const atom = (depth: number): string => {
      switch (rnd(depth > 2 ? 6 : 9)) {
        case 0: case 1: return 'ab'[rnd(2)]!;
        case 2: return '.';
        case 3: return ['[ab]', '[^a]', '\\d', '\\w', '\\s', '[a-c1]'][rnd(6)]!;
        case 4: return ['^', '$', '\\b', '\\B'][rnd(4)]!;
        case 5: return 'ab'.repeat(1 + rnd(3));
        case 6: return `(${alt(depth + 1)})`;
        case 7: return `(?:${alt(depth + 1)})`;
        default: return `(${alt(depth + 1)})`;
      }
    };
    const quant = () => ['', '', '', '*', '+', '?', '{2}', '{1,3}', '{0,2}', '{2,}', '*?'][rnd(11)]!;
    const seq = (depth: number): string => {
      let out = '';
      const n = 1 + rnd(4);
      for (let i = 0; i < n; i++) {
        const a = atom(depth);
        out += a === '^' || a === '$' || a.startsWith('\\b') || a.startsWith('\\B') ? a : a + quant();
      }
      return out;
    };
    const alt = (depth: number): string => (rnd(4) === 0 ? `${seq(depth)}|${seq(depth)}` : seq(depth));
    let checked = 0;
    for (let k = 0; k < 1500; k++) {
      // Half start with literal text (the prefix search), some with a literal past 64 code units (KMP).
      const lead = rnd(2) ? 'ab'.slice(0, 1 + rnd(2)) + (rnd(8) === 0 ? 'ab'.repeat(40) : '') : '';
      const p = lead + alt(0);
      let re: RegExp;
      try { re = new RegExp(p); } catch { continue; }
      const m = compileRegex(p);
      for (let r = 0; r < 12; r++) {
        let s = '';
        const len = rnd(r < 10 ? 12 : 120);
        for (let j = 0; j < len; j++) s += 'ab1 '[rnd(rnd(3) === 0 ? 4 : 2)];
        if (r === 11 && lead.length > 60) s = 'b' + lead + s;
        expect(m.test(s), `/${p}/ on ${JSON.stringify(s)}`).to.equal(re.test(s));
        expect(m.match(s, unlimited()), `/${p}/ on ${JSON.stringify(s)}`).to.equal(re.test(s));
        checked++;
      }
    }
    expect(checked).to.be.above(10000);
  });

  it('plain literals longer than 64 code units search in linear time (V8 indexOf does not)', () => {
    const lit = 'a'.repeat(4000) + 'b' + 'a'.repeat(3999);
    const s = 'a'.repeat(FILTER_LIMITS.MAX_MATCH_INPUT);
    const m = compileRegex(lit);
    const t0 = performance.now();
    expect(m.test(s)).to.equal(false);
    expect(m.test(s + lit)).to.equal(true);
    expect(performance.now() - t0).to.be.below(50);
  });

  describe('the step budget', () => {
    it('a test that would cost more than the budget gives null, spends it, and stops in time', () => {
      // `.{0,1000}` x 9 + z keeps ~9,000 threads alive a character: 17 s over 64 KiB before.
      const m = compileRegex('.{0,1000}'.repeat(9) + 'z');
      const budget = { left: FILTER_LIMITS.MAX_EVAL_STEPS };
      const t0 = performance.now();
      expect(m.match('a'.repeat(24000), budget)).to.equal(null);
      expect(performance.now() - t0).to.be.below(200);
      expect(budget.left).to.equal(0);
      expect(m.match('z', budget), 'nothing left: null at once').to.equal(null);
      expect(m.match('z', { left: 1000 }), 'a cheap test within its budget').to.equal(true);
    });

    it('charges threads and the states visited between characters', () => {
      const s = 'a'.repeat(1000);
      for (const p of ['(?:|){1000}x', 'a*b', '[ab]+c', '(a|b|c)*d']) {
        const budget = { left: 1e9 };
        expect(compileRegex(p).match(s, budget), p).to.equal(false);
        const used = 1e9 - budget.left;
        expect(used, p).to.be.at.least(s.length);
        if (p.startsWith('(?:|)')) expect(used, 'empty alternations are visited, so counted').to.be.above(1000 * 1000);
      }
    });

    it('test() is exact whatever it costs', () => {
      const m = compileRegex('.{0,1000}'.repeat(2) + 'z');
      expect(m.match('a'.repeat(3000), { left: 1000 })).to.equal(null);
      expect(m.test('a'.repeat(3000))).to.equal(false);
      expect(m.test('a'.repeat(3000) + 'z')).to.equal(true);
    });

    it('the filter-wide state allowance: more is a RegexTotalError naming the total', () => {
      const p = '.{0,1000}'.repeat(9) + 'z';
      expect(compileRegex(p).states).to.be.above(18000);
      expect(() => compileRegex(p, 10000)).to.throw(RegexTotalError, /more than 50000 regex states in one filter/);
      expect(() => compileRegex('abc', 0), 'a plain literal needs no states').not.to.throw();
      expect(compileRegex('abc').states).to.equal(0);
    });
  });

  describe('patterns that make backtracking engines blow up run in linear time', () => {
    const a = 'a'.repeat(65536);
    const cases: [string, string][] = [
      ['(a+)+b', a], ['(a*)*b', a], ['(.*)*x', a], ['(a|a)*b', a], ['(a|aa)+$x', a], ['.*.*.*x', a],
      ['a*a*a*a*a*b', a], ['\\w+\\w+x', a], ['(x+x+)+y', 'x'.repeat(65536)], ['^(a?){30}a{30}$', 'a'.repeat(30)],
      ['.*x', a],
    ];
    for (const [pattern, input] of cases) {
      it(`/${pattern}/ on ${input.length} chars`, function () {
        this.timeout(5000);
        const m = compileRegex(pattern);
        const t0 = Date.now();
        const got = m.test(input);
        const ms = Date.now() - t0;
        expect(got).to.equal(pattern === '^(a?){30}a{30}$');
        expect(ms).to.be.below(1500);
      });
    }
  });

  describe('rejects', () => {
    const cases: [string, RegExp][] = [
      ['(a)\\1', /backreferences are not supported/],
      ['(?<n>a)\\k<n>', /backreferences are not supported/],
      ['a(?=b)', /lookaround is not supported/],
      ['a(?!b)', /lookaround is not supported/],
      ['(?<=a)b', /lookaround is not supported/],
      ['(?<!a)b', /lookaround is not supported/],
      ['(a', /Unterminated group/],
      ['a)', /Unmatched '\)'/],
      ['*a', /Nothing to repeat/],
      ['[b-a]', /Range out of order/],
      ['a{1001}', /repetition count too large/],
      ['(a{1000}){1000}', /pattern too complex/],
      ['('.repeat(70) + 'a' + ')'.repeat(70), /nested too deeply/],
      ['\\01', /octal/],
    ];
    for (const [pattern, msg] of cases) {
      it(JSON.stringify(pattern.length > 40 ? pattern.slice(0, 40) + '…' : pattern), () => {
        expect(() => compileRegex(pattern)).to.throw(RegexError, msg);
      });
    }
  });
});
