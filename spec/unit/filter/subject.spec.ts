import { expect } from 'chai';
import { compileSubjectFilter } from '../../../lib/filter/index.js';

describe('legacy subject filters', () => {
  describe('direct (equality)', () => {
    const f = compileSubjectFilter('a.b', 'direct');
    const cases: [string | null | undefined, boolean][] = [['a.b', true], ['a.c', false], ['A.B', false], ['a.b.c', false], ['', false], [null, false], [undefined, false]];
    for (const [subject, expected] of cases) it(`'a.b' vs ${JSON.stringify(subject)}`, () => expect(f.matches(subject)).to.equal(expected));
    it('empty pattern matches only the empty subject', () => {
      expect(compileSubjectFilter('', 'direct').matches('')).to.equal(true);
      expect(compileSubjectFilter('', 'direct').matches(null)).to.equal(false);
    });
  });

  describe('topic (* one word, # zero or more words)', () => {
    const cases: [string, string | null | undefined, boolean][] = [
      ['a.b.c', 'a.b.c', true], ['a.b.c', 'a.b', false], ['a.b.c', 'a.b.c.d', false], ['a.b', 'a.bc', false], ['ab', 'a', false],
      ['A', 'a', false],
      ['a.*.c', 'a.b.c', true], ['a.*.c', 'a.c', false], ['a.*.c', 'a.b.b.c', false], ['a.*', 'a.b', true], ['a.*', 'a.b.c', false],
      ['a.*', 'a', false], ['*', 'a', true], ['*', '', false], ['*', 'a.b', false], ['*.*', 'a.b', true],
      ['a.#', 'a', true], ['a.#', 'a.b.c', true], ['a.#', 'b.a', false], ['#', '', true], ['#', 'a.b', true], ['#', null, false],
      ['#.c', 'c', true], ['#.c', 'a.b.c', true], ['#.c', 'a.b.cd', false], ['#.c', 'c.a', false],
      ['a.#.c', 'a.c', true], ['a.#.c', 'a.x.y.c', true], ['a.#.c', 'a.x.y.d', false], ['a.#.c', 'a.c.c', true],
      ['#.#', 'a', true], ['#.#', '', true], ['*.#', '', false], ['*.#', 'a', true], ['#.*', 'a.b', true], ['#.*', '', false],
      ['a.#.#.b', 'a.b', true], ['#.a.#.b.#', 'x.a.y.b.z', true], ['#.a.#.b.#', 'x.b.y.a.z', false],
      ['a..b', 'a..b', true], ['a.*.b', 'a..b', true], ['a.b', 'a..b', false],
      ['', '', true], ['', 'a', false], ['a', '', false], ['a', undefined, false],
    ];
    for (const [pattern, subject, expected] of cases) {
      it(`${JSON.stringify(pattern)} vs ${JSON.stringify(subject)} -> ${expected}`, () => {
        expect(compileSubjectFilter(pattern, 'topic').matches(subject)).to.equal(expected);
      });
    }

    it('does not blow up on many # against long subjects', () => {
      const f = compileSubjectFilter('#.a.#.a.#.a.#.a.#.b', 'topic');
      const subject = Array(5000).fill('a').join('.');
      const t0 = Date.now();
      expect(f.matches(subject)).to.equal(false);
      expect(f.matches(subject + '.b')).to.equal(true);
      expect(Date.now() - t0).to.be.below(1000);
    });
  });

  it('rejects an unknown kind', () => {
    expect(() => compileSubjectFilter('a', 'fanout' as 'topic')).to.throw(/expected 'direct' or 'topic'/);
  });
});
