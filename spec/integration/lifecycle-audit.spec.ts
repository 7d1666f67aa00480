/**
 * Queue lifecycle and plain-queue storage, found by a code review in session 22
 * (docs/robustness.md section 13): a queue re-created while its namesake's delete runs, SCNs
 * after messages expired while the broker was down, consumers kept by the messages they refused.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { metaKey } from '../../lib/core/storage/keyspace.js';
import { connect, openSender, openReceiver, sendAll, collect, receive, sleep, send, type Received } from '../support/client.js';

// docs/decisions.md "Management DELETE": "a later attach to the name creates a new queue, as any
// attach would". Messages accepted on that new queue must survive a restart (invariant 1).
// NodeRegistry.delete awaits committer.idle() and only then deletes meta/<name> directly:
// a queue re-created under the name meanwhile has its definition (written through the
// committer, which idle() waits for) deleted by the old queue's delete.
describe('lifecycle (session 22 review): queue deleted and re-created by an attach while the delete runs', function () {
  this.timeout(60000);
  let tb: TestBroker;
  before(async () => { tb = await startTestBroker(); });
  after(async () => { await tb?.stop(); });

  it('messages accepted on the re-created queue survive a restart', async function () {
    await send1(tb.url, 'race.q', ['old-1', 'old-2']);
    // background publisher keeps the committer busy so committer.idle() does not resolve at once
    const bg = await connect(tb.url);
    const bgs = await openSender(bg, { address: 'race.bg' });
    const bgDone = sendAll(bgs, Array.from({ length: 3000 }, (_, i) => ({ body: `bg${i}`, durable: true })));
    await sleep(30);

    const c = await connect(tb.url);
    const mgmt = await openSender(c, { address: '$management' });
    const replies = await openReceiver(c, { dynamic: true });
    const reply = collect(replies, { count: 1, idleMs: 10000 });
    // DELETE, and straight after it an attach to the same name (auto-create) and a publish.
    await sendAll(mgmt, [{ message_id: 'd1', reply_to: replies.remote.attach.source.address, application_properties: { operation: 'DELETE', type: 'queue', name: 'race.q' }, body: {} }]).catch(() => undefined);
    const c2 = await connect(tb.url);
    const s = await openSender(c2, { address: 'race.q' });
    const outcomes = await sendAll(s, [{ body: 'new-1', durable: true }, { body: 'new-2', durable: true }]);
    expect(outcomes.map((o) => o.state)).to.deep.equal(['accepted', 'accepted']);
    const r = await reply;
    expect(r[0].message.application_properties.statusCode).to.equal(204);
    await bgDone;
    await bg.close(); await c.close(); await c2.close();
    // before restart the new queue holds the two accepted messages
    expect(tb.broker.nodes.get('race.q')?.structure.stats().depth).to.equal(2);

    const metaRow = await tb.broker.store.get(metaKey('race.q'));
    await tb.restart();
    const got = await receive(tb.broker.urls[0], 'race.q', { idleMs: 500 });
    expect(got.map((m) => m.message.body), 'accepted messages of the re-created queue after restart').to.deep.equal(['new-1', 'new-2']);
  });
});

async function send1(url: string, address: string, bodies: string[]) {
  const c = await connect(url);
  try { const s = await openSender(c, { address }); await sendAll(s, bodies.map((b) => ({ body: b, durable: true }))); } finally { await c.close(); }
}

// keyspace.ts: the head row exists "so SCNs are never reused"; semantics.md 1: durable
// messages survive restart "with their SCNs". ListStructure.recover() deletes messages that
// expired while the broker was down (quiet deletes) but writes no head row, so after the next
// restart the queue's head SCN falls back to the highest SCN left in the log (0 here) and the
// same SCNs are given again. A durable subscription on a browse-only queue (position = SCN)
// then skips the new messages.
const durableSource = (address: string) => ({ address, durable: 2, expiry_policy: 'never' });
const browseOnly = (address: string) => ({ address, capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.browse-only': true, durable: true } });

describe('lifecycle (session 22 review): SCNs after messages expired while the broker was down', function () {
  this.timeout(60000);
  let tb: TestBroker;
  after(async () => { await tb?.stop(); });

  async function readDurable(): Promise<Received[]> {
    const c = await connect(tb.broker.urls[0], { container_id: 'contF' });
    try {
      const rcv = await openReceiver(c, durableSource('exp.q'), { name: 'subF' });
      const got = await collect(rcv, { idleMs: 600, credit: 50 });
      await sleep(150);
      rcv.detach();
      await sleep(150);
      return got;
    } finally { await c.close(); }
  }

  it('a durable subscriber gets the messages published after two restarts', async function () {
    tb = await startTestBroker();
    await send(tb.url, browseOnly('exp.q'), [1, 2, 3].map((n) => ({ body: `old${n}`, durable: true, ttl: 1500 })));
    const first = await readDurable();
    expect(first.map((m) => m.message.body)).to.deep.equal(['old1', 'old2', 'old3']);
    const oldScns = first.map((m) => m.message.message_annotations?.['x-opt-tm-scn']);
    await tb.broker.stop();
    await sleep(1800); // the messages expire while the broker is down
    await tb.restart().catch(() => undefined); // restart() stops (already stopped: no-op) and starts
    await tb.restart(); // a second restart, after recovery deleted the expired rows
    await send(tb.broker.urls[0], 'exp.q', [1, 2, 3].map((n) => ({ body: `new${n}`, durable: true })));
    const q = tb.broker.nodes.get('exp.q')!;
    const second = await readDurable();
    expect(q.committedScn, 'SCNs are never reused').to.equal(6);
    expect(second.map((m) => m.message.body)).to.deep.equal(['new1', 'new2', 'new3']);
  });
});

// A consumer answering `modified` with undeliverable-here is added to the entry's `excluded`
// set (list-structure.ts ListConsumer.#settled). Nothing removes it when the consumer closes
// (ListConsumer.close / ListStructure.detach), so a message every consumer refuses that way
// (a "poison" message) keeps every closed consumer, with its sink, rhea link, session and
// connection objects, for as long as the message stays: memory that grows with link churn.

describe('lifecycle (session 22 review): closed consumers kept by a message they refused as undeliverable-here', function () {
  this.timeout(90000);
  let tb: TestBroker;
  before(async () => { tb = await startTestBroker(); });
  after(async () => { await tb?.stop(); });

  async function cycle(): Promise<void> {
    const c = await connect(tb.url);
    const rcv = await openReceiver(c, { address: 'poison.q' });
    await new Promise<void>((res) => {
      rcv.once('message', (ctx: any) => { ctx.delivery.modified({ undeliverable_here: true }); res(); });
      rcv.add_credit(1);
    });
    await sleep(5);
    await c.close();
  }

  it('does not keep closed consumers (and their connections) alive', async function () {
    await send(tb.url, 'poison.q', [{ body: 'poison', durable: true }]);
    const N = 40;
    for (let i = 0; i < N; i++) await cycle();
    await sleep(100);
    const structure = tb.broker.nodes.get('poison.q')!.structure as any;
    const entry = [...structure.list.live()][0];
    const kept = entry.excluded?.size ?? 0;
    expect(kept, 'closed consumers still referenced by the entry').to.be.at.most(structure.consumerCount);
  });
});
