/**
 * Session 22 code review of the filters and addresses (docs/robustness.md 13, "Filters and
 * addresses"): unit cases. The broker cases are in spec/integration/filter-audit.spec.ts.
 */
import { expect } from 'chai';
import rhea from 'rhea';
import { compileFilter, FilterSyntaxError, lookupJsonPath } from '../../../lib/filter/index.js';
import { MessageEnv } from '../../../lib/core/queue/filter-env.js';
import { decodeMessage } from '../../../lib/codec/message-bytes.js';
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
});
