import { expect } from 'chai';
import { parseDuration, toBool, toDurationMs, toInt, toStr } from '../../../lib/address/index.js';

/** What rhea hands over for a value it keeps typed (e.g. inside described values). */
const typed = (value: unknown, name = 'ulong') => ({ type: { name }, value });

describe('address: parseDuration', () => {
  const good: [string, number][] = [
    ['500ms', 500], ['0ms', 0], ['0s', 0], ['1s', 1000], ['90s', 90_000], ['10m', 600_000],
    ['2h', 7_200_000], ['7d', 604_800_000], ['1w', 604_800_000], ['3w', 1_814_400_000],
    [' 5s ', 5000], ['007s', 7000],
  ];
  for (const [text, ms] of good) {
    it(`${JSON.stringify(text)} is ${ms} ms`, () => expect(parseDuration(text)).to.equal(ms));
  }
  const bad = ['', '10', 's', '-5s', '+5s', '1.5h', '10 m', '10M', '10S', '5sec', '1y', 'ms', '10ms5', '1h30m', 'abc', '99999999999999999w'];
  for (const text of bad) {
    it(`refuses ${JSON.stringify(text)} with a RangeError naming it`, () => {
      expect(() => parseDuration(text)).to.throw(RangeError, JSON.stringify(text));
    });
  }
  it('refuses a non-string', () => {
    expect(() => parseDuration(10 as unknown as string)).to.throw(RangeError, /invalid duration 10/);
  });
  it('says what is expected', () => {
    expect(() => parseDuration('10x')).to.throw(RangeError, /integer followed by ms, s, m, h, d or w/);
  });
});

describe('address: lenient values', () => {
  describe('toBool', () => {
    const table: [unknown, boolean][] = [
      [true, true], [false, false], [1, true], [0, false], [-1, true], [5, true],
      [1n, true], [0n, false],
      ['true', true], ['True', true], ['TRUE', true], ['false', false], ['False', false],
      ['yes', true], ['no', false], ['Yes', true], ['on', true], ['off', false],
      ['1', true], ['0', false], [' true ', true],
      [typed(1, 'uint'), true], [typed(0, 'long'), false], [typed('True', 'string'), true],
    ];
    for (const [v, b] of table) {
      it(`${String(JSON.stringify(v, (_k, x) => (typeof x === 'bigint' ? `${x}n` : x)))} -> ${b}`, () => {
        expect(toBool('qpid.browse-only', v)).to.equal(b);
      });
    }
    const bad: unknown[] = ['maybe', '', '2', 'tru', 1.5, null, undefined, [], {}, NaN];
    for (const v of bad) {
      it(`refuses ${String(JSON.stringify(v) ?? v)}`, () => {
        expect(() => toBool('qpid.browse-only', v)).to.throw(TypeError, /qpid\.browse-only: expected a boolean/);
      });
    }
  });

  describe('toInt', () => {
    const table: [unknown, number][] = [
      [10, 10], [0, 0], [-3, -3], [10.0, 10], [10n, 10], ['10', 10], [' 42 ', 42], ['-7', -7], ['+7', 7],
      ['0', 0], ['-0', 0], [typed(1000, 'ulong'), 1000], [typed(5, 'int'), 5], [Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
    ];
    for (const [v, n] of table) {
      it(`${String(JSON.stringify(v, (_k, x) => (typeof x === 'bigint' ? `${x}n` : x)))} -> ${n}`, () => {
        expect(toInt('qpid.max_count', v)).to.equal(n);
      });
    }
    const bad: unknown[] = ['10.5', 1.5, 'ten', '', '1e3', '0x10', true, false, null, undefined, [1], {}, NaN, Infinity,
      2n ** 60n, '9007199254740993', Number.MAX_SAFE_INTEGER + 1];
    for (const v of bad) {
      it(`refuses ${typeof v === 'bigint' ? `${v}n` : String(JSON.stringify(v) ?? v)}`, () => {
        expect(() => toInt('qpid.max_count', v)).to.throw(TypeError, /qpid\.max_count: expected an integer/);
      });
    }
    it('checks min and names it', () => {
      expect(toInt('qpid.max_size', 0, { min: 0 })).to.equal(0);
      expect(toInt('qpid.max_size', '5', { min: 1 })).to.equal(5);
      expect(() => toInt('qpid.max_size', -1, { min: 0 })).to.throw(TypeError, 'qpid.max_size: expected an integer >= 0, got -1');
      expect(() => toInt('qpid.max_size', '0', { min: 1 })).to.throw(TypeError, 'qpid.max_size: expected an integer >= 1, got "0"');
    });
  });

  describe('toInt past ±2^53', () => {
    const hex = (h: string) => Buffer.from(h, 'hex');
    it('names rhea\'s 8 bytes of a long/ulong a 64-bit integer too large, with its value', () => {
      expect(() => toInt('log.max_count', hex('7fffffffffffffff'), { min: 1 })).to.throw(TypeError, 'log.max_count: expected an integer >= 1, got a 64-bit integer (9223372036854775807): past ±2^53 (±9007199254740991), too large to hold exactly');
      expect(() => toInt('x', hex('ffffffffffffffff'))).to.throw(TypeError, /a 64-bit integer \(18446744073709551615\)/);
      expect(() => toInt('x', hex('8000000000000000'))).to.throw(TypeError, /-9223372036854775808 as a long, 9223372036854775808 as a ulong/);
      expect(() => toInt('x', 2n ** 60n)).to.throw(TypeError, /got 1152921504606846976n: past ±2\^53/);
    });
    it('8 bytes rhea would have decoded as a number were a binary', () => {
      expect(() => toInt('x', hex('0000000000000001'))).to.throw(TypeError, 'x: expected an integer, got binary(8 bytes)');
    });
    it('saturate: a positive one reads as Number.MAX_SAFE_INTEGER; a negative one is still refused', () => {
      for (const v of [hex('7fffffffffffffff'), typed(hex('7fffffffffffffff'), 'long'), 2n ** 63n - 1n, '9223372036854775807', 2 ** 60]) {
        expect(toInt('qpid.max_count', v, { min: 0, saturate: true })).to.equal(Number.MAX_SAFE_INTEGER);
      }
      expect(() => toInt('qpid.max_count', '-9223372036854775808', { min: 0, saturate: true })).to.throw(TypeError, /too large/);
      expect(toInt('qpid.max_count', 5, { min: 0, saturate: true })).to.equal(5);
    });
  });

  describe('toStr', () => {
    const table: [unknown, string][] = [
      ['/id', '/id'], ['', ''], [10, '10'], [-1.5, '-1.5'], [10n, '10'], [true, 'true'], [false, 'false'],
      [Buffer.from('ring'), 'ring'], [new Uint8Array([0x61, 0x62]), 'ab'], [typed('reject', 'symbol'), 'reject'],
    ];
    for (const [v, s] of table) {
      it(`${typeof v === 'bigint' ? `${v}n` : v instanceof Uint8Array ? 'binary' : JSON.stringify(v)} -> ${JSON.stringify(s)}`, () => {
        expect(toStr('sow.key', v)).to.equal(s);
      });
    }
    const bad: unknown[] = [null, undefined, [], {}, ['a'], NaN, Infinity];
    for (const v of bad) {
      it(`refuses ${String(JSON.stringify(v) ?? v)}`, () => {
        expect(() => toStr('sow.key', v)).to.throw(TypeError, /sow\.key: expected a string/);
      });
    }
  });

  describe('toDurationMs', () => {
    const table: [unknown, number][] = [
      ['500ms', 500], ['10m', 600_000], ['7d', 604_800_000], ['1w', 604_800_000], ['0s', 0],
      [0, 0], [10, 10_000], ['10', 10_000], [' 3 ', 3000], [10n, 10_000], [typed(2, 'uint'), 2000],
      [typed('1h', 'string'), 3_600_000],
    ];
    for (const [v, ms] of table) {
      it(`${typeof v === 'bigint' ? `${v}n` : JSON.stringify(v)} -> ${ms} ms`, () => {
        expect(toDurationMs('sow.history.window', v)).to.equal(ms);
      });
    }
    const bad: [unknown, RegExp][] = [
      ['10x', /sow\.history\.window: invalid duration "10x"/],
      ['-5s', /sow\.history\.window: invalid duration "-5s"/],
      ['', /sow\.history\.window: invalid duration ""/],
      [-5, /sow\.history\.window: expected a duration .* got -5/],
      ['-5', /sow\.history\.window: expected a duration .* got "-5"/],
      [1.5, /sow\.history\.window: expected a duration/],
      [true, /sow\.history\.window: expected a duration/],
      [null, /sow\.history\.window: expected a duration/],
      [{}, /sow\.history\.window: expected a duration/],
      [Number.MAX_SAFE_INTEGER, /sow\.history\.window: duration .* too large/],
    ];
    for (const [v, message] of bad) {
      it(`refuses ${String(JSON.stringify(v) ?? v)}`, () => {
        expect(() => toDurationMs('sow.history.window', v)).to.throw(TypeError, message);
      });
    }
  });
});
