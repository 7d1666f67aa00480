/** Idle compaction wired into the broker (lib/core/storage/idle-compaction.ts, server.ts onActivity). */
import { expect } from 'chai';
import { startTestBroker } from '../support/broker.js';
import { send } from '../support/client.js';
import { sowQuery } from '../support/sow-client.js';

const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));
async function waitFor(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  for (const t0 = Date.now(); !cond(); await sleep(10)) if (Date.now() - t0 > ms) throw new Error('timed out waiting for ' + what);
}

describe('idle compaction in the broker', function () {
  this.timeout(30000);
  it('a client reading from the broker holds the pass back; once everyone is quiet it runs', async () => {
    const tb = await startTestBroker({ compaction: { idleMs: 300, afterMB: 0.5, maxMB: 512 } });
    try {
      const q = { address: 'ic.sow', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } };
      const pad = 'p'.repeat(500);
      await send(tb.url, q, Array.from({ length: 1500 }, (_, i) => ({ body: JSON.stringify({ id: `k${i % 300}`, i, pad }) }))); // ~2 MiB of rows
      // queries back to back for 1.2 s: reads only, but the broker is in use
      for (const t0 = Date.now(); Date.now() - t0 < 1200;) {
        expect((await sowQuery(tb.url, 'ic.sow')).records).to.have.length(300);
        expect(tb.broker.compactionStats?.ranges, 'no compaction while a client reads').to.equal(0);
      }
      await waitFor(() => (tb.broker.compactionStats?.ranges ?? 0) > 0, 'a pass once quiet', 5000);
      expect((await sowQuery(tb.url, 'ic.sow')).records).to.have.length(300);
    } finally { await tb.stop(); }
  });
});
