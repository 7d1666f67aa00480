/**
 * Issue #5: "Snapshots stream from a LevelDB snapshot/iterator under AMQP credit: a large SOW
 * query to a slow consumer holds bounded memory"; issue #6: "Replays stream under credit with
 * bounded memory." The broker runs in this process, so its heap is ours to measure (after a
 * forced GC): a query or a replay whose consumer grants 5 credits must not pull 100k records
 * or events (~30 MB of bytes and objects) into memory.
 */
import { expect } from 'chai';
import v8 from 'node:v8';
import vm from 'node:vm';
import { useBroker } from '../support/broker.js';
import { connect, openReceiver, send, sleep, type Received } from '../support/client.js';
import { tmFilters, cmdOf, keyOf, scnOf } from '../support/sow-client.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;
const heapMb = () => { gc(); gc(); return process.memoryUsage().heapUsed / 1e6; };

describe('SOW query and replay to a slow consumer (bounded memory)', function () {
  this.timeout(120000);
  const b = useBroker();

  const N = 100000;
  before(async function () {
    const pad = 'x'.repeat(200);
    const q = { address: 'mem.sow', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } };
    const outcomes = await send(b.get().url, q, Array.from({ length: N }, (_, i) => ({ body: JSON.stringify({ id: `k${String(i).padStart(6, '0')}`, pad }) })));
    expect(outcomes.filter((o) => o.state === 'accepted')).to.have.length(N);
  });

  /**
   * Attaches with `filter`, grants 5 credits, waits, measures the broker heap growth, then
   * grants credit until the `last` marker arrives. Returns how many data messages (command
   * `data`) came on the 5 credits, the heap growth meanwhile, whether `last` arrived, and
   * every data message as its `pick` value.
   */
  async function slowConsumer(filter: Record<string, unknown>, data: string, last: string, pick: (m: Received) => string | number) {
    const before = heapMb();
    const c = await connect(b.get().url);
    try {
      const rcv = await openReceiver(c, { address: 'mem.sow', filter });
      const values: Array<string | number> = [];
      let end = false;
      rcv.on('message', (ctx: any) => {
        const m = { message: ctx.message, delivery: ctx.delivery };
        if (cmdOf(m) === data) values.push(pick(m));
        if (cmdOf(m) === last) end = true;
        ctx.delivery.accept();
      });
      rcv.add_credit(5);
      await sleep(800);
      const early = values.length;
      const held = heapMb() - before;
      // The rest streams as credit arrives.
      for (let i = 0; i < 2000 && !end; i++) { if (rcv.credit < 500) rcv.add_credit(1000 - rcv.credit); await sleep(5); }
      return { early, held, end, values };
    } finally { await c.close(); }
  }

  it('a 100k-record sow query with 5 credits holds a bounded read-ahead, then streams the rest in key order', async function () {
    const r = await slowConsumer(tmFilters({ command: 'sow' }), 'sow', 'group_end', keyOf);
    // group_begin + 4 records: the broker honours the credit, and has not read the snapshot ahead of it.
    expect(r.early).to.equal(4);
    expect(r.held, `heap grew ${r.held.toFixed(1)} MB while the consumer held 5 credits`).to.be.lessThan(8);
    expect(r.end, 'group_end arrived').to.equal(true);
    expect(r.values).to.have.length(N);
    expect(r.values.every((k, i) => i === 0 || r.values[i - 1] < k)).to.equal(true);
  });

  it('a replay of 100k events (subscribe from bookmark 0) with 5 credits holds a bounded read-ahead, then streams the rest in SCN order', async function () {
    const r = await slowConsumer(tmFilters({ command: 'subscribe', bookmark: '0' }), 'publish', 'completed', scnOf);
    expect(r.early).to.equal(5);
    expect(r.held, `heap grew ${r.held.toFixed(1)} MB while the consumer held 5 credits`).to.be.lessThan(8);
    expect(r.end, 'completed arrived').to.equal(true);
    expect(r.values).to.have.length(N);
    expect(r.values.every((s, i) => s === i + 1)).to.equal(true);
  });
});
