import { expect } from 'chai';
import { RegexError, compileRegex } from '../../../lib/filter/regex.js';

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
