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
