/**
 * log.max_count and log.retention on a queue without SOW (wire.md 2.3, 6): the log of a plain
 * queue is its messages, so the bounds drop the oldest; a reader whose position is older has
 * fallen off. (They used to be accepted and ignored.)
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, collect, openReceiver, send, sleep } from '../support/client.js';
import { tmFilters, cmdOf, scnOf } from '../support/sow-client.js';
import { ManualClock } from '../../lib/index.js';

const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);
const declare = (address: string, args: Record<string, unknown>) => ({ address, capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: args });

describe('log bounds on plain queues', function () {
  this.timeout(30000);
  let clock: ManualClock;
  let tb: TestBroker;
  beforeEach(async () => { clock = new ManualClock(T0); tb = await startTestBroker({}, { clock }); });
  afterEach(async () => { await tb.stop(); });

  it('log.max_count keeps the newest N; an older bookmark has fallen off (scn-not-found in fail mode)', async function () {
    const out = await send(tb.url, declare('pl.count', { 'qpid.browse-only': true, 'log.max_count': 3 }), [1, 2, 3, 4, 5].map((i) => ({ body: `m${i}` })));
    expect(out.map((o) => o.state)).to.deep.equal(Array(5).fill('accepted'));
    const info = tb.broker.queueInfo(tb.broker.nodes.get('pl.count')!);
    expect(info.depth).to.equal(3);
    const c = await connect(tb.url);
    try {
      const browse = await openReceiver(c, { address: 'pl.count' });
      expect((await collect(browse, { count: 3, credit: 10, idleMs: 1000 })).map((m) => m.message.body)).to.deep.equal(['m3', 'm4', 'm5']);
      const replay = await openReceiver(c, { address: 'pl.count', filter: tmFilters({ command: 'subscribe', bookmark: '0' }) });
      const got = await collect(replay, { credit: 10, idleMs: 1000, until: (m) => cmdOf(m) === 'completed' });
      expect(got.filter((m) => cmdOf(m) === 'publish').map(scnOf)).to.deep.equal([3, 4, 5]);
      const err = await openReceiver(c, { address: 'pl.count', filter: tmFilters({ command: 'subscribe', bookmark: '1', options: { bookmark_not_found: 'fail' } }) }).then(() => undefined, (e) => e);
      expect(err?.condition).to.equal('tidemark:scn-not-found');
    } finally { await c.close(); }
  });

  it('log.retention drops messages older than the duration', async function () {
    await send(tb.url, declare('pl.age', { 'qpid.browse-only': true, 'log.retention': '10s' }), [{ body: 'old1' }, { body: 'old2' }]);
    clock.set(T0 + 8000);
    await send(tb.url, 'pl.age', [{ body: 'new' }]);
    clock.set(T0 + 15000);
    const q = tb.broker.nodes.get('pl.age')!;
    for (let i = 0; i < 50 && (tb.broker.queueInfo(q).depth as number) > 1; i++) await sleep(100); // the trim runs every second
    expect(tb.broker.queueInfo(q).depth).to.equal(1);
    const c = await connect(tb.url);
    try {
      const browse = await openReceiver(c, { address: 'pl.age' });
      expect((await collect(browse, { credit: 10, idleMs: 500 })).map((m) => m.message.body)).to.deep.equal(['new']);
    } finally { await c.close(); }
  });
});
