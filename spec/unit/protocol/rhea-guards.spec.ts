/**
 * lib/core/protocol/rhea-guards.ts at the smallest grain (the broker-level cases are in
 * spec/integration/protocol-edges.spec.ts): the prefix nesting scan, delivery ids found
 * modulo 2^32, and dispositions over huge ranges on a session with no socket.
 */
import { expect } from 'chai';
import rhea from 'rhea';
import { applyRheaGuards, nestedTooDeep, MAX_NESTING } from '../../../lib/core/protocol/rhea-guards.js';

const amqp: any = rhea;

/** list32 values nested `depth` deep around a null. */
function lists(depth: number): Buffer {
  const b = Buffer.alloc(9 * depth + 1);
  for (let i = 0; i < depth; i++) { const at = 9 * i; b[at] = 0xd0; b.writeUInt32BE(9 * (depth - i - 1) + 5, at + 1); b.writeUInt32BE(1, at + 5); }
  b[9 * depth] = 0x40;
  return b;
}
/** list8 values nested `depth` deep (a prefix: sizes as if each held one byte more). */
const list8s = (depth: number) => Buffer.concat(Array.from({ length: depth }, () => Buffer.from([0xc0, 0x03, 0x01])));
const section = (v: Buffer) => Buffer.concat([Buffer.from([0x00, 0x53, 0x77]), v]);

function session(): any {
  return amqp.create_connection({ host: '127.0.0.1', port: 0 }).create_session();
}
const fakeLink = { dispatch() {}, _context: (c: unknown) => c };
const delivery = (id: number) => ({ id, link: fakeLink, settled: false, remote_settled: false, state: undefined, remote_state: undefined });

describe('rhea guards (rhea-guards.ts)', function () {
  before(() => applyRheaGuards());

  describe('nestedTooDeep: a bounded scan of a message prefix', function () {
    const cases: Array<[string, Buffer, boolean]> = [
      ['a real message', amqp.message.encode({ body: { a: [1, 2, { b: 'c' }] }, application_properties: { x: 1 } }), false],
      [`${MAX_NESTING} nested lists`, section(lists(MAX_NESTING)), false],
      [`${MAX_NESTING + 1} nested lists`, section(lists(MAX_NESTING + 1)), true],
      ['100 000 nested lists, only the first 60 000 bytes', section(lists(100000)).subarray(0, 60000), true],
      ['300 nested list8', section(list8s(300)), true],
      ['300 chained descriptors', Buffer.alloc(300, 0x00), true],
      ['a list that ends before the next one starts (depth 1 each)', Buffer.concat(Array.from({ length: 400 }, () => Buffer.from([0xc0, 0x01, 0x00]))), false],
      ['an unknown constructor ends the scan', Buffer.concat([Buffer.from([0xff]), section(lists(400))]), false],
      ['a truncated size field', Buffer.from([0xd0, 0x00, 0x00]), false],
      ['an array is skipped whole', Buffer.concat([Buffer.from([0xe0, 0x02, 0x02, 0x40]), section(lists(3))]), false],
      ['empty', Buffer.alloc(0), false],
    ];
    for (const [what, bytes, deep] of cases) it(`${what}: ${deep}`, () => expect(nestedTooDeep(bytes, MAX_NESTING)).to.equal(deep));
  });

  describe('delivery buffers find ids as serial numbers [RFC 1982]', function () {
    it('across 2^32: 0xfffffffe, 0xffffffff, 0, 1', function () {
      const buf = session().incoming.deliveries;
      for (const id of [0xfffffffe, 0xffffffff, 0, 1]) buf.push(delivery(id));
      expect(buf.by_id(0)?.id).to.equal(0);
      expect(buf.by_id(1)?.id).to.equal(1);
      expect(buf.by_id(0xffffffff)?.id).to.equal(0xffffffff);
      expect(buf.by_id(2)).to.equal(undefined);
      expect(buf.by_id(0xfffffffd)).to.equal(undefined);
    });
  });

  describe('dispositions over huge ranges', function () {
    this.timeout(3000); // rhea looped once per id: seconds to minutes

    it('first=0 last=0xffffffff settles the three outgoing deliveries there are', function () {
      const s = session();
      const ds = [delivery(7), delivery(8), delivery(9)];
      for (const d of ds) s.outgoing.deliveries.push(d);
      s.on_disposition({ performative: { role: true, first: 0, last: 0xffffffff, settled: true, state: undefined } });
      expect(ds.map((d) => d.remote_settled)).to.deep.equal([true, true, true]);
      expect(s.outgoing.updated.map((d: any) => d.id)).to.deep.equal([7, 8, 9]);
    });

    it('a range that starts after them settles none', function () {
      const s = session();
      const ds = [delivery(7), delivery(8)];
      for (const d of ds) s.outgoing.deliveries.push(d);
      s.on_disposition({ performative: { role: true, first: 20, last: 0xfffffff0, settled: true } });
      expect(ds.map((d) => d.remote_settled)).to.deep.equal([false, false]);
    });

    it('incoming deliveries across 2^32: a range 0xfffffffe..1 settles all four, 5..0xfffffff0 none', function () {
      const s = session();
      const ds = [0xfffffffe, 0xffffffff, 0, 1].map(delivery);
      for (const d of ds) s.incoming.deliveries.push(d);
      s.on_disposition({ performative: { role: false, first: 5, last: 0xfffffff0, settled: true } });
      expect(ds.map((d) => d.remote_settled)).to.deep.equal([false, false, false, false]);
      s.on_disposition({ performative: { role: false, first: 0xfffffffe, last: 1, settled: true } });
      expect(ds.map((d) => d.remote_settled)).to.deep.equal([true, true, true, true]);
    });

    it('a narrow range is rhea\'s own loop (one id)', function () {
      const s = session();
      const ds = [delivery(0), delivery(1), delivery(2)];
      for (const d of ds) s.outgoing.deliveries.push(d);
      s.on_disposition({ performative: { role: true, first: 1, settled: true } });
      expect(ds.map((d) => d.remote_settled)).to.deep.equal([false, true, false]);
    });
  });
});
