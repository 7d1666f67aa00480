import { expect } from 'chai';
import { startTestBroker, tempDir, type TestBroker } from '../support/broker.js';
import { connect, openSender, send, receive, createOnDemand, r } from '../support/client.js';
import { Store, setFaultInjector } from '../../lib/core/storage/store.js';
import type { ListStructure } from '../../lib/core/queue/list-structure.js';
import { CoreTables, queuePrefix, prefixEnd } from '../../lib/core/storage/keyspace.js';
import { encodeEvent, decodeEvent } from '../../lib/core/engine/event-record.js';
import { rmSync } from 'node:fs';

// Queue-kind review (session 23): LVQ with a reject limit, LVQ key types, the create-on-demand
// `durable` property, 64-bit integer arguments.
describe('queue kinds audit', function () {
  let tb: TestBroker;
  let dir: string;
  beforeEach(async () => { dir = tempDir(); tb = await startTestBroker({}, { dataDir: dir }); });
  afterEach(async () => { setFaultInjector(undefined); await tb.stop(); rmSync(dir, { recursive: true, force: true }); });

  const lvq = (name: string, args: Record<string, unknown> = {}) => createOnDemand(name, { durable: true, 'qpid.last_value_queue_key': 'k', ...args });
  const m = (k: unknown, body: string) => ({ application_properties: { k }, body });
  const browse = async (addr: string) => (await receive(tb.broker.urls[0], { address: addr, distribution_mode: 'copy' }, { idleMs: 300 })).map((x) => x.message.body);
  const url = () => tb.broker.urls[0];
  const states = (o: { state: string }[]) => o.map((x) => x.state);

  describe('LVQ with a reject limit: a refused replacement leaves the old value as it was', function () {
    it('a replacement larger than qpid.max_size: the key keeps one value, replaceable, also after a restart', async function () {
      await send(url(), lvq('lr.big', { 'qpid.max_size': 2000 }), [m('a', 'a1')]);
      for (let i = 0; i < 3; i++) {
        const o = await send(url(), 'lr.big', [m('a', 'x'.repeat(3000))]);
        expect(o[0].condition).to.equal('amqp:resource-limit-exceeded');
      }
      expect(await browse('lr.big')).to.deep.equal(['a1']);
      expect(states(await send(url(), 'lr.big', [m('a', 'a2')]))).to.deep.equal(['accepted']);
      expect(await browse('lr.big')).to.deep.equal(['a2']);
      await tb.restart();
      expect(await browse('lr.big')).to.deep.equal(['a2']);
      await send(url(), 'lr.big', [m('a', 'a3')]);
      expect(await browse('lr.big')).to.deep.equal(['a3']);
    });

    it('a refused replacement keeps the old value counted: qpid.max_size still holds', async function () {
      await send(url(), lvq('lr.count', { 'qpid.max_size': 1000 }), [m('a', 'a'.repeat(400))]);
      expect((await send(url(), 'lr.count', [m('a', 'A'.repeat(1200))]))[0].state).to.equal('rejected');
      // a (~450 bytes) is held: b fits, c and d do not
      const o = await send(url(), 'lr.count', [m('b', 'b'.repeat(400)), m('c', 'c'.repeat(400)), m('d', 'd'.repeat(400))]);
      expect(states(o)).to.deep.equal(['accepted', 'rejected', 'rejected']);
      const q = tb.broker.nodes.get('lr.count')!;
      expect(q.structure.stats().depth).to.equal(2);
      expect(q.structure.stats().bytes).to.be.at.most(1000);
      expect((await browse('lr.count')).map((b: string) => b[0])).to.deep.equal(['a', 'b']);
    });

    it('a replacement that does not fit even after the old value goes (queue full): the old value stays replaceable', async function () {
      await send(url(), lvq('lr.full', { 'qpid.max_size': 1000 }), [m('a', 'a1'), m('b', 'b'.repeat(450))]);
      const o = await send(url(), 'lr.full', [m('a', 'A'.repeat(600))]);
      expect(o[0].condition).to.equal('amqp:resource-limit-exceeded');
      expect(o[0].description).to.match(/is full/);
      await send(url(), 'lr.full', [m('a', 'a2')]);
      const held = await browse('lr.full');
      expect(held.map((b: string) => b.slice(0, 2))).to.deep.equal(['bb', 'a2']);
      await tb.restart();
      expect((await browse('lr.full')).map((b: string) => b.slice(0, 2))).to.deep.equal(['bb', 'a2']);
    });

    it('with qpid.max_count: a refused update in a batch does not leave the next one of the key a second value', async function () {
      await send(url(), lvq('lr.mc', { 'qpid.max_size': 500, 'qpid.max_count': 2 }), [m('a', 'a1'), m('b', 'b1')]);
      const o = await send(url(), 'lr.mc', [m('a', 'z'.repeat(600)), m('a', 'a2'), m('a', 'z'.repeat(600)), m('a', 'a3')]);
      expect(states(o)).to.deep.equal(['rejected', 'accepted', 'rejected', 'accepted']);
      expect(await browse('lr.mc')).to.deep.equal(['b1', 'a3']);
      await tb.restart();
      expect(await browse('lr.mc')).to.deep.equal(['b1', 'a3']);
    });
  });

  it('log.max_count: an entry the bound chose to drop, kept because the batch failed, is not taken for a bound drop when consumed', async function () {
    await send(url(), createOnDemand('lb.fail', { durable: true, 'log.max_count': 2 }), [{ body: 'a' }, { body: 'b' }]);
    let failures = 1;
    setFaultInjector(() => (failures-- > 0 ? Object.assign(new Error('IO error: No space left on device (injected)'), { code: 'LEVEL_IO_ERROR' }) : undefined));
    expect(states(await send(url(), 'lb.fail', [{ body: 'c' }]))).to.deep.equal(['rejected']);
    expect((await receive(url(), 'lb.fail', { idleMs: 300 })).map((x) => x.message.body)).to.deep.equal(['a', 'b']);
    // consumption is not the log bound: no reader fell off
    expect((tb.broker.nodes.get('lb.fail')!.structure as ListStructure).logFloor).to.equal(0);
  });

  describe('LVQ keys of other types than string and number', function () {
    const uuid = (hex: string) => r.types.wrap_uuid(Buffer.from(hex, 'hex'));
    const cases: [string, () => unknown, () => unknown][] = [
      ['uuid', () => uuid('ff00112233445566778899aabbccddee'), () => uuid('fe00112233445566778899aabbccddee')],
      ['binary', () => Buffer.from([0xff, 1]), () => Buffer.from([0xfe, 1])],
      ['timestamp', () => r.types.wrap_timestamp(1700000000100), () => r.types.wrap_timestamp(1700000000900)],
      ['long past 2^53 + 2^32', () => r.types.wrap_long(Buffer.from('7f000000000000ff', 'hex')), () => r.types.wrap_long(Buffer.from('7f000000000000fe', 'hex'))],
      ['long just past 2^53 (rhea rounds it)', () => r.types.wrap_long(Buffer.from('0020000000000000', 'hex')), () => r.types.wrap_long(Buffer.from('0020000000000001', 'hex'))],
    ];
    for (const [label, k1, k2] of cases) {
      it(`two ${label} keys are two keys, each replaced by its own, also after a restart`, async function () {
        const q = `lk.${label.split(' ')[0]}.${label.length}`;
        await send(url(), lvq(q), [m(k1(), 'first'), m(k2(), 'second')]);
        expect(await browse(q)).to.deep.equal(['first', 'second']);
        await send(url(), q, [m(k1(), 'first2')]);
        expect(await browse(q)).to.deep.equal(['second', 'first2']);
        await tb.restart();
        expect(await browse(q)).to.deep.equal(['second', 'first2']);
        await send(url(), q, [m(k2(), 'second2'), m(k1(), 'first3')]);
        expect(await browse(q)).to.deep.equal(['second2', 'first3']);
      });
    }

    it('string, int and exact long keys of the same number are one key; a binary is not its text', async function () {
      await send(url(), lvq('lk.mixed'), [m('1', 's1'), m(1, 'i1'), m('1152921504606846977', 'sL'), m(r.types.wrap_long(Buffer.from('1000000000000001', 'hex')), 'L'), m('ab', 'str'), m(Buffer.from('ab'), 'bin'), m('\0b:6162', 'tagged-looking')]);
      expect(await browse('lk.mixed')).to.deep.equal(['i1', 'L', 'str', 'bin', 'tagged-looking']);
      await tb.restart();
      await send(url(), 'lk.mixed', [m(Buffer.from('ab'), 'bin2'), m('\0b:6162', 'tagged2'), m(1, 'i2')]);
      expect(await browse('lk.mixed')).to.deep.equal(['L', 'str', 'bin2', 'tagged2', 'i2']);
    });

    it('entries stored with the keys an older version made (String(v)) get their key from the message at recovery', async function () {
      await send(url(), lvq('lk.old'), [m(Buffer.from([0xff, 1]), 'ff'), m(Buffer.from([0xfe, 1]), 'fe'), m(r.types.wrap_timestamp(1700000000100), 't')]);
      const qid = tb.broker.nodes.get('lk.old')!.id;
      await tb.stop(); // the data directory stays (given)
      // Rewrite the stored keys as the older version wrote them: both binaries had "\ufffd\u0001".
      const store = await Store.open(dir);
      const prefix = queuePrefix(CoreTables.log, qid);
      const rows = await store.all({ gte: prefix, lt: prefixEnd(prefix) });
      expect(rows.length).to.equal(3);
      const oldKeys = [String(Buffer.from([0xff, 1])), String(Buffer.from([0xfe, 1])), String(new Date(1700000000100))];
      await store.batch(rows.map(([k, v], i) => { const { meta, message } = decodeEvent(v); return { type: 'put' as const, key: k, value: encodeEvent({ ...meta, key: oldKeys[i] }, Buffer.from(message)) }; }), true);
      await store.close();
      tb = await startTestBroker({}, { dataDir: dir });
      expect(await browse('lk.old')).to.deep.equal(['ff', 'fe', 't']);
      await send(url(), 'lk.old', [m(Buffer.from([0xff, 1]), 'ff2'), m(r.types.wrap_timestamp(1700000000100), 't2')]);
      expect(await browse('lk.old')).to.deep.equal(['fe', 'ff2', 't2']);
    });
  });

  describe('create-on-demand `durable` node property', function () {
    for (const v of [1, 'yes', 'TRUE', 'on', true]) {
      it(`durable: ${JSON.stringify(v)} makes a durable queue (its messages survive a restart)`, async function () {
        const q = `dur.${String(v)}`;
        await send(url(), createOnDemand(q, { durable: v }), [{ body: 'kept' }]);
        expect(tb.broker.nodes.get(q)!.durable).to.equal(true);
        await tb.restart();
        expect((await receive(url(), q, { idleMs: 300 })).map((x) => x.message.body)).to.deep.equal(['kept']);
      });
    }
    for (const v of [0, 'no', 'False', false]) {
      it(`durable: ${JSON.stringify(v)} makes a non-durable queue`, async function () {
        const q = `nondur.${String(v)}`;
        await send(url(), createOnDemand(q, { durable: v }), [{ body: 'x' }]);
        expect(tb.broker.nodes.get(q)!.durable).to.equal(false);
      });
    }
    it('durable: "bogus" refuses the attach with invalid-field naming it, and no queue is made', async function () {
      const c = await connect(url());
      try {
        const err = await openSender(c, createOnDemand('dur.bogus', { durable: 'bogus' })).then(() => undefined, (e) => e);
        expect(err?.condition).to.equal('amqp:invalid-field');
        expect(err?.message).to.match(/durable.*expected a boolean.*"bogus"/);
        expect(tb.broker.nodes.get('dur.bogus')).to.equal(undefined);
      } finally { await c.close(); }
    });
  });

  describe('64-bit integer arguments past 2^53', function () {
    const LONG_MAX = () => r.types.wrap_long(Buffer.from('7fffffffffffffff', 'hex'));
    it('qpid.max_count / qpid.max_size Long.MAX_VALUE (Java clients\' "no limit") is a limit that cannot be reached, also after a restart', async function () {
      const o = await send(url(), createOnDemand('big.limits', { durable: true, 'qpid.max_count': LONG_MAX(), 'qpid.max_size': LONG_MAX(), 'qpid.policy_type': 'ring' }), [{ body: 1 }, { body: 2 }]);
      expect(states(o)).to.deep.equal(['accepted', 'accepted']);
      const args = tb.broker.nodes.get('big.limits')!.arguments;
      expect(args['qpid.max_count']).to.equal(Number.MAX_SAFE_INTEGER);
      expect(args['qpid.max_size']).to.equal(Number.MAX_SAFE_INTEGER);
      await tb.restart();
      expect(states(await send(url(), 'big.limits', [{ body: 3 }]))).to.deep.equal(['accepted']);
      expect((await receive(url(), 'big.limits', { idleMs: 300 })).map((x) => x.message.body)).to.deep.equal([1, 2, 3]);
    });
    it('another argument past 2^53 is refused as a 64-bit integer too large, not as binary', async function () {
      const c = await connect(url());
      try {
        const err = await openSender(c, createOnDemand('big.log', { 'log.max_count': r.types.wrap_long(Buffer.from('1000000000000000', 'hex')) })).then(() => undefined, (e) => e);
        expect(err?.condition).to.equal('amqp:invalid-field');
        expect(err?.message).to.match(/log\.max_count: .*64-bit integer \(1152921504606846976\).*too large/);
        expect(err?.message).to.not.match(/binary/);
      } finally { await c.close(); }
    });
  });
});
