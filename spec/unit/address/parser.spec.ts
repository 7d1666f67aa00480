import { expect } from 'chai';
import { AddressSyntaxError, parseAddress, parseQpidMap } from '../../../lib/address/index.js';

function syntaxError(fn: () => unknown): AddressSyntaxError {
  try {
    fn();
  } catch (e) {
    expect(e).to.be.instanceOf(AddressSyntaxError);
    expect(e).to.be.instanceOf(Error);
    return e as AddressSyntaxError;
  }
  expect.fail('expected an AddressSyntaxError');
}

describe('address: parseAddress', () => {
  describe('names and subjects', () => {
    const cases: [string, { name: string; subject?: string; options: object }][] = [
      ['q', { name: 'q', options: {} }],
      ['my.queue-1', { name: 'my.queue-1', options: {} }],
      ['amq.topic/stocks.us', { name: 'amq.topic', subject: 'stocks.us', options: {} }],
      ['  q  ', { name: 'q', options: {} }],
      ['q/a/b', { name: 'q', subject: 'a/b', options: {} }],
      ['ex/*.us.#', { name: 'ex', subject: '*.us.#', options: {} }],
      ['queue:with:colons', { name: 'queue:with:colons', options: {} }],
      ['q/', { name: 'q', options: {} }],
      ['q;', { name: 'q', options: {} }],
      ['q ; ', { name: 'q', options: {} }],
      ['q;{}', { name: 'q', options: {} }],
      ['q / subj ; {}', { name: 'q', subject: 'subj', options: {} }],
      ['"my queue"', { name: 'my queue', options: {} }],
      ["'my queue'/'a subject'", { name: 'my queue', subject: 'a subject', options: {} }],
      ['"a/b;c"/x', { name: 'a/b;c', subject: 'x', options: {} }],
      ['"it\'s"', { name: "it's", options: {} }],
      ['#', { name: '#', options: {} }],
      ['<null>', { name: '<null>', options: {} }],
    ];
    for (const [text, expected] of cases) {
      it(`parses ${JSON.stringify(text)}`, () => {
        expect(parseAddress(text)).to.deep.equal(expected);
      });
    }
    it('leaves subject out when none is given', () => {
      expect(parseAddress('q')).to.not.have.property('subject');
    });
  });

  describe('options', () => {
    it('parses bare words, quoted strings and nested maps', () => {
      expect(parseAddress("q; {create: always, node: {type: queue, x-declare: {arguments: {'qpid.max_count': 10, sow.key: \"/id\"}}}}").options)
        .to.deep.equal({
          create: 'always',
          node: { type: 'queue', 'x-declare': { arguments: { 'qpid.max_count': 10, 'sow.key': '/id' } } },
        });
    });
    it('accepts dotted and hyphenated bare keys', () => {
      expect(parseAddress('q; {qpid.max_count: 5, x-declare: {}, a_b.c-d: e}').options)
        .to.deep.equal({ 'qpid.max_count': 5, 'x-declare': {}, 'a_b.c-d': 'e' });
    });
    it('accepts quoted keys of either kind', () => {
      expect(parseAddress(`q; {"a b": 1, 'c:d': 2}`).options).to.deep.equal({ 'a b': 1, 'c:d': 2 });
    });
    it('parses lists, nested lists and lists of maps', () => {
      expect(parseAddress('q; {l: [a, 1, [2, 3], {k: v}, "s t"], e: []}').options)
        .to.deep.equal({ l: ['a', 1, [2, 3], { k: 'v' }, 's t'], e: [] });
    });
    it('accepts a trailing comma in maps and lists', () => {
      expect(parseAddress('q; {a: [1, 2,], b: 3,}').options).to.deep.equal({ a: [1, 2], b: 3 });
    });
    it('types True/False/true/false as booleans', () => {
      expect(parseAddress('q; {a: True, b: False, c: true, d: false}').options)
        .to.deep.equal({ a: true, b: false, c: true, d: false });
    });
    it('keeps other spellings and quoted booleans as strings', () => {
      expect(parseAddress('q; {a: TRUE, b: yes, c: "True"}').options)
        .to.deep.equal({ a: 'TRUE', b: 'yes', c: 'True' });
    });
    const numbers: [string, unknown][] = [
      ['0', 0], ['42', 42], ['-7', -7], ['+3', 3], ['3.25', 3.25], ['-0.5', -0.5],
      ['.5', 0.5], ['5.', 5], ['1e3', 1000], ['2.5E-1', 0.25],
      ['9007199254740993', '9007199254740993'], // beyond 2^53: kept as text
      ['1.2.3', '1.2.3'], ['10ms', '10ms'], ['0x10', '0x10'], ['-', '-'],
    ];
    for (const [word, expected] of numbers) {
      it(`types the bare word ${word} as ${JSON.stringify(expected)}`, () => {
        expect(parseAddress(`q; {v: ${word}}`).options['v']).to.deep.equal(expected);
      });
    }
    it('keeps a quoted number as a string', () => {
      expect(parseAddress('q; {v: "10", w: \'-1.5\'}').options).to.deep.equal({ v: '10', w: '-1.5' });
    });
    it('allows / in bare keys and values (an extension over Qpid, for SOW key paths)', () => {
      expect(parseAddress('q/s; {sow.key: /id, a/b: /x/y, p: [/a, /b]}')).to.deep.equal({
        name: 'q', subject: 's', options: { 'sow.key': '/id', 'a/b': '/x/y', p: ['/a', '/b'] },
      });
    });
    it('allows ; and = and * inside bare values', () => {
      expect(parseAddress('q; {a: x;y, b: k=v, c: *.#}').options).to.deep.equal({ a: 'x;y', b: 'k=v', c: '*.#' });
    });
    it('ignores whitespace everywhere between tokens (spaces, tabs, newlines)', () => {
      expect(parseAddress(' q\t/\ts \n;\n{ a :\t1 ,\r\n b : [ 1 , 2 ] }  ')).to.deep.equal({
        name: 'q', subject: 's', options: { a: 1, b: [1, 2] },
      });
    });
    it('needs no whitespace at all', () => {
      expect(parseAddress('q/s;{a:1,b:{c:[d,e]}}')).to.deep.equal({
        name: 'q', subject: 's', options: { a: 1, b: { c: ['d', 'e'] } },
      });
    });
    it('keeps empty quoted strings', () => {
      expect(parseAddress('q; {a: "", b: \'\'}').options).to.deep.equal({ a: '', b: '' });
    });
    it('lets a later duplicate key win', () => {
      expect(parseAddress('q; {a: 1, a: 2}').options).to.deep.equal({ a: 2 });
    });
    it('treats __proto__ as an ordinary key', () => {
      const opts = parseAddress('q; {__proto__: {polluted: 1}}').options;
      expect(Object.keys(opts)).to.deep.equal(['__proto__']);
      expect(({} as Record<string, unknown>)['polluted']).to.equal(undefined);
      expect(Object.getPrototypeOf(opts)).to.equal(Object.prototype);
    });
  });

  describe('errors with positions', () => {
    const cases: [string, string, number, RegExp][] = [
      ['empty', '', 0, /Expected a name/],
      ['blank', '   ', 3, /Expected a name/],
      ['unterminated double-quoted name', '"abc', 0, /Unterminated string/],
      ['unterminated single-quoted value', "q; {a: 'xyz}", 7, /Unterminated string/],
      ['unterminated quoted key', 'q; {"a: 1}', 4, /Unterminated string/],
      ['missing closing brace', 'q; {a: 1', 8, /Unmatched '\{' \(opened at position 3\)/],
      ['missing closing brace of nested map', 'q; {a: {b: 1}', 13, /Unmatched '\{' \(opened at position 3\)/],
      ['missing comma between entries', 'q; {a: 1 b: 2}', 9, /expected ',' or '\}', found 'b'/],
      ['missing closing bracket', 'q; {a: [1, 2}', 12, /Unmatched '\[' \(opened at position 7\)/],
      ['missing colon', 'q; {a 1}', 6, /Expected ':' after key 'a'/],
      ['missing value', 'q; {a: }', 7, /Expected a value, found '\}'/],
      ['maps and lists nested 65 deep (the limit is 64)', `q; {a: ${'['.repeat(64)}${']'.repeat(64)}}`, 3 + 4 + 63, /Nested too deeply \(more than 64 levels/],
      ['missing value at end', 'q; {a:', 6, /Expected a value but the text ended/],
      ['reserved char as value', 'q; {a: ]}', 7, /Expected a value, found '\]'/],
      ['no map after ;', 'q; a', 3, /Expected '\{' after ';'/],
      ['trailing garbage after options', 'q; {a: 1} x', 10, /Unexpected characters after address: 'x'/],
      ['extra closing brace', 'q; {a: 1}}', 9, /Unexpected characters/],
      ['space in unquoted name', 'my queue', 3, /Unexpected characters after address: 'queue'/],
      ['text after quoted name', '"q"x', 3, /Unexpected characters/],
      ['map key that is a map', 'q; {{a: 1}: 2}', 4, /expected ',' or '\}', found '\{'/],
    ];
    for (const [what, text, position, message] of cases) {
      it(`rejects ${what} (${JSON.stringify(text)}) at position ${position}`, () => {
        const e = syntaxError(() => parseAddress(text));
        expect(e.position).to.equal(position);
        expect(e.message).to.match(message);
        expect(e.message).to.contain(`position ${position}`);
        expect(e.name).to.equal('AddressSyntaxError');
      });
    }
  });
});

describe('address: nesting', () => {
  it('64 levels parse; 5000 are refused with AddressSyntaxError, not a stack overflow', () => {
    expect(parseAddress(`q; {a: ${'['.repeat(63)}${']'.repeat(63)}}`).options).to.have.property('a');
    expect(() => parseAddress(`q; {a: ${'{b: '.repeat(5000)}1${'}'.repeat(5000)}}`)).to.throw(AddressSyntaxError, /Nested too deeply/);
  });
});

describe('address: parseQpidMap', () => {
  it('parses a connection-options map', () => {
    expect(parseQpidMap('{username: guest, password: "s3 cret", sasl_mechanisms: PLAIN, idle_timeout: 30, protocol: amqp1.0}'))
      .to.deep.equal({ username: 'guest', password: 's3 cret', sasl_mechanisms: 'PLAIN', idle_timeout: 30, protocol: 'amqp1.0' });
  });
  it('parses an empty map with whitespace around', () => {
    expect(parseQpidMap('  { }  ')).to.deep.equal({});
  });
  it('parses nested values', () => {
    expect(parseQpidMap("{a: {b: [1, 'x', False]}}")).to.deep.equal({ a: { b: [1, 'x', false] } });
  });
  const bad: [string, number, RegExp][] = [
    ['', 0, /Expected '\{' but the text is empty/],
    ['username: guest', 0, /Expected '\{', found 'u'/],
    ['[1, 2]', 0, /Expected '\{', found '\['/],
    ['{a: 1', 5, /Unmatched '\{'/],
    ['{a: 1} {b: 2}', 7, /Unexpected characters after map/],
    ['{a: "x}', 4, /Unterminated string/],
  ];
  for (const [text, position, message] of bad) {
    it(`rejects ${JSON.stringify(text)} at position ${position}`, () => {
      const e = syntaxError(() => parseQpidMap(text));
      expect(e.position).to.equal(position);
      expect(e.message).to.match(message);
    });
  }
});
