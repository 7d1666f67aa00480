import { expect } from 'chai';
import { FILTER_LIMITS, FilterSyntaxError, compileFilter, type FilterEnv } from '../../../lib/filter/index.js';

function rejects(text: string, message: RegExp, dialect: 'content' | 'selector' = 'content'): FilterSyntaxError {
  let err: unknown;
  try { compileFilter(text, dialect); } catch (e) { err = e; }
  expect(err, 'expected a FilterSyntaxError').to.be.instanceOf(FilterSyntaxError);
  expect((err as Error).message).to.match(message);
  expect((err as Error).message.length).to.be.below(400); // long texts are quoted truncated
  return err as FilterSyntaxError;
}

describe('filter safety limits', () => {
  const L = FILTER_LIMITS;

  it(`expression length: ${L.MAX_EXPRESSION_LENGTH} accepted, one more rejected`, () => {
    const base = '/a = 1';
    const ok = base + ' '.repeat(L.MAX_EXPRESSION_LENGTH - base.length);
    expect(compileFilter(ok).text.length).to.equal(L.MAX_EXPRESSION_LENGTH);
    const e = rejects(ok + ' ', /expression too long \(65537 characters, max 65536\)/);
    expect(e.position).to.equal(L.MAX_EXPRESSION_LENGTH);
  });

  it(`parenthesis nesting: ${L.MAX_DEPTH} accepted, ${L.MAX_DEPTH + 1} rejected`, () => {
    const nest = (n: number) => '('.repeat(n) + '/a = 1' + ')'.repeat(n);
    expect(() => compileFilter(nest(L.MAX_DEPTH))).not.to.throw();
    const e = rejects(nest(L.MAX_DEPTH + 1), /nested too deeply \(max 64\)/);
    expect(e.position).to.equal(L.MAX_DEPTH);
  });

  it('very deep input gives FilterSyntaxError, never a stack overflow', () => {
    rejects('('.repeat(30000) + '1' + ')'.repeat(30000), /nested too deeply/);
    rejects('NOT '.repeat(15000) + 'a', /nested too deeply/);
    rejects('-'.repeat(60000) + '1', /nested too deeply/);
    rejects('UPPER('.repeat(5000) + 'a' + ')'.repeat(5000), /nested too deeply/);
    rejects('a IN ('.repeat(5000) + '1' + ')'.repeat(5000), /nested too deeply/);
  });

  it('tree depth from long left-associative chains is bounded too', () => {
    expect(() => compileFilter('1' + ' + 1'.repeat(L.MAX_DEPTH - 1) + ' > 0')).to.throw(FilterSyntaxError);
    expect(compileFilter('1' + ' + 1'.repeat(L.MAX_DEPTH - 3) + ' > 0').matches({ bodyPath: () => 0, property: () => 0 })).to.equal(true);
    rejects('1' + ' * 1'.repeat(10000), /nested too deeply/);
  });

  it('AND/OR chains are flat: many clauses do not count as depth', () => {
    const f = compileFilter(Array.from({ length: 2000 }, (_, i) => `/a = ${i}`).join(' OR '));
    const env: FilterEnv = { bodyPath: () => 1999, property: () => undefined };
    expect(f.matches(env)).to.equal(true);
  });

  it(`node count: at most ${L.MAX_NODES}`, () => {
    const list = (n: number) => `/a IN (${Array.from({ length: n }, (_, i) => i).join(',')})`;
    expect(() => compileFilter(list(L.MAX_NODES - 3))).not.to.throw();
    rejects(list(L.MAX_NODES), /too large \(more than 10000 nodes\)/);
  });

  it(`literal length: ${L.MAX_LITERAL_LENGTH} accepted, one more rejected`, () => {
    expect(() => compileFilter(`/a = '${'x'.repeat(L.MAX_LITERAL_LENGTH)}'`)).not.to.throw();
    const e = rejects(`/a = '${'x'.repeat(L.MAX_LITERAL_LENGTH + 1)}'`, /literal too long \(8193 characters, max 8192\)/);
    expect(e.position).to.equal(5);
    rejects(`/a = ${'9'.repeat(L.MAX_LITERAL_LENGTH + 1)}`, /literal too long/);
    rejects(`/a = "${'ab'.repeat(3000)}${'""'.repeat(2200)}"`, /literal too long/);
  });

  it('LIKE regex: compiled once at parse time; unsupported or oversized patterns rejected', () => {
    rejects("/a LIKE '(x)\\1'", /invalid LIKE pattern: backreferences are not supported/);
    rejects("/a LIKE 'a{5000}'", /repetition count too large/);
    rejects("/a LIKE '(a{1000}){1000}'", /pattern too complex/);
    rejects("/a LIKE '[z-a]'", /invalid LIKE pattern/);
  });

  it('LIKE regex: catastrophic patterns are accepted and stay fast (linear-time engine)', function () {
    this.timeout(10000);
    const input = 'a'.repeat(L.MAX_MATCH_INPUT);
    const env: FilterEnv = { bodyPath: () => input, property: () => undefined };
    for (const p of ['(a+)+b', '(a*)*b', '(.*)*x', '(a|a)*b', '.*.*.*x']) {
      const f = compileFilter(`/s LIKE '${p}'`);
      const t0 = Date.now();
      expect(f.matches(env), p).to.equal(false);
      expect(Date.now() - t0, p).to.be.below(1500);
    }
  });

  it(`LIKE input longer than ${L.MAX_MATCH_INPUT} is NULL (neither LIKE nor NOT LIKE matches)`, () => {
    const long = 'a'.repeat(L.MAX_MATCH_INPUT + 1);
    const ok = 'a'.repeat(L.MAX_MATCH_INPUT);
    const env = (s: string): FilterEnv => ({ bodyPath: () => s, property: () => s });
    expect(compileFilter("/s LIKE 'a'").matches(env(ok))).to.equal(true);
    expect(compileFilter("/s LIKE 'a'").matches(env(long))).to.equal(false);
    expect(compileFilter("/s NOT LIKE 'b'").matches(env(long))).to.equal(false);
    expect(compileFilter("s LIKE 'a%'", 'selector').matches(env(long))).to.equal(false);
    expect(compileFilter("s NOT LIKE 'b%'", 'selector').matches(env(long))).to.equal(false);
  });

  it('JMS LIKE with many % stays fast on long input', () => {
    const s = 'a'.repeat(L.MAX_MATCH_INPUT);
    const f = compileFilter(`s LIKE '${'%a'.repeat(50)}%b'`, 'selector');
    const t0 = Date.now();
    expect(f.matches({ bodyPath: () => undefined, property: () => s })).to.equal(false);
    expect(Date.now() - t0).to.be.below(2000);
  });
});
