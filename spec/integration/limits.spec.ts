import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openReceiver, send, sleep } from '../support/client.js';

// issue 8 "Limits": max unsettled per link is enforced: a receiver that does not settle
// gets no more than the limit, whatever its credit, and more as it settles.
describe('limits: max unsettled deliveries per link', function () {
  const b = useBroker({ limits: { maxUnsettledPerLink: 3 } });

  it('stops at the limit and resumes as deliveries are settled', async function () {
    const url = b.get().url;
    await send(url, 'lim.q', Array.from({ length: 10 }, (_, i) => ({ body: i })));
    const c = await connect(url);
    try {
      const rcv = await openReceiver(c, { address: 'lim.q' });
      const got: any[] = [];
      rcv.on('message', (ctx: any) => got.push(ctx.delivery));
      rcv.add_credit(10);
      await sleep(400);
      expect(got).to.have.length(3);
      got[0].accept(); got[1].accept();
      await sleep(400);
      expect(got).to.have.length(5);
      for (const d of got.slice(2)) d.accept();
      await sleep(400);
      expect(got).to.have.length(8);
    } finally { await c.close(); }
  });
});

describe('limits: announced on open and attach (wire.md 1)', function () {
  const b = useBroker({ limits: { maxMessageSize: 4096, maxFrameSize: 65536 } });
  it('max-frame-size on open, max-message-size on both attach replies; a larger message is rejected', async function () {
    const url = b.get().url;
    const c = await connect(url);
    try {
      expect(Number(c.connection.remote.open.max_frame_size)).to.equal(65536);
      expect(c.connection.remote.open.properties?.product).to.equal('tidemark');
      const { openSender, sendAll } = await import('../support/client.js');
      const s = await openSender(c, { address: 'lim.size' });
      expect(Number(s.remote.attach.max_message_size)).to.equal(4096);
      const r = await openReceiver(c, { address: 'lim.size' });
      expect(Number(r.remote.attach.max_message_size)).to.equal(4096);
      const out = await sendAll(s, [{ body: 'x'.repeat(5000) }, { body: 'small' }]);
      expect(out.map((o) => o.state)).to.deep.equal(['rejected', 'accepted']);
      expect(out[0].condition).to.equal('amqp:resource-limit-exceeded');
    } finally { await c.close(); }
  });
});

// A full ring drops one entry per message, also within one batch: every message of a batch
// used to drop again what earlier ones in the batch had dropped (their removal waits for the
// batch to be durable), so a batch of n wrote ~n²/2 deletes (2000 messages: 3.3 s against 0.2).
describe('limits: a full ring queue within one batch', function () {
  const b = useBroker();

  it('writes one delete per dropped message, keeps the newest N, and the queue reads right after', async function () {
    const tb = b.get();
    const decl = { address: 'lim.ring', capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'qpid.max_count': 5, 'qpid.policy_type': 'ring', 'qpid.browse-only': true } };
    await send(tb.url, decl, Array.from({ length: 5 }, (_, i) => ({ body: `m${i}` })));
    let deletes = 0;
    const before = tb.broker.committer.onWritten;
    tb.broker.committer.onWritten = (ops) => { for (const op of ops) if (op.type === 'del') deletes++; before?.(ops); };
    try {
      const out = await send(tb.url, 'lim.ring', Array.from({ length: 400 }, (_, i) => ({ body: `n${i}` })));
      expect(out.every((o) => o.state === 'accepted')).to.equal(true);
    } finally { tb.broker.committer.onWritten = before; }
    expect(deletes, 'one delete per dropped message').to.equal(400);
    expect(tb.broker.queueInfo(tb.broker.nodes.get('lim.ring')!).depth).to.equal(5);
    const c = await connect(tb.url);
    try {
      const rcv = await openReceiver(c, { address: 'lim.ring' });
      const got: string[] = [];
      rcv.on('message', (ctx: any) => got.push(ctx.message.body));
      rcv.add_credit(10);
      for (let i = 0; i < 40 && got.length < 5; i++) await sleep(50);
      expect(got).to.deep.equal(['n395', 'n396', 'n397', 'n398', 'n399']);
    } finally { await c.close(); }
  });
});
