import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, collect, send, sleep } from '../support/client.js';
import { cmdOf, scnOf, keyOf } from '../support/sow-client.js';
import { listSubscriptions } from '../../lib/ext/checkpoints/index.js';

// wire.md 6: a durable receiver (durable = 2, expiry-policy never) keeps its position under
// (container-id, link name), across re-attach and broker restarts; detach closed=true ends it.
describe('durable subscriptions (wire.md 6, acceptance D3)', function () {
  this.timeout(60000);
  let tb: TestBroker;
  beforeEach(async () => { tb = await startTestBroker(); });
  afterEach(async () => { await tb.stop(); });

  const durableSource = (address: string) => ({ address, durable: 2, expiry_policy: 'never' });

  async function readDurable(url: string, address: string, opts: { count?: number; detachClosed?: boolean; settleFirst?: number } = {}) {
    const c = await connect(url, { container_id: 'durable-client' });
    const rcv = await openReceiver(c, durableSource(address), { name: 'sub-1' });
    let n = 0;
    const got = await collect(rcv, { count: opts.count, idleMs: 700, credit: 50, settle: () => (opts.settleFirst !== undefined && ++n > opts.settleFirst ? 'none' : 'accept') });
    await sleep(100);
    if (opts.detachClosed) { rcv.close(); await sleep(200); } else { rcv.detach(); await sleep(200); }
    await c.close();
    return got;
  }

  it('on a browse-only queue: resumes after the last accepted delivery, across a restart', async function () {
    await send(tb.url, { address: 'd.browse', capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.browse-only': true } }, Array.from({ length: 10 }, (_, i) => ({ body: i })));
    const first = await readDurable(tb.url, 'd.browse', { count: 6, settleFirst: 4 });
    expect(first.map((m) => m.message.body)).to.deep.equal([0, 1, 2, 3, 4, 5]);
    await tb.restart();
    const url = tb.broker.urls[0];
    const second = await readDurable(url, 'd.browse');
    // 0-3 accepted; 4 and 5 were delivered but not accepted, so they come again
    expect(second.map((m) => m.message.body)).to.deep.equal([4, 5, 6, 7, 8, 9]);
    await send(url, 'd.browse', [{ body: 10 }]);
    const third = await readDurable(url, 'd.browse', { detachClosed: true });
    expect(third.map((m) => m.message.body)).to.deep.equal([10]);
    // closed=true ended the subscription: a new one starts from the beginning
    const fresh = await readDurable(url, 'd.browse');
    expect(fresh).to.have.length(11);
  });

  it('on a SOW queue: the first attach gets the snapshot, a re-attach only what changed since', async function () {
    const q = { address: 'd.sow', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } };
    await send(tb.url, q, [{ body: JSON.stringify({ id: 'a', v: 1 }) }, { body: JSON.stringify({ id: 'b', v: 1 }) }]);
    const first = await readDurable(tb.url, 'd.sow');
    expect(first.map((m) => keyOf(m))).to.deep.equal(['a', 'b']);
    await send(tb.url, 'd.sow', [{ body: JSON.stringify({ id: 'a', v: 2 }) }]);
    await tb.restart();
    const second = await readDurable(tb.broker.urls[0], 'd.sow');
    expect(second.map((m) => [cmdOf(m), keyOf(m), scnOf(m)])).to.deep.equal([['publish', 'a', 3]]);
  });

  it('is kept with its queue and accepted position', async function () {
    await send(tb.url, { address: 'd.mgmt', capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.browse-only': true } }, [{ body: 1 }]);
    await readDurable(tb.url, 'd.mgmt');
    const subs = listSubscriptions(tb.broker);
    expect(subs.map((s) => [s.container, s.link, s.queue, s.position])).to.deep.equal([['durable-client', 'sub-1', 'd.mgmt', 1]]);
  });
});

describe('durable subscriptions across kill -9 (issue 7)', function () {
  this.timeout(60000);
  it('a browse-only durable subscriber resumes after its last accepted delivery when the broker was killed', async function () {
    const { spawnBroker, tempDir } = await import('../support/broker.js');
    const path = await import('node:path');
    const { rmSync } = await import('node:fs');
    const dir = tempDir();
    try {
      const data = path.join(dir, 'data');
      const b1 = await spawnBroker(['--port', '0', '--data', data]);
      await send(b1.url, { address: 'dk.q', capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.browse-only': true } }, Array.from({ length: 10 }, (_, i) => ({ body: i })));
      const c = await connect(b1.url, { container_id: 'survivor' });
      const rcv = await openReceiver(c, { address: 'dk.q', durable: 2, expiry_policy: 'never' }, { name: 'sub' });
      const first = await collect(rcv, { count: 5, credit: 5 });
      expect(first.map((m) => m.message.body)).to.deep.equal([0, 1, 2, 3, 4]);
      await sleep(300); // the accepted position is written with the next group commit
      await b1.kill('SIGKILL');
      await c.close().catch(() => undefined);
      const b2 = await spawnBroker(['--port', '0', '--data', data]);
      try {
        const c2 = await connect(b2.url, { container_id: 'survivor' });
        const r2 = await openReceiver(c2, { address: 'dk.q', durable: 2, expiry_policy: 'never' }, { name: 'sub' });
        const rest = await collect(r2, { idleMs: 700 });
        expect(rest.map((m) => m.message.body)).to.deep.equal([5, 6, 7, 8, 9]);
        await c2.close();
      } finally { await b2.kill('SIGTERM'); }
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });
});
