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
import { connect, openReceiver, send, sleep } from '../support/client.js';
import { tmFilters, cmdOf, keyOf } from '../support/sow-client.js';

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

  it('a 100k-record sow query with 5 credits holds a bounded read-ahead, then streams the rest in key order', async function () {
    const url = b.get().url;
    const before = heapMb();
    const c = await connect(url);
    try {
      const rcv = await openReceiver(c, { address: 'mem.sow', filter: tmFilters({ command: 'sow' }) });
      const got: string[] = [];
      let end = false;
      rcv.on('message', (ctx: any) => {
        const cmd = cmdOf({ message: ctx.message, delivery: ctx.delivery });
        if (cmd === 'sow') got.push(keyOf({ message: ctx.message, delivery: ctx.delivery }));
        if (cmd === 'group_end') end = true;
        ctx.delivery.accept();
      });
      rcv.add_credit(5);
      await sleep(800);
      // group_begin + 4 records: the broker honours the credit…
      expect(got).to.have.length(4);
      // …and has not read the snapshot ahead of it.
      const held = heapMb() - before;
      expect(held, `heap grew ${held.toFixed(1)} MB while the consumer held 5 credits`).to.be.lessThan(8);
      // The rest streams as credit arrives, in key order, nothing lost.
      for (let i = 0; i < 2000 && !end; i++) { if (rcv.credit < 500) rcv.add_credit(1000 - rcv.credit); await sleep(5); }
      expect(end, 'group_end arrived').to.equal(true);
      expect(got).to.have.length(N);
      expect(got.every((k, i) => i === 0 || got[i - 1] < k)).to.equal(true);
    } finally { await c.close(); }
  });

  it('a replay of 100k events (subscribe from bookmark 0) with 5 credits holds a bounded read-ahead, then streams the rest in SCN order', async function () {
    const url = b.get().url;
    const before = heapMb();
    const c = await connect(url);
    try {
      const rcv = await openReceiver(c, { address: 'mem.sow', filter: tmFilters({ command: 'subscribe', bookmark: '0' }) });
      const scns: number[] = [];
      let completed = false;
      rcv.on('message', (ctx: any) => {
        const m = { message: ctx.message, delivery: ctx.delivery };
        if (cmdOf(m) === 'publish') scns.push(Number(ctx.message.message_annotations['x-opt-tm-scn']));
        if (cmdOf(m) === 'completed') completed = true;
        ctx.delivery.accept();
      });
      rcv.add_credit(5);
      await sleep(800);
      expect(scns).to.have.length(5);
      const held = heapMb() - before;
      expect(held, `heap grew ${held.toFixed(1)} MB while the consumer held 5 credits`).to.be.lessThan(8);
      for (let i = 0; i < 2000 && !completed; i++) { if (rcv.credit < 500) rcv.add_credit(1000 - rcv.credit); await sleep(5); }
      expect(completed, 'completed arrived').to.equal(true);
      expect(scns).to.have.length(N);
      expect(scns.every((s, i) => s === i + 1)).to.equal(true);
    } finally { await c.close(); }
  });
});
