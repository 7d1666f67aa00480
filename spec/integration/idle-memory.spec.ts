/** Giving memory back once idle after a burst (lib/core/idle-memory.ts, wired through server.ts onActivity). */
import { expect } from 'chai';
import { startTestBroker } from '../support/broker.js';
import { send } from '../support/client.js';
import { sowQuery } from '../support/sow-client.js';

const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));
async function waitFor(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  for (const t0 = Date.now(); !cond(); await sleep(10)) if (Date.now() - t0 > ms) throw new Error('timed out waiting for ' + what);
}
const q = { address: 'im.sow', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } };
const pad = 'p'.repeat(500);
const burst = (n: number, from = 0) => Array.from({ length: n }, (_, i) => ({ body: JSON.stringify({ id: `k${(from + i) % 300}`, i, pad }) }));

describe('giving memory back once idle', function () {
  this.timeout(30000);

  it('waits while any client is active, collects once after the burst, and again only after another burst', async () => {
    const tb = await startTestBroker({ memory: { idleMs: 300, afterMB: 0.5 } });
    try {
      const collections = () => tb.broker.idleMemoryStats?.collections ?? -1;
      await send(tb.url, q, burst(1500)); // ~1 MiB received
      // queries back to back for 1.2 s: the broker is in use, so no collection yet
      for (const t0 = Date.now(); Date.now() - t0 < 1200;) {
        expect((await sowQuery(tb.url, 'im.sow')).records).to.have.length(300);
        expect(collections(), 'no collection while a client is active').to.equal(0);
      }
      await waitFor(() => collections() === 1, 'a collection once quiet');
      await sleep(1000);
      expect(collections(), 'once per burst, not once per quiet period').to.equal(1);
      await send(tb.url, q, burst(1500, 7));
      await waitFor(() => collections() === 2, 'a collection after the second burst');
      // nothing was lost to it
      const rows = (await sowQuery(tb.url, 'im.sow')).records;
      expect(rows).to.have.length(300);
    } finally { await tb.stop(); }
  });

  it('a trickle below afterMB, or idleMs 0, never collects', async () => {
    const small = await startTestBroker({ memory: { idleMs: 200, afterMB: 64 } });
    const off = await startTestBroker({ memory: { idleMs: 0, afterMB: 0 } });
    try {
      await send(small.url, q, burst(300));
      await send(off.url, q, burst(1500));
      await sleep(1000);
      expect(small.broker.idleMemoryStats?.collections).to.equal(0);
      expect(off.broker.idleMemoryStats?.collections).to.equal(0);
    } finally { await small.stop(); await off.stop(); }
  });
});
