/**
 * Durable subscriptions and settlement, as an outside audit (session 17) found them: a
 * subscription that outlived its non-durable queue and skipped the new queue's messages, a
 * refused attach that left a subscription behind, `modified` that moved the position past a
 * message, and a receiver in rcv-settle-mode `second` whose deliveries were never settled.
 * Each case fails on the code before its fix. Real broker, real rhea client.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, openSender, sendAll, collect, send, sleep, described, errorOf, type Received } from '../support/client.js';
import { tmFilters, cmdOf, keyOf } from '../support/sow-client.js';
import { listSubscriptions } from '../../lib/ext/checkpoints/index.js';

const durableSource = (address: string, extra: Record<string, unknown> = {}) => ({ address, durable: 2, expiry_policy: 'never', ...extra });
const browseOnly = (address: string, durable: boolean) => ({ address, capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.browse-only': true, durable } });

describe('durable subscriptions and settlement (audit, session 17)', function () {
  this.timeout(60000);
  let tb: TestBroker;
  afterEach(async () => { await tb?.stop(); });

  /** Reads with a durable receiver (container `cont`, link `sub`), settling each as `settle` says; detaches without closing. */
  async function readDurable(address: string, settle: (m: Received, i: number) => 'accept' | 'release' | 'modify' | 'none' = () => 'accept') {
    const c = await connect(tb.broker.urls[0], { container_id: 'cont' });
    try {
      const rcv = await openReceiver(c, durableSource(address), { name: 'sub' });
      let i = 0;
      const got = await collect(rcv, { idleMs: 600, credit: 50, settle: (m) => settle(m, i++) });
      await sleep(150);
      rcv.detach();
      await sleep(150);
      return got.map((m) => m.message.body);
    } finally { await c.close(); }
  }

  it('a subscription on a non-durable queue ends with the queue at a restart: the queue made again is read from its start', async function () {
    tb = await startTestBroker();
    await send(tb.url, browseOnly('nd.q', false), [1, 2, 3, 4, 5].map((n) => ({ body: `old${n}` })));
    expect(await readDurable('nd.q')).to.deep.equal(['old1', 'old2', 'old3', 'old4', 'old5']);
    expect(listSubscriptions(tb.broker).map((s) => [s.queue, s.position])).to.deep.equal([['nd.q', 5]]);
    await tb.restart();
    expect(tb.broker.nodes.get('nd.q'), 'a non-durable queue does not survive a restart').to.equal(undefined);
    expect(listSubscriptions(tb.broker)).to.deep.equal([]);
    await send(tb.broker.urls[0], browseOnly('nd.q', false), [1, 2, 3, 4, 5, 6, 7].map((n) => ({ body: `new${n}` })));
    expect(await readDurable('nd.q')).to.deep.equal(['new1', 'new2', 'new3', 'new4', 'new5', 'new6', 'new7']);
  });

  it('a durable attach the broker refuses leaves no subscription: the same link name then attaches elsewhere', async function () {
    tb = await startTestBroker();
    await send(tb.url, { address: 'rs.sow', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } }, [{ body: '{"id":"a"}' }]);
    await send(tb.url, browseOnly('rs.bo', true), [{ body: 'x' }]);
    const c = await connect(tb.url, { container_id: 'cont' });
    try {
      const err = await openReceiver(c, durableSource('rs.sow', { filter: tmFilters({ command: 'subscribe', bookmark: '999' }) }), { name: 'sub' }).then(() => undefined, (e) => e);
      expect(err?.condition).to.equal('amqp:invalid-field');
      expect(listSubscriptions(tb.broker)).to.deep.equal([]);
    } finally { await c.close(); }
    expect(await readDurable('rs.bo')).to.deep.equal(['x']);
  });

  it('modified (delivery-failed, not undeliverable-here) holds the position as released does: the message comes again', async function () {
    tb = await startTestBroker();
    await send(tb.url, browseOnly('md.q', true), [1, 2, 3, 4, 5].map((n) => ({ body: `m${n}` })));
    const first = await readDurable('md.q', (_m, i) => (i === 2 ? 'modify' : 'accept'));
    expect(first).to.deep.equal(['m1', 'm2', 'm3', 'm4', 'm5']);
    expect(listSubscriptions(tb.broker)[0].position).to.equal(2);
    expect(await readDurable('md.q')).to.deep.equal(['m3', 'm4', 'm5']);
  });

  it('a re-attach with other filters is precondition-failed naming both; the same filters (another bookmark) resume; a closed one starts anew', async function () {
    tb = await startTestBroker();
    const colors = ['red', 'blue', 'red', 'blue'];
    await send(tb.url, browseOnly('fc.q', true), colors.map((color, i) => ({ body: `${color}${i}`, application_properties: { color } })));
    const sel = (s: string) => ({ sel: described('apache.org:selector-filter:string', s) });
    const c = await connect(tb.url, { container_id: 'cont' });
    try {
      const r1 = await openReceiver(c, durableSource('fc.q', { filter: sel("color = 'red'") }), { name: 'sub' });
      const got = await collect(r1, { idleMs: 500, credit: 10 });
      expect(got.map((m) => m.message.body)).to.deep.equal(['red0', 'red2']);
      r1.detach(); await sleep(150);
      const err = await openReceiver(c, durableSource('fc.q', { filter: sel("color = 'blue'") }), { name: 'sub' }).then(() => undefined, (e) => e);
      expect(err?.condition).to.equal('amqp:precondition-failed');
      expect(err?.message).to.include("color = 'red'").and.to.include("color = 'blue'").and.to.match(/closed=true|SUBSCRIPTION-DELETE/);
      await send(tb.url, 'fc.q', [{ body: 'red4', application_properties: { color: 'red' } }]);
      const r2 = await openReceiver(c, durableSource('fc.q', { filter: { ...sel("color = 'red'"), bm: described('tidemark:bookmark:string', '0') } }), { name: 'sub' });
      // (from the position, not the bookmark; a bookmark's replay ends with `completed`, session 22)
      expect((await collect(r2, { idleMs: 500, credit: 10 })).map((m) => [m.message.body, cmdOf(m)])).to.deep.equal([['red4', 'publish'], [null, 'completed']]);
      r2.close(); await sleep(150);
      const r3 = await openReceiver(c, durableSource('fc.q', { filter: sel("color = 'blue'") }), { name: 'sub' });
      expect((await collect(r3, { idleMs: 500, credit: 10 })).map((m) => m.message.body)).to.deep.equal(['blue1', 'blue3']);
    } finally { await c.close(); }
  });

  it('SUBSCRIPTION-DELETE of an attached subscription detaches its link with resource-deleted', async function () {
    tb = await startTestBroker();
    await send(tb.url, browseOnly('sd.q', true), [{ body: 'm1' }]);
    const c = await connect(tb.url, { container_id: 'cont' });
    try {
      const rcv = await openReceiver(c, durableSource('sd.q'), { name: 'sub' });
      expect((await collect(rcv, { count: 1, credit: 10, idleMs: 1000 })).map((m) => m.message.body)).to.deep.equal(['m1']);
      const detached = new Promise<{ condition?: string; description?: string }>((resolve) => rcv.once('receiver_close', () => resolve(errorOf(rcv.remote?.detach?.error ?? rcv.error))));
      const replies = await openReceiver(c, { dynamic: true });
      const mgmt = await openSender(c, { address: '$management' });
      const reply = collect(replies, { count: 1, idleMs: 2000 });
      await sendAll(mgmt, [{ message_id: 'del-1', reply_to: replies.remote.attach.source.address, application_properties: { operation: 'SUBSCRIPTION-DELETE', type: 'queue' }, body: { container: 'cont', link: 'sub' } }]);
      expect((await reply)[0]?.message.application_properties.statusCode).to.equal(204);
      const err = await detached;
      expect(err.condition).to.equal('amqp:resource-deleted');
      expect(err.description).to.match(/cont\/sub.*deleted/);
      expect(listSubscriptions(tb.broker)).to.deep.equal([]);
    } finally { await c.close(); }
  });

  it('a durable sow_and_subscribe with oof resumes with a new snapshot (what it delivered is not kept): a record that left focus is not in it', async function () {
    tb = await startTestBroker();
    const sowq = { address: 'oo.q', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } };
    await send(tb.url, sowq, ['a', 'b', 'c'].map((id, v) => ({ body: JSON.stringify({ id, v }) })));
    const source = durableSource('oo.q', { filter: tmFilters({ command: 'sow_and_subscribe', filter: '/v < 10', options: { oof: true } }) });
    const c = await connect(tb.url, { container_id: 'cont' });
    try {
      const r1 = await openReceiver(c, source, { name: 'sub' });
      const first = await collect(r1, { idleMs: 500, credit: 20 });
      expect(first.map((m) => [cmdOf(m), keyOf(m)]).filter(([cmd]) => cmd === 'sow')).to.deep.equal([['sow', 'a'], ['sow', 'b'], ['sow', 'c']]);
      r1.detach(); await sleep(150);
      await send(tb.url, 'oo.q', [{ body: JSON.stringify({ id: 'a', v: 100 }) }, { body: JSON.stringify({ id: 'd', v: 3 }) }]);
      const r2 = await openReceiver(c, source, { name: 'sub' });
      const resumed = await collect(r2, { idleMs: 500, credit: 20 });
      expect(resumed.map((m) => [cmdOf(m), cmdOf(m) === 'sow' ? keyOf(m) : ''])).to.deep.equal([['group_begin', ''], ['sow', 'b'], ['sow', 'c'], ['sow', 'd'], ['group_end', '']]);
    } finally { await c.close(); }
  });

  it('a container-id holding NUL cannot name a durable subscription (it would share one with another pair)', async function () {
    tb = await startTestBroker();
    await send(tb.url, browseOnly('nul.q', true), [{ body: 'x' }]);
    const c = await connect(tb.url, { container_id: 'cA\u0000x' });
    try {
      const err = await openReceiver(c, durableSource('nul.q'), { name: 'y' }).then(() => undefined, (e) => e);
      expect(err?.condition).to.equal('amqp:invalid-field');
      expect(err?.message).to.match(/NUL/);
      expect(listSubscriptions(tb.broker)).to.deep.equal([]);
    } finally { await c.close(); }
  });

  it('a receiver in rcv-settle-mode second gets every message: the broker settles each delivery after its outcome', async function () {
    tb = await startTestBroker({ limits: { maxUnsettledPerLink: 3 } });
    await send(tb.url, 'second.q', Array.from({ length: 10 }, (_, i) => ({ body: i })));
    const c = await connect(tb.url);
    try {
      const rcv = await openReceiver(c, { address: 'second.q' }, { rcv_settle_mode: 1 });
      const bodies: number[] = [];
      let settledByBroker = 0;
      rcv.on('settled', () => { settledByBroker++; });
      rcv.on('message', (ctx: any) => { bodies.push(ctx.message.body); ctx.delivery.accept(); });
      rcv.add_credit(10);
      for (let i = 0; i < 40 && (bodies.length < 10 || settledByBroker < 10); i++) await sleep(50);
      expect(bodies).to.deep.equal([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
      expect(settledByBroker).to.equal(10);
    } finally { await c.close(); }
    expect(tb.broker.nodes.get('second.q')!.structure.stats().depth, 'accepted ones are gone').to.equal(0);
  });
});
