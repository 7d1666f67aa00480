/**
 * Drain [AMQP 2.6.7] while the link's transfers are still on their way out. rhea takes a
 * delivery's credit only when its last frame is written, so a drain answered while a
 * multi-frame delivery waited on the client's session window gave that credit away: the
 * delivery was never finished and its message, with those behind it, stayed held by the
 * link until it detached (black-box audit, session 14).
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openReceiver, openSender, sendAll, sleep } from '../support/client.js';

describe('drain while transfers are in transit', function () {
  this.timeout(60000);
  const b = useBroker();

  it('a drain over large messages waiting on the session window delivers all its credit, and nothing stays held', async () => {
    const N = 40, CREDIT = 12;
    const c = await connect(b.get().url);
    // 512-byte frames: each 100 KB message is ~200 frames, and rhea's incoming window
    // (2048 frames) shuts after ~10 of them, mid-delivery.
    const rc = await connect(b.get().url, { max_frame_size: 512 });
    try {
      const s = await openSender(c, { address: 'drain-big', capabilities: ['create-on-demand', 'queue'] });
      const out = await sendAll(s, Array.from({ length: N }, (_, i) => ({ message_id: i, body: 'B'.repeat(100_000) })));
      expect(out.filter((o) => o.state === 'accepted')).to.have.length(N);
      const r = await openReceiver(rc, { address: 'drain-big' });
      const got: number[] = [];
      r.on('message', (ctx: any) => { got.push(ctx.message.message_id); ctx.delivery.accept(); });
      r.drain = true;
      r.add_credit(CREDIT);
      for (let i = 0; i < 100 && got.length < CREDIT; i++) await sleep(50);
      expect(got, 'the drained link gets its whole credit').to.deep.equal(Array.from({ length: CREDIT }, (_, i) => i));
      expect(r.credit).to.equal(0);
      // Every other message is there for another consumer, while the first link stays attached.
      const r2 = await openReceiver(c, { address: 'drain-big' });
      const other: number[] = [];
      r2.on('message', (ctx: any) => { other.push(ctx.message.message_id); ctx.delivery.accept(); });
      r2.add_credit(N);
      for (let i = 0; i < 100 && other.length < N - CREDIT; i++) await sleep(50);
      expect(other, 'the rest, none held by the drained link').to.deep.equal(Array.from({ length: N - CREDIT }, (_, i) => i + CREDIT));
    } finally { await rc.close(); await c.close(); }
  });

  it('a drain on an empty queue is answered at once, with the credit given back', async () => {
    const c = await connect(b.get().url);
    try {
      const s = await openSender(c, { address: 'drain-empty', capabilities: ['create-on-demand', 'queue'] });
      await sendAll(s, [{ body: 'only' }]);
      const r = await openReceiver(c, { address: 'drain-empty' });
      const got: string[] = [];
      r.on('message', (ctx: any) => { got.push(ctx.message.body); ctx.delivery.accept(); });
      const t0 = Date.now();
      const drained = new Promise<number>((res) => { r.once('receiver_drained', () => res(Date.now() - t0)); setTimeout(() => res(-1), 3000); });
      r.drain = true;
      r.add_credit(5);
      const ms = await drained;
      expect(got).to.deep.equal(['only']);
      expect(ms, 'receiver_drained after (ms)').to.be.within(0, 1000);
      expect(r.credit).to.equal(0);
    } finally { await c.close(); }
  });
});
