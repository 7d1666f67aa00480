import { expect } from 'chai';
import { FilterSyntaxError, tokenize, type Token } from '../../../lib/filter/index.js';

/** Compact rendering of a token for table comparison. */
function tok(t: Token): string {
  switch (t.type) {
    case 'number': return `num:${String(t.value)}${t.decimal ? 'd' : ''}${typeof t.value === 'bigint' ? 'n' : ''}`;
    case 'string': return `str:${t.value}`;
    case 'path': return `path:${JSON.stringify(t.segments)}`;
    case 'ident': return `id:${t.name}`;
    case 'keyword': return `kw:${t.word}`;
    case 'op': return `op:${t.op}`;
    case 'punct': return t.char;
    case 'eof': return 'eof';
  }
}
const lex = (s: string) => tokenize(s).map(tok).slice(0, -1).join(' ');

describe('filter lexer', () => {
  const cases: [string, string][] = [
    ['/a', 'path:["a"]'],
    ['/a/b', 'path:["a","b"]'],
    ['/a[0]', 'path:["a",0]'],
    ['/a/b[2][10]/c', 'path:["a","b",2,10,"c"]'],
    ['/"odd key"/x', 'path:["odd key","x"]'],
    ["/'it''s'", 'path:["it\'s"]'],
    ['/$meta/_x1', 'path:["$meta","_x1"]'],
    ['/a / 2', 'path:["a"] op:/ num:2'],
    ['/a/2', 'path:["a"] op:/ num:2'],
    ['/a / /b', 'path:["a"] op:/ path:["b"]'],
    ['(/a)/2', '( path:["a"] ) op:/ num:2'],
    ['x / y', 'id:x op:/ id:y'],
    ['1 / /b', 'num:1 op:/ path:["b"]'],
    ['42', 'num:42'],
    ['1.5', 'num:1.5d'],
    ['.5', 'num:0.5d'],
    ['6.02E23', 'num:6.02e+23d'],
    ['1e3', 'num:1000d'],
    ['2.', 'num:2d'],
    ['12345678901234567890', 'num:12345678901234567890n'],
    ["'abc'", 'str:abc'],
    ['"abc"', 'str:abc'],
    ["'it''s'", "str:it's"],
    ['"say ""hi"""', 'str:say "hi"'],
    ["''", 'str:'],
    ["'a\"b'", 'str:a"b'],
    ['and Or NOT between In like Is null TRUE false', 'kw:AND kw:OR kw:NOT kw:BETWEEN kw:IN kw:LIKE kw:IS kw:NULL kw:TRUE kw:FALSE'],
    ['begins WITH ends escape upper', 'id:begins id:WITH id:ends id:escape id:upper'],
    ['JMSPriority qpid.subject x_1 $y', 'id:JMSPriority id:qpid.subject id:x_1 id:$y'],
    ['= == != <> < <= > >=', 'op:= op:= op:<> op:<> op:< op:<= op:> op:>='],
    ['+ - * % /x', 'op:+ op:- op:* op:% path:["x"]'],
    ['( , )', '( , )'],
    ['a=1', 'id:a op:= num:1'],
    ["x BEGINS WITH /p", 'id:x id:BEGINS id:WITH path:["p"]'],
    ['prix >= 2 AND cité = \'é\'', "id:prix op:>= num:2 kw:AND id:cité op:= str:é"],
    ['  \t\n/a\r\n', 'path:["a"]'],
  ];
  for (const [input, expected] of cases) {
    it(`tokenizes ${JSON.stringify(input)}`, () => expect(lex(input)).to.equal(expected));
  }

  it('records token positions', () => {
    const ts = tokenize("/a >= 'x'");
    expect(ts.map((t) => [t.pos, t.end])).to.deep.equal([[0, 2], [3, 5], [6, 9], [9, 9]]);
  });

  const errors: [string, number, string][] = [
    ["'abc", 4, "closing '"],
    ['"abc', 4, 'closing "'],
    ['/', 1, 'a path segment'],
    ['/1a', 1, 'a path segment'],
    ['/a[', 3, 'an array index'],
    ['/a[x]', 3, 'an array index'],
    ['/a[1', 4, "']'"],
    ['a # b', 2, 'an operand or operator'],
    ['a ! b', 2, 'an operand or operator'],
  ];
  for (const [input, pos, expected] of errors) {
    it(`rejects ${JSON.stringify(input)} at ${pos}`, () => {
      let err: unknown;
      try { tokenize(input); } catch (e) { err = e; }
      expect(err).to.be.instanceOf(FilterSyntaxError);
      expect((err as FilterSyntaxError).position).to.equal(pos);
      expect((err as FilterSyntaxError).expected).to.equal(expected);
    });
  }
});
