import { expect } from 'chai';
import { compileFilter, lookupJsonPath, type FilterEnv } from '../../../lib/filter/index.js';

function envOf(body: unknown, props: Record<string, unknown> = {}): FilterEnv {
  return {
    bodyPath: (p) => lookupJsonPath(body, p),
    property: (n) => (Object.prototype.hasOwnProperty.call(props, n) ? props[n] : undefined),
  };
}

const BODY = {
  i: 5, d: 2.5, neg: -7, s: 'hello', e: '', n: null, t: true, f: false, num: '42', dnum: '7.0', word: 'abc',
  tags: ['x', 'y'], nums: [1, 7], mid: [1, 3], empty: [], withnull: [1, null],
  items: [{ sym: 'A', px: 1 }, { sym: 'B', px: 2 }], obj: { k: 1 }, prefix: 'he',
};

/** Three-valued result of an expression: true, false, null (NULL) or a value. */
function ev(expr: string, body: unknown = BODY, props: Record<string, unknown> = {}, dialect: 'content' | 'selector' = 'content'): unknown {
  return compileFilter(expr, dialect).evaluate(envOf(body, props));
}

function table(cases: readonly (readonly [string, unknown])[], body: unknown = BODY, props: Record<string, unknown> = {},
  dialect: 'content' | 'selector' = 'content'): void {
  for (const [expr, expected] of cases) {
    it(`${expr}  ->  ${String(expected)}`, () => {
      const got = ev(expr, body, props, dialect);
      if (typeof expected === 'number' && Number.isNaN(expected)) expect(got).to.be.NaN;
      else expect(got).to.deep.equal(expected);
      const f = compileFilter(expr, dialect);
      expect(f.matches(envOf(body, props))).to.equal(expected === true);
    });
  }
}

describe('filter evaluation', () => {
  describe('NULL logic (SQL three-valued), literals and properties', () => {
    const V = { T: 'TRUE', F: 'FALSE', N: 'NULL' } as const;
    const P = { T: true, F: false, N: undefined } as const;
    const R = { T: true, F: false, N: null } as const;
    type K = keyof typeof V;
    const AND: [K, K, K][] = [['T', 'T', 'T'], ['T', 'F', 'F'], ['T', 'N', 'N'], ['F', 'T', 'F'], ['F', 'F', 'F'],
      ['F', 'N', 'F'], ['N', 'T', 'N'], ['N', 'F', 'F'], ['N', 'N', 'N']];
    const OR: [K, K, K][] = [['T', 'T', 'T'], ['T', 'F', 'T'], ['T', 'N', 'T'], ['F', 'T', 'T'], ['F', 'F', 'F'],
      ['F', 'N', 'N'], ['N', 'T', 'T'], ['N', 'F', 'N'], ['N', 'N', 'N']];
    for (const [a, b, r] of AND) {
      it(`${a} AND ${b} = ${r}`, () => {
        expect(ev(`${V[a]} AND ${V[b]}`)).to.equal(R[r]);
        expect(ev('p AND q', {}, { p: P[a], q: P[b] })).to.equal(R[r]);
        expect(ev('p AND q AND TRUE', {}, { p: P[a], q: P[b] })).to.equal(R[r]);
      });
    }
    for (const [a, b, r] of OR) {
      it(`${a} OR ${b} = ${r}`, () => {
        expect(ev(`${V[a]} OR ${V[b]}`)).to.equal(R[r]);
        expect(ev('p OR q', {}, { p: P[a], q: P[b] })).to.equal(R[r]);
        expect(ev('p OR q OR FALSE', {}, { p: P[a], q: P[b] })).to.equal(R[r]);
      });
    }
    for (const [a, r] of [['T', 'F'], ['F', 'T'], ['N', 'N']] as [K, K][]) {
      it(`NOT ${a} = ${r}`, () => {
        expect(ev(`NOT ${V[a]}`)).to.equal(R[r]);
        expect(ev('NOT p', {}, { p: P[a] })).to.equal(R[r]);
      });
    }
    it('a missing field is NULL, so NOT (/x = 1) does not match it', () => {
      expect(ev('/x = 1')).to.equal(null);
      expect(ev('NOT (/x = 1)')).to.equal(null);
      expect(compileFilter('NOT (/x = 1)').matches(envOf(BODY))).to.equal(false);
      expect(compileFilter('NOT (/x = 1)').matches(envOf({ x: 2 }))).to.equal(true);
    });
    it('a non-boolean used as a condition is NULL', () => {
      expect(ev('/i AND TRUE')).to.equal(null);
      expect(ev("/s OR FALSE")).to.equal(null);
      expect(ev('/t AND TRUE')).to.equal(true);
    });
  });

  describe('comparisons and mixed types', () => {
    table([
      ['/i = 5', true], ['/i == 5', true], ['/i != 5', false], ['/i <> 4', true], ['/i < 6', true], ['/i <= 5', true],
      ['/i > 5', false], ['/i >= 5', true], ['5 = /i', true], ['6 > /i', true], ['/d = 2.5', true], ['/i = 5.0', true],
      ["/num = 42", true], ["/num > 41", true], ["/num < '5'", true], ["'10' = 10", true], ["'10' > 9", true], ["'1e1' = 10", true],
      ["'abc' > 5", true], ["'abc' < 5", false], ["'abc' = 5", false], ["'abc' <> 5", true], ["5 < 'abc'", true], ["5 >= 'abc'", false],
      ["'10' < '9'", true], ["'a' < 'b'", true], ["'B' < 'a'", true], ["/s = 'hello'", true], ["/s = 'Hello'", false],
      ["/s <> 'hello'", false], ["/s > 'hell'", true],
      ['TRUE = TRUE', true], ['/t = TRUE', true], ['/t <> /f', true], ['/t = 1', null], ["/t = 'true'", null],
      ['TRUE < FALSE', null], ['/t >= /t', null],
      ['/e IS NULL', true], ["/e = ''", null], ["/s = ''", null], ['/n IS NULL', true], ['/n = NULL', null],
      ['NULL = NULL', null], ['/i = NULL', null], ['/obj = 1', null], ['/obj IS NULL', false], ['/obj IS NOT NULL', true],
      ['/zz IS NULL', true], ['/zz IS NOT NULL', false], ['/s IS NOT NULL', true],
      ["/i = 5 and /s = 'hello'", true], ["/i = 5 aNd NoT /s = 'x'", true],
    ]);
  });

  describe('values of other JavaScript types from the env', () => {
    const big = 2n ** 63n - 1n;
    const props = {
      big, small: 5n, when: new Date(1000), bad: new Date(NaN), nan: NaN,
      b1: Buffer.from('ab'), b2: Buffer.from('ab'), b3: Buffer.from('ac'), Color: 'red',
    };
    table([
      ['big = 9223372036854775807', true], ['big > 9223372036854775806', true], ['big > 1', true], ['small = 5', true],
      ['small + 1 = 6', true], ['big - 9223372036854775806 = 1', true], ["big = '9223372036854775807'", true],
      ['when = 1000', true], ['when > 999', true], ['when BETWEEN 0 AND 1000', true], ['bad IS NULL', true], ['nan IS NULL', true],
      ['b1 = b2', true], ['b1 = b3', false], ['b1 <> b3', true], ["b1 = 'ab'", null], ['b1 > b2', null], ['b1 IS NULL', false],
      ["Color = 'red'", true], ["color = 'red'", null],
    ], {}, props);
  });

  describe('arithmetic', () => {
    table([
      ['1/5', 0], ['-1/5', 0], ['7/2', 3], ['-7/2', -3], ['7.0/2', 3.5], ['7/2.0', 3.5], ['7/2E0', 3.5], ['/d / 2', 1.25],
      ['/i / 2', 2], ["/num / 5", 8], ["/dnum / 2", 3.5], ['(/d * 2) / 4', 1.25], ['(/i * 2) / 4', 2], ['-(/d * 2) / 4', -1.25],
      ['1/0', null], ['1 % 0', null], ['1.5/0', null], ['7 % 3', 1], ['-7 % 3', -1], ['7.5 % 2', 1.5],
      ['2 + 3 * 4', 14], ['(2 + 3) * 4', 20], ['10 - 2 - 3', 5], ['-(2 + 3)', -5], ['- /i', -5], ['-/neg', 7], ['2 * -3', -6],
      ["-/word", null], ["'abc' + 1", null], ['TRUE + 1', null], ['/zz + 1', null], ["'2' + '3'", 5], ['/i * 2 > 9', true],
      ['9007199254740991 + 2', 9007199254740993n], ['9007199254740991 * 10', 90071992547409910n],
      ['9223372036854775807 / 2', 4611686018427387903n], ['9223372036854775807 % 10', 7],
      ['9223372036854775806 + 0.5', 9223372036854775807], ['6.02E23 > 1', true], ['/i % 2 = 1', true],
    ]);
  });

  describe('arrays', () => {
    table([
      ["/tags = 'y'", true], ["/tags = 'z'", false], ["/tags <> 'x'", true], ["NOT (/tags = 'x')", false], ["NOT (/tags = 'z')", true],
      ["/tags IN ('q', 'y')", true], ["/tags NOT IN ('q', 'y')", false], ["/tags IN ('q')", false],
      ['/nums > 5', true], ['/nums > 7', false], ['/nums BETWEEN 2 AND 6', false], ['/mid BETWEEN 2 AND 6', true],
      ['/nums NOT BETWEEN 2 AND 6', true], ['/mid NOT BETWEEN 2 AND 6', false], ['/empty = 1', false], ['NOT (/empty = 1)', true], ['/empty IS NULL', false],
      ['/withnull = 1', true], ['/withnull = 2', null], ["/tags[1] = 'y'", true], ["/tags[0] = 'y'", false],
      ["/tags[5] = 'y'", null], ['/tags[5] IS NULL', true], ["/items/sym = 'B'", true], ["/items[0]/sym = 'B'", false],
      ['/items/px > 1', true], ["'y' IN (/tags)", true], ["'z' IN (/tags)", false], ['/nums = /mid', true],
      ['LENGTH(/tags)', 2], ['LENGTH(/empty)', 0], ["/tags LIKE '^y'", true], ["/tags BEGINS WITH ('y')", true],
      ["/tags ENDS WITH ('z')", false], ["/s[0] = 'h'", null], ['/tags/x IS NULL', true],
    ]);
  });

  describe('IN and BETWEEN', () => {
    table([
      ['/i IN (1, 5)', true], ['/i IN (1, 2)', false], ['/i NOT IN (1, 2)', true], ['/i IN (1, NULL)', null],
      ['/i IN (5, NULL)', true], ['/i NOT IN (1, NULL)', null], ['/zz IN (1, 2)', null], ['/zz NOT IN (1, 2)', null],
      ["/num IN (42, 43)", true], ["/i IN ('5', 'x')", true], ["/s IN ('hello', 'x')", true], ["/s IN ('HELLO')", false],
      ["/i IN (/d * 2, 1)", true], ["/i IN (/zz, 5)", true], ["/i IN ('')", null],
      ['/i BETWEEN 5 AND 10', true], ['/i BETWEEN 1 AND 5', true], ['/i BETWEEN 6 AND 10', false], ['/i NOT BETWEEN 6 AND 10', true],
      ['/i BETWEEN NULL AND 3', false], ['/i BETWEEN NULL AND 10', null], ['/zz BETWEEN 1 AND 10', null],
      ["'b' BETWEEN 'a' AND 'c'", true], ['/i BETWEEN /neg AND /i', true], ['/i BETWEEN 10 AND 1', false],
      ["/num BETWEEN 40 AND 50", true],
    ]);
  });

  describe('functions', () => {
    table([
      ["UPPER('abc')", 'ABC'], ["LOWER('AbC')", 'abc'], ["UPPER(/s) = 'HELLO'", true], ['UPPER(/zz)', null], ['UPPER(12)', '12'],
      ['UPPER(TRUE)', null], ["LENGTH('héllo')", 5], ["LENGTH('')", null], ['LENGTH(12345)', 5], ['LENGTH(/s) = 5', true],
      ["COALESCE(/zz, /n, /e, 'd')", 'd'], ['COALESCE(/zz)', null], ['COALESCE(/i, 1)', 5], ['COALESCE(/zz, 0) = 0', true],
      ["INSTR('hello', 'l')", 3], ["INSTR('hello', 'z')", 0], ["INSTR('hello', 'h')", 1], ["INSTR(/zz, 'a')", null],
      ["INSTR('abc', '')", null], ["INSTR(/s, 'lo') > 0", true], ["upper(/s) = 'HELLO'", true],
    ]);
  });

  describe('LIKE (content dialect: unanchored, case-sensitive regex)', () => {
    table([
      ["/s LIKE 'ell'", true], ["/s LIKE '^ell'", false], ["/s LIKE 'ELL'", false], ["/s LIKE 'h.l+o$'", true],
      ["/s LIKE '^hel{2}o$'", true], ["/s NOT LIKE 'ell'", false], ["/s NOT LIKE 'xyz'", true], ["/zz LIKE 'a'", null],
      ["/zz NOT LIKE 'a'", null], ["/i LIKE '^5$'", true], ["/s LIKE ''", true], ["/s LIKE '[a-z]+'", true],
      ["/s LIKE '^(he|ha)llo$'", true], ["/t LIKE 'true'", null], ["/s LIKE 'h%'", false],
    ]);
  });

  describe('LIKE (selector dialect: JMS % _ ESCAPE, anchored)', () => {
    const props = { name: 'abc', under: 'a_c', pct: '50%', empty: '' };
    table([
      ["name LIKE 'abc'", true], ["name LIKE 'ab'", false], ["name LIKE 'ab%'", true], ["name LIKE '%b%'", true],
      ["name LIKE '%c'", true], ["name LIKE '%b'", false], ["name LIKE 'a_c'", true], ["name LIKE '_'", false],
      ["name LIKE '___'", true], ["name LIKE '%%'", true], ["name LIKE 'A%'", false], ["name NOT LIKE 'x%'", true],
      ["under LIKE 'a\\_c' ESCAPE '\\'", true], ["name LIKE 'a\\_c' ESCAPE '\\'", false], ["pct LIKE '%!%' ESCAPE '!'", true],
      ["name LIKE '%!%' ESCAPE '!'", false], ["missing LIKE '%'", null], ["name LIKE 'a.c'", false], ["name LIKE '^abc$'", false],
    ], {}, props, 'selector');
  });

  describe('BEGINS WITH and ENDS WITH', () => {
    table([
      ["/s BEGINS WITH ('he', 'x')", true], ["/s BEGINS WITH ('x', 'y')", false], ["/s ENDS WITH ('lo')", true],
      ["/s ENDS WITH ('LO')", false], ["/s NOT BEGINS WITH ('he')", false], ["/s BEGINS WITH (NULL)", null],
      ["/s BEGINS WITH ('x', NULL)", null], ["/s BEGINS WITH ('he', NULL)", true], ["/zz BEGINS WITH ('a')", null],
      ['/s BEGINS WITH (/prefix)', true], ["/s BEGINS WITH (/zz, 'h')", true], ["/s ends with 'llo'", true],
      ["/i BEGINS WITH ('5')", true], ['/s BEGINS WITH /prefix', true],
    ]);
  });

  describe('selectors with JMS header names', () => {
    const props = {
      JMSPriority: 7, JMSDeliveryMode: 'PERSISTENT', JMSType: 'order', JMSMessageID: 'ID:1', JMSCorrelationID: 'c-9',
      JMSTimestamp: new Date(1_700_000_000_000), subject: 'order', region: 'EU', amount: 120n,
    };
    table([
      ["JMSPriority > 4 AND JMSDeliveryMode = 'PERSISTENT'", true],
      ["JMSType = 'order' AND region IN ('EU', 'US')", true],
      ["JMSMessageID LIKE 'ID:%'", true],
      ["JMSCorrelationID IS NOT NULL AND JMSTimestamp >= 1700000000000", true],
      ["JMSDeliveryMode = 'NON_PERSISTENT' OR amount BETWEEN 100 AND 200", true],
      ['JMSRedelivered IS NULL', true],
      ["NOT (region = 'US')", true],
      ["jmspriority = 7", null],
    ], {}, props, 'selector');
  });

  describe('evaluation mechanics', () => {
    it('reads the body lazily and short-circuits', () => {
      let bodyCalls = 0;
      const env: FilterEnv = { bodyPath: () => { bodyCalls++; return 1; }, property: () => 'y' };
      const f = compileFilter("subject = 'x' AND /a = 1");
      expect(f.matches(env)).to.equal(false);
      expect(bodyCalls).to.equal(0);
      expect(compileFilter("subject = 'y' OR /a = 1").matches(env)).to.equal(true);
      expect(bodyCalls).to.equal(0);
      expect(compileFilter("subject = 'y' AND /a = 1").matches(env)).to.equal(true);
      expect(bodyCalls).to.equal(1);
    });

    it('passes the same pre-split path array on every evaluation', () => {
      const seen: (readonly (string | number)[])[] = [];
      const env: FilterEnv = { bodyPath: (p) => { seen.push(p); return 1; }, property: () => undefined };
      const f = compileFilter('/a/b[2] = 1');
      f.matches(env);
      f.matches(env);
      expect(seen[0]).to.deep.equal(['a', 'b', 2]);
      expect(seen[1]).to.equal(seen[0]);
      expect(Object.isFrozen(seen[0])).to.equal(true);
    });

    it('is reusable across messages', () => {
      const f = compileFilter('/price > 10');
      expect([5, 11, 10, 12.5, '20', 'x', null].map((price) => f.matches(envOf({ price }))))
        .to.deep.equal([false, true, false, true, true, true, false]);
    });

    it('treats a body that is not JSON (every path undefined) as all NULL', () => {
      const env: FilterEnv = { bodyPath: () => undefined, property: () => undefined };
      expect(compileFilter('/a IS NULL').matches(env)).to.equal(true);
      expect(compileFilter('NOT (/a = 1)').matches(env)).to.equal(false);
    });
  });
});
