/**
 * wire.md details an outside audit found the broker getting wrong (session 10): each case
 * fails on the code before its fix. Real broker, real rhea client.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { r, connect, openSender, openReceiver, collect, send, sendAll, errorOf, isNullTerminus, createOnDemand, type Conn } from '../support/client.js';
import { tmFilters, cmdOf, bodyJson } from '../support/sow-client.js';
import { ManualClock } from '../../lib/index.js';
import { amqpInfo } from '../../lib/core/errors.js';
import { amqpTypes } from '../../lib/codec/amqp.js';
import { applyRheaPatches } from '../../lib/core/protocol/rhea-patches.js';

const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);

/** Attaches a receiver; resolves with the reply's source, or the detach error. */
function attachReceiver(c: Conn, source: any): Promise<{ source?: any; error?: { condition?: string; description?: string }; link: any }> {
  return new Promise((resolve) => {
    const link = c.connection.open_receiver({ source, credit_window: 0, autoaccept: false });
    // A refusal is a reply with a null source, then the detach: wait for the detach then.
    link.once('receiver_open', () => { if (!isNullTerminus(link.remote.attach.source)) resolve({ source: link.remote.attach.source, link }); });
    link.once('receiver_close', () => resolve({ error: errorOf(link.remote.detach?.error ?? link.error), link }));
    link.once('receiver_error', () => resolve({ error: errorOf(link.error), link }));
  });
}

/** The first message a fresh receiver gets, with credit 1. */
async function firstMessage(url: string, source: any): Promise<any> {
  const c = await connect(url);
  try {
    const rcv = await openReceiver(c, source);
    const [m] = await collect(rcv, { count: 1, credit: 1, idleMs: 3000 });
    return m?.message;
  } finally { await c.close(); }
}

describe('wire contract details (wire.md 1-7)', function () {
  this.timeout(30000);
  let clock: ManualClock;
  let tb: TestBroker;
  beforeEach(async () => { clock = new ManualClock(T0); tb = await startTestBroker({}, { clock }); });
  afterEach(async () => { await tb.stop(); });

  it('2.1: re-declaring a SOW queue with only reserved node properties (or another broker\'s argument) uses it as it is; a different sow.key is precondition-failed', async function () {
    expect((await send(tb.url, createOnDemand('w.sow', { 'sow.key': '/id' }), [{ body: '{"id":1}' }]))[0].state).to.equal('accepted');
    // what qpid::messaging sends for `w.sow; {create: always, node: {type: queue, durable: true}}`
    const reserved = await send(tb.url, createOnDemand('w.sow', { 'supported-dist-modes': 'move', durable: true }), [{ body: '{"id":2}' }]);
    expect(reserved[0].state).to.equal('accepted');
    expect((await send(tb.url, createOnDemand('w.sow', { 'x-other-broker': 1 }), [{ body: '{"id":3}' }]))[0].state).to.equal('accepted');
    expect(tb.broker.nodes.get('w.sow')!.arguments).to.deep.equal({ 'sow.key': '/id' });
    const c = await connect(tb.url);
    try {
      const err = await openSender(c, createOnDemand('w.sow', { 'sow.key': '/key' })).then(() => undefined, (e) => e);
      expect(err?.condition).to.equal('amqp:precondition-failed');
      expect(err?.message).to.match(/sow\.key/);
    } finally { await c.close(); }
  });

  it('2.1: the reply echoes `durable` only for a durable queue', async function () {
    const c = await connect(tb.url);
    try {
      const mgmt = await openSender(c, { address: '$management' });
      const rcvReply = await openReceiver(c, { dynamic: true });
      const reply = collect(rcvReply, { count: 1, idleMs: 3000 });
      await sendAll(mgmt, [{ message_id: 'c1', reply_to: rcvReply.remote.attach.source.address, application_properties: { operation: 'CREATE', type: 'queue', name: 'w.transient' }, body: { durable: false } }]);
      expect((await reply)[0].message.application_properties.statusCode).to.equal(201);
      const transient = await attachReceiver(c, { address: 'w.transient', capabilities: ['queue', 'durable'] });
      expect(transient.source.capabilities).to.deep.equal(['queue']);
      const durable = await attachReceiver(c, { address: 'w.durable', capabilities: ['queue', 'durable'] });
      expect(durable.source.capabilities).to.deep.equal(['queue', 'durable']);
    } finally { await c.close(); }
  });

  it('2.1: a command link on a plain queue browses, and its reply says distribution-mode copy', async function () {
    await send(tb.url, 'w.plain', [{ body: 'one' }]);
    const c = await connect(tb.url);
    try {
      const sub = await attachReceiver(c, { address: 'w.plain', filter: tmFilters({ command: 'subscribe', bookmark: '0' }) });
      expect(sub.source.distribution_mode).to.equal('copy');
      const plain = await attachReceiver(c, { address: 'w.plain' });
      expect(plain.source.distribution_mode).to.equal('move');
    } finally { await c.close(); }
  });

  it('3: a delta merged into a record published as application/json data keeps the data body', async function () {
    const q = createOnDemand('w.delta', { 'sow.key': '/id' });
    // rhea sends a Buffer body as one data section, as Proton does for bytes
    const record = { content_type: 'application/json', body: Buffer.from(JSON.stringify({ id: 1, a: 1 })) };
    const delta = { message_annotations: { 'x-opt-tm-op': 'delta' }, body: JSON.stringify({ id: 1, b: 2 }) };
    expect((await send(tb.url, q, [record, delta])).map((o) => o.state)).to.deep.equal(['accepted', 'accepted']);
    const m = await firstMessage(tb.url, { address: 'w.delta' });
    expect(m.body?.typecode, 'a data section, not an amqp-value map').to.equal(0x75);
    expect(JSON.parse(Buffer.from(m.body.content).toString('utf8'))).to.deep.equal({ id: 1, a: 1, b: 2 });
  });

  it('3: an unparseable body on a SOW queue is decode-error naming the queue and the key path', async function () {
    const [o] = await send(tb.url, createOnDemand('w.badbody', { 'sow.key': '/id' }), [{ body: 'not json' }]);
    expect(o.state).to.equal('rejected');
    expect(o.condition).to.equal('amqp:decode-error');
    expect(o.description).to.include('w.badbody').and.include('/id');
  });

  it('1: a SOW record with a TTL goes out with the ttl that remains', async function () {
    await send(tb.url, createOnDemand('w.ttl', { 'sow.key': '/id' }), [{ ttl: 60000, body: '{"id":1}' }]);
    clock.set(T0 + 3000);
    const plainReader = await firstMessage(tb.url, { address: 'w.ttl' });
    expect(plainReader.ttl).to.equal(57000);
    const c = await connect(tb.url);
    try {
      const rcv = await openReceiver(c, { address: 'w.ttl', filter: tmFilters({ command: 'sow' }) });
      const got = await collect(rcv, { credit: 10, idleMs: 2000, until: (m) => cmdOf(m) === 'group_end' });
      const rec = got.find((m) => cmdOf(m) === 'sow')!;
      expect(rec.message.ttl).to.equal(57000);
      expect(bodyJson(rec)).to.deep.equal({ id: 1 });
    } finally { await c.close(); }
  });

  it('4.2: a content filter alone on a plain queue annotates its messages; plain-queue markers carry the query id', async function () {
    await send(tb.url, 'w.cf', [{ body: '{"n":1}' }, { body: '{"n":5}' }]);
    const m = await firstMessage(tb.url, { address: 'w.cf', filter: tmFilters({ filter: '/n > 2' }) });
    expect(JSON.parse(m.body)).to.deep.equal({ n: 5 });
    expect(String(m.message_annotations?.['x-opt-tm-cmd'])).to.equal('publish');
    expect(Number(m.message_annotations?.['x-opt-tm-scn'])).to.equal(2);
    const c = await connect(tb.url);
    try {
      const rcv = await openReceiver(c, { address: 'w.cf', filter: tmFilters({ command: 'sow_and_subscribe', options: { query_id: 'Q1' } }) });
      const markers = await collect(rcv, { count: 2, credit: 10, idleMs: 2000 });
      expect(markers.map(cmdOf)).to.deep.equal(['group_begin', 'group_end']);
      for (const x of markers) expect(x.message.message_annotations['x-opt-tm-query-id']).to.equal('Q1');
    } finally { await c.close(); }
  });

  it('4: a malformed order_by refuses the attach with invalid-field (not an internal error after group_begin)', async function () {
    await send(tb.url, createOnDemand('w.order', { 'sow.key': '/id' }), [{ body: '{"id":1,"p":2}' }]);
    const c = await connect(tb.url);
    try {
      for (const spec of ['p DESC', '/p SIDEWAYS', '/p DESC,']) {
        const res = await attachReceiver(c, { address: 'w.order', filter: tmFilters({ command: 'sow', options: { top_n: 2, order_by: spec } }) });
        expect(res.error?.condition, spec).to.equal('amqp:invalid-field');
        expect(res.error?.description, spec).to.match(/order_by/);
        expect(isNullTerminus(res.link.remote.attach?.source), spec).to.equal(true);
      }
    } finally { await c.close(); }
  });

  it('5: an SCN bookmark ahead of the head is refused (it would skip the events up to it)', async function () {
    await send(tb.url, createOnDemand('w.ahead', { 'sow.key': '/id' }), [{ body: '{"id":1}' }]);
    await send(tb.url, 'w.ahead.plain', [{ body: 'x' }]);
    const c = await connect(tb.url);
    try {
      for (const address of ['w.ahead', 'w.ahead.plain']) {
        const res = await attachReceiver(c, { address, filter: tmFilters({ command: 'subscribe', bookmark: '50' }) });
        expect(res.error?.condition, address).to.equal('amqp:invalid-field');
        expect(res.error?.description, address).to.match(/ahead.*SCN 1/);
      }
      const atHead = await attachReceiver(c, { address: 'w.ahead', filter: tmFilters({ command: 'subscribe', bookmark: '1' }) });
      expect(atHead.error).to.equal(undefined);
    } finally { await c.close(); }
  });

  it('7: DELETE deletes a queue that holds messages (204); if_empty / if_unused ask for the 409 checks', async function () {
    await send(tb.url, 'w.del', [{ body: 'a' }]);
    const c = await connect(tb.url);
    try {
      const mgmt = await openSender(c, { address: '$management' });
      const replies = await openReceiver(c, { dynamic: true });
      const call = async (name: string, body: unknown) => {
        const got = collect(replies, { count: 1, idleMs: 3000 });
        await sendAll(mgmt, [{ message_id: `d-${Math.random()}`, reply_to: replies.remote.attach.source.address, application_properties: { operation: 'DELETE', type: 'queue', name }, body }]);
        return (await got)[0].message.application_properties;
      };
      const refused = await call('w.del', { if_empty: true });
      expect(refused.statusCode).to.equal(409);
      expect(refused.statusDescription).to.match(/depth 1/);
      expect((await call('w.del', {})).statusCode).to.equal(204);
      expect(tb.broker.nodes.get('w.del')).to.equal(undefined);
    } finally { await c.close(); }
  });
});

describe('error info on the wire (wire.md 5: oldest-scn, requested-scn)', function () {
  it('is an AMQP fields map: symbol keys, SCNs as ulong', function () {
    const w = new amqpTypes.Writer();
    w.write(amqpInfo({ 'oldest-scn': 8, 'requested-scn': 0 }));
    const bytes: Buffer = w.toBuffer();
    const sym = (s: string) => Buffer.concat([Buffer.from([0xa3, s.length]), Buffer.from(s)]);
    expect(bytes.includes(sym('oldest-scn'))).to.equal(true);
    expect(bytes.includes(sym('requested-scn'))).to.equal(true);
    expect(bytes.includes(Buffer.concat([sym('oldest-scn'), Buffer.from([0x53, 8])])), 'oldest-scn as smallulong 8').to.equal(true);
    expect(bytes.includes(Buffer.concat([sym('requested-scn'), Buffer.from([0x44])])), 'requested-scn as ulong0').to.equal(true);
  });
  it('keeps that form inside the error a detach carries (rhea encoded the typed map a second time, as an object)', function () {
    applyRheaPatches();
    const w = new amqpTypes.Writer();
    w.write(amqpTypes.wrap_error({ condition: 'tidemark:scn-not-found', description: 'd', info: amqpInfo({ 'oldest-scn': 8, 'requested-scn': 0 }) }));
    const bytes: Buffer = w.toBuffer();
    const sym = (s: string) => Buffer.concat([Buffer.from([0xa3, s.length]), Buffer.from(s)]);
    expect(bytes.includes(Buffer.concat([sym('oldest-scn'), Buffer.from([0x53, 8])]))).to.equal(true);
    expect(bytes.includes(Buffer.from('toRheaTyped')), 'no Typed internals on the wire').to.equal(false);
  });
});
