/**
 * Large messages, as an outside audit (session 17) found them: deltas, each within
 * limits.maxMessageSize, merged a SOW record far past it (8.5 MB under a 1 MiB limit), which
 * the broker then sent on links that announce the limit. Fails on the code before the fix.
 * Real broker, real rhea client.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, collect, send, errorOf } from '../support/client.js';
import { tmFilters, cmdOf } from '../support/sow-client.js';

describe('large messages (audit, session 17)', function () {
  this.timeout(30000);
  let tb: TestBroker;
  beforeEach(async () => { tb = await startTestBroker({ limits: { maxMessageSize: 4096 } }); });
  afterEach(async () => { await tb.stop(); });

  const delta = (body: Record<string, unknown>) => ({ body: JSON.stringify(body), message_annotations: { 'x-opt-tm-op': 'delta' } });

  it('a delta that would merge a SOW record past limits.maxMessageSize is rejected with resource-limit-exceeded, and the record stays as it was', async function () {
    const q = { address: 'big.sow', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } };
    expect((await send(tb.url, q, [{ body: JSON.stringify({ id: 'a', f1: 'x'.repeat(2500) }) }]))[0].state).to.equal('accepted');
    const out = await send(tb.url, 'big.sow', [delta({ id: 'a', f2: 'y'.repeat(2500) }), delta({ id: 'a', small: 1 })]);
    expect(out.map((o) => o.state)).to.deep.equal(['rejected', 'accepted']);
    expect(out[0].condition).to.equal('amqp:resource-limit-exceeded');
    expect(out[0].description).to.match(/maxMessageSize \(4096\).*nothing was changed/);
    const c = await connect(tb.url);
    try {
      const rcv = await openReceiver(c, { address: 'big.sow', filter: tmFilters({ command: 'sow' }) });
      const got = (await collect(rcv, { credit: 10, idleMs: 800 })).filter((m) => cmdOf(m) === 'sow');
      expect(got).to.have.length(1);
      const rec = JSON.parse(Buffer.from(got[0].message.body.content ?? got[0].message.body).toString());
      expect(Object.keys(rec).sort()).to.deep.equal(['f1', 'id', 'small']);
    } finally { await c.close(); }
  });

  it('a message larger than the receiver\'s max-message-size is not sent: the link ends with message-size-exceeded and the message stays for another receiver', async function () {
    await send(tb.url, 'mms.q', [{ body: 'a'.repeat(100) }, { body: 'b'.repeat(3000) }, { body: 'c'.repeat(100) }]);
    const c = await connect(tb.url);
    try {
      const small = await openReceiver(c, { address: 'mms.q' }, { max_message_size: 1000 });
      const closed = new Promise<{ condition?: string; description?: string }>((resolve) => small.once('receiver_close', () => resolve(errorOf(small.remote?.detach?.error ?? small.error))));
      const got = await collect(small, { credit: 10, idleMs: 800 });
      expect(got.map((m) => m.message.body.length)).to.deep.equal([100]);
      const err = await closed;
      expect(err.condition).to.equal('amqp:link:message-size-exceeded');
      expect(err.description).to.match(/max-message-size \(1000\)/);
      const big = await openReceiver(c, { address: 'mms.q' });
      expect((await collect(big, { credit: 10, idleMs: 800 })).map((m) => m.message.body[0])).to.deep.equal(['b', 'c']);
    } finally { await c.close(); }
  });
});
