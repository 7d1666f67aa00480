/**
 * Session 22 code review of the filters and addresses (docs/robustness.md 13, "Filters and
 * addresses"): unit cases. The broker cases are in spec/integration/filter-audit.spec.ts.
 */
import { expect } from 'chai';
import rhea from 'rhea';
import { compileFilter, FilterSyntaxError, lookupJsonPath } from '../../../lib/filter/index.js';
import { MessageEnv } from '../../../lib/core/queue/filter-env.js';
import { decodeMessage } from '../../../lib/codec/message-bytes.js';
import { readApplicationProperties } from '../../../lib/codec/app-properties.js';
import { selectorExtension, DIRECT_BINDING, TOPIC_BINDING } from '../../../lib/ext/selector/index.js';
import { TidemarkError } from '../../../lib/core/errors.js';
import { parseAddress, addressToLinkOptions } from '../../../lib/address/index.js';
import { expandQpidAddress, unwrapValue, filters as sourceFilters } from '../../../lib/core/protocol/terminus.js';

const t: any = (rhea as any).types;
const encode = (m: Record<string, unknown>): Buffer => (rhea as any).message.encode(m);
/** An env over the message as the broker holds it: decoded from its bytes. */
const envOf = (m: Record<string, unknown>) => new MessageEnv(decodeMessage(encode(m)));
const plainEnv = (body: any, props: any = {}) => ({ bodyPath: (p: any) => lookupJsonPath(body, p), property: (n: string) => props[n] });
const selector = (expr: string) => compileFilter(expr, 'selector');
const filterSpec = (symbol: string) => selectorExtension().filters!.find((f) => f.symbol === symbol)!;

const long = (v: bigint) => { const b = Buffer.alloc(8); b.writeBigInt64BE(v); return t.wrap_long(b); };
const ulong = (v: bigint) => { const b = Buffer.alloc(8); b.writeBigUInt64BE(v); return t.wrap_ulong(b); };
const NS = 1700000000123456789n;

describe('session 22 review: filters and addresses', () => {
  describe('1. property names that are Object.prototype members', () => {
    const env = new MessageEnv({ subject: 's', application_properties: { a: 1 }, body: 'x' });
    for (const name of ['valueOf', 'hasOwnProperty', 'toString', 'constructor', '__proto__', 'isPrototypeOf', 'toLocaleString', 'propertyIsEnumerable', '__defineGetter__']) {
      it(`${name} is a missing property (NULL), not Object.prototype's function`, () => {
        expect(selector(`${name} IS NULL`).evaluate(env)).to.equal(true);
        expect(env.property(name)).to.equal(undefined);
      });
    }
    it('an application property with such a name is read as sent', () => {
      const e = envOf({ application_properties: { valueOf: 3, toString: 'x', constructor: 'c' }, body: 'b' });
      expect(selector("valueOf = 3 AND toString = 'x' AND constructor = 'c'").evaluate(e)).to.equal(true);
    });
    it('a function name that is an Object.prototype member is an unknown function', () => {
      for (const fn of ['constructor', 'toString', 'valueOf', '__proto__']) {
        expect(() => selector(`${fn}(1) = 1`), fn).to.throw(FilterSyntaxError, /unknown function/);
      }
    });
  });

  describe('2. legacy subject bindings read properties.subject', () => {
    it('direct binding: an application property called subject does not count', () => {
      const p = filterSpec(DIRECT_BINDING).parse('red', {} as any).predicate!;
      expect(p(new MessageEnv({ subject: 'red', application_properties: { subject: 'blue' } })), 'subject red').to.equal(true);
      expect(p(new MessageEnv({ subject: 'blue', application_properties: { subject: 'red' } })), 'subject blue').to.equal(false);
      expect(p(new MessageEnv({ application_properties: { subject: 'red' } })), 'no subject').to.equal(false);
    });
    it('topic binding: likewise', () => {
      const p = filterSpec(TOPIC_BINDING).parse('us.*', {} as any).predicate!;
      expect(p(new MessageEnv({ subject: 'us.east', application_properties: { subject: 'eu' } })), 'subject us.east').to.equal(true);
      expect(p(new MessageEnv({ subject: 'eu', application_properties: { subject: 'us.east' } })), 'subject eu').to.equal(false);
    });
    it('a selector still reads an application property called subject first (filters.md: application properties, then fields)', () => {
      expect(selector("subject = 'blue'").evaluate(new MessageEnv({ subject: 'red', application_properties: { subject: 'blue' } }))).to.equal(true);
    });
  });

  describe('3. what rhea\'s decode loses of application properties: 64-bit integers, a key __proto__', () => {
    it('a long nanosecond timestamp (past 2^53 + 2^32: rhea gives its 8 bytes) compares as a number, exactly', () => {
      const env = envOf({ application_properties: { ts: long(NS) }, body: 'x' });
      expect(selector('ts > 0').evaluate(env)).to.equal(true);
      expect(selector(`ts = ${NS}`).evaluate(env)).to.equal(true);
      expect(selector(`ts = ${NS + 1n}`).evaluate(env)).to.equal(false);
      expect(env.property('ts')).to.equal(NS);
    });
    it('a ulong id compares exactly', () => {
      const env = envOf({ application_properties: { id: ulong(18446744073709551615n) }, body: 'x' });
      expect(selector('id = 18446744073709551615').evaluate(env)).to.equal(true);
      expect(selector('id > 18446744073709551614').evaluate(env)).to.equal(true);
    });
    it('a long just past 2^53 (rhea rounds it) is not rounded', () => {
      const env = envOf({ application_properties: { id: long(9007199254740993n) }, body: 'x' });
      expect(selector('id = 9007199254740993').evaluate(env)).to.equal(true);
      expect(selector('id = 9007199254740992').evaluate(env)).to.equal(false);
    });
    it('a negative long past -2^53 is exact', () => {
      const env = envOf({ application_properties: { n: long(-NS) }, body: 'x' });
      expect(selector(`n = -${NS}`).evaluate(env)).to.equal(true);
      expect(selector('n < 0').evaluate(env)).to.equal(true);
    });
    it('a safe long stays a number; an 8-byte binary stays bytes; a large double stays a double', () => {
      const bin = Buffer.from('0102030405060708', 'hex');
      const env = envOf({ application_properties: { small: long(42n), bin, dbl: t.wrap_double(1e20), ul: ulong(7n) }, body: 'x' });
      expect(env.property('small')).to.equal(42);
      expect(env.property('ul')).to.equal(7);
      expect(Buffer.isBuffer(env.property('bin'))).to.equal(true);
      expect((env.property('bin') as Buffer).equals(bin)).to.equal(true);
      expect(env.property('dbl')).to.equal(1e20);
      expect(selector('bin > 0').evaluate(env), 'bytes do not compare with numbers').to.equal(null);
    });
    it('readApplicationProperties: every entry, longs exact; none without the section; null for bytes it cannot read', () => {
      const m = readApplicationProperties(encode({ subject: 's', application_properties: { a: 'x', ts: long(NS) }, body: 'b' }))!;
      expect([...m.entries()]).to.deep.equal([['a', 'x'], ['ts', NS]]);
      expect(readApplicationProperties(encode({ subject: 's', body: 'b' }))!.size).to.equal(0);
      expect(readApplicationProperties(Buffer.from([0x00, 0x53, 0x74, 0xd1, 0xff]))).to.equal(null);
    });
    it('an application property called __proto__ is read (rhea drops it from the decoded map)', () => {
      const e = envOf({ application_properties: { ['__proto__']: 'p', a: 1 }, body: 'b' });
      expect(selector("__proto__ = 'p' AND a = 1").evaluate(e)).to.equal(true);
      expect(selector('__proto__ IS NULL').evaluate(envOf({ application_properties: { a: 1 }, body: 'b' }))).to.equal(true);
    });
    it('a view without its bytes (built by hand) keeps rhea\'s value', () => {
      const buf = Buffer.alloc(8); buf.writeBigInt64BE(NS);
      expect(new MessageEnv({ application_properties: { ts: buf } }).property('ts')).to.equal(buf);
    });
  });

  describe('4. an over-long topic binding', () => {
    it('is refused with amqp:invalid-field, as other unparseable filters are', () => {
      let err: any;
      try { filterSpec(TOPIC_BINDING).parse('a.'.repeat(33000) + '#', {} as any); } catch (e) { err = e; }
      expect(err).to.be.instanceOf(TidemarkError);
      expect(err.condition).to.equal('amqp:invalid-field');
      expect(err.message).to.match(/^topic binding: .*subject pattern too long/);
    });
  });

  describe('5. letters outside the BMP in names', () => {
    it('a path segment starting with U+20000 (CJK Ext. B letter)', () => {
      expect(compileFilter('/\u{20000}x = 1').evaluate(plainEnv({ '\u{20000}x': 1 }))).to.equal(true);
    });
    it('a path segment containing U+1D4B3 (mathematical letter), and a path continued after it', () => {
      expect(compileFilter('/a\u{1D4B3} = 1').evaluate(plainEnv({ 'a\u{1D4B3}': 1 }))).to.equal(true);
      expect(compileFilter('/a/\u{1D4B3}b = 2').evaluate(plainEnv({ a: { '\u{1D4B3}b': 2 } }))).to.equal(true);
    });
    it('a property (selector) named with U+20000, and one with a dot', () => {
      expect(selector('\u{20000} = 1').evaluate(plainEnv({}, { '\u{20000}': 1 }))).to.equal(true);
      expect(selector('x.\u{20000} = 1').evaluate(plainEnv({}, { 'x.\u{20000}': 1 }))).to.equal(true);
    });
    it('a character that is not a letter is still refused, named whole in the message', () => {
      expect(() => compileFilter('/a = \u{1F600}')).to.throw(FilterSyntaxError, /unexpected character '\u{1F600}' at 5/u);
    });
  });

  describe('6. a raw filter named __proto__', () => {
    const address = 'q; {link: {filter: {name: __proto__, descriptor: "tidemark:content-filter:string", value: "/a = 1"}}}';
    it('is kept as a filter entry by addressToLinkOptions', () => {
      const f = addressToLinkOptions(parseAddress(address), 'receiver').source!['filter'] as Record<string, unknown> | undefined;
      expect(f, 'source.filter').to.not.equal(undefined);
      expect(Object.keys(f!)).to.deep.equal(['__proto__']);
      expect(Object.getPrototypeOf(f)).to.equal(Object.prototype);
    });
    it('is kept by the broker when a plain client sends the address (expandQpidAddress), and rhea encodes it', () => {
      const source = expandQpidAddress({ address }, 'receiver');
      expect(sourceFilters(source).map((f) => [f.key, f.descriptor, f.value])).to.deep.equal([['__proto__', 'tidemark:content-filter:string', '/a = 1']]);
      // rhea writes a terminus filter set with wrap_symbolic_map.
      const w = new t.Writer();
      w.write(t.wrap_symbolic_map(source.filter));
      expect((w.toBuffer() as Buffer).includes(Buffer.from('__proto__')), 'the key is on the wire').to.equal(true);
    });
    it('a lifetime-policy named like an Object.prototype member is taken as the descriptor itself', () => {
      const o = addressToLinkOptions(parseAddress('q; {create: always, node: {properties: {lifetime-policy: toString}}}'), 'sender');
      expect((o.target!['dynamic_node_properties'] as any)['lifetime-policy']).to.deep.equal({ descriptor: 'toString', value: [] });
    });
    it('a peer\'s map with a key __proto__ (options, node properties) keeps it as an entry', () => {
      const typed = t.wrap_map({ ['__proto__']: { top_n: 5 }, a: 1 });
      const o = unwrapValue(typed) as Record<string, unknown>;
      expect(Object.keys(o)).to.deep.equal(['__proto__', 'a']);
      expect(Object.getPrototypeOf(o)).to.equal(Object.prototype);
      expect((o as any).top_n, 'nothing inherited').to.equal(undefined);
    });
  });

  describe('7. small language edges', () => {
    it('COALESCE(/d * 2, 0) / 4 with d = 2.5 is 1.25, like (/d * 2) / 4', () => {
      expect(compileFilter('(/d * 2) / 4').evaluate(plainEnv({ d: 2.5 }))).to.equal(1.25);
      expect(compileFilter('COALESCE(/d * 2, 0) / 4').evaluate(plainEnv({ d: 2.5 }))).to.equal(1.25);
      expect(compileFilter('COALESCE(/x, 2.5 * 2) / 4').evaluate(plainEnv({})), 'a constant decimal argument').to.equal(1.25);
      expect(compileFilter('COALESCE(/x, /i) / 4').evaluate(plainEnv({ i: 5 })), 'an integer argument').to.equal(1);
      expect(compileFilter('COALESCE(/x, 0.5) / 4').evaluate(plainEnv({ x: 5 })), 'the integer chosen').to.equal(1);
    });
    it('a property named `with` can be divided; BEGINS WITH /path still reads a path', () => {
      expect(selector('with / 2 = 2').evaluate(plainEnv({}, { with: 4 }))).to.equal(true);
      expect(compileFilter('with / 2 = 2').evaluate(plainEnv({}, { with: 4 }))).to.equal(true);
      expect(compileFilter('/s BEGINS WITH /p').evaluate(plainEnv({ s: 'hello', p: 'he' }))).to.equal(true);
      expect(compileFilter('/s NOT ENDS WITH /p').evaluate(plainEnv({ s: 'hello', p: 'lo' }))).to.equal(false);
    });
  });
});
