/**
 * Delivery guarantees on plain queues, as an outside audit (session 18) found them: a consumer
 * that detached while its session window held transfers back got them after the detach (on the
 * next link of its session, as its own, while other consumers got the same messages); the
 * deliveries a client left unsettled on links it detached filled the session's delivery buffer
 * until the session sent nothing more; a publisher's first-acquirer=true went out again on
 * redelivery. Each case fails on the code before its fix. Real broker; rhea and raw frames.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, openSender, sendAll, sleep } from '../support/client.js';
import { CoreTables } from '../../lib/core/storage/keyspace.js';
import { RawClient, AMQP_HEADER, open, begin, attach, flow, detach, source, t, type ParsedFrame } from '../support/amqp-frames.js';

describe('delivery guarantees on plain queues (audit, session 18)', function () {
  this.timeout(30000);
  let tb: TestBroker;
  afterEach(async () => { await tb?.stop(); });

  async function publish(address: string, bodies: unknown[]): Promise<void> {
    const c = await connect(tb.url);
    try { await sendAll(await openSender(c, address), bodies.map((body) => ({ body }))); } finally { await c.close(); }
  }

  /** Receives with a fresh connection and accepts everything. */
  async function consumeAll(address: string, credit = 100): Promise<unknown[]> {
    const c = await connect(tb.url);
    try {
      const r = await openReceiver(c, address);
      const got: unknown[] = [];
      r.on('message', (ctx: any) => { got.push(ctx.message.body); ctx.delivery.accept(); });
      r.add_credit(credit);
      await sleep(500);
      return got;
    } finally { await c.close(); }
  }

  /** A raw receiver on handle `handle` of session 0 (opened with `window`): attach and credit. */
  function rawReceiver(handle: number, name: string, address: string, credit: number, window: number): Buffer[] {
    return [
      attach({ name: t.str(name), handle: t.uint(handle), role: t.bool(true), source: source({ address: t.str(address) }), target: null }),
      flow({ nextIncomingId: t.uint(0), incomingWindow: t.uint(window), handle: t.uint(handle), deliveryCount: t.uint(0), linkCredit: t.uint(credit) }),
    ];
  }
  const transfers = (raw: RawClient) => raw.frames.filter((f) => f.name === 'transfer');
  const summary = (frames: ParsedFrame[]) => frames.filter((f) => f.name === 'transfer' || f.name === 'detach')
    .map((f) => (f.name === 'transfer' ? `T h${f.fields[0]} id${f.fields[1]}${f.fields[5] ? ' more' : ''}` : `D h${f.fields[0]}`));

  it('a receiver that detaches while its session window holds transfers back gets none after its detach; all go to the next consumer, once', async function () {
    tb = await startTestBroker();
    await publish('da.window', [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const raw = await RawClient.connect(tb.port);
    try {
      raw.write(AMQP_HEADER, open(), begin(0, { incomingWindow: t.uint(2) }));
      raw.write(...rawReceiver(0, 'rx', 'da.window', 10, 2));
      expect(await raw.waitFor((r) => transfers(r).length === 2)).to.equal(true);
      await sleep(200);
      raw.write(detach(0, true));
      expect(await raw.waitFor((r) => !!r.find('detach'))).to.equal(true);
      // The window opens: before the fix the 8 held transfers went out now, after the detach.
      raw.write(flow({ nextIncomingId: t.uint(2), incomingWindow: t.uint(100) }));
      await sleep(400);
      expect(summary(raw.frames)).to.deep.equal(['T h0 id0', 'T h0 id1', 'D h0']);
    } finally { raw.destroy(); }
    expect(await consumeAll('da.window')).to.deep.equal([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });

  it("those transfers do not reach the client's next link of the session (rhea, small session buffer), which asked for none", async function () {
    tb = await startTestBroker();
    await publish('da.next', [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const ca = await connect(tb.url, { session_buffer_size: 4 });
    try {
      const a = await openReceiver(ca, 'da.next');
      const held: any[] = [];
      a.on('message', (ctx: any) => held.push(ctx.delivery));
      a.add_credit(10);
      await sleep(300);
      expect(held.length, 'the session buffer holds 4 unsettled').to.equal(4);
      a.detach();
      await sleep(300);
      expect(await consumeAll('da.next', 20), 'the 10 are released to the next consumer').to.deep.equal([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
      // The same client: a new link without credit, then it settles what it held, which opens its window.
      const a2 = await openReceiver(ca, 'da.next');
      const got2: unknown[] = [];
      a2.on('message', (ctx: any) => { got2.push(ctx.message.body); ctx.delivery.accept(); });
      for (const d of held) d.release();
      await sleep(500);
      expect(got2, 'the new link, with no credit, got the old link\'s transfers (before the fix: 4..9, also consumed by the other consumer)').to.deep.equal([]);
    } finally { await ca.close(); }
  });

  it("another link's transfers queued behind them keep gapless delivery-ids (a multi-frame delivery half written stops there)", async function () {
    tb = await startTestBroker();
    await publish('da.big', [0, 1, 2].map((i) => `a${i}`.padEnd(3000, '.')));
    await publish('da.small', ['b0', 'b1', 'b2']);
    const raw = await RawClient.connect(tb.port);
    try {
      raw.write(AMQP_HEADER, open({ maxFrameSize: t.uint(1024) }), begin(0, { incomingWindow: t.uint(2) }));
      raw.write(...rawReceiver(0, 'big', 'da.big', 3, 2), ...rawReceiver(1, 'small', 'da.small', 3, 2));
      expect(await raw.waitFor((r) => transfers(r).length === 2)).to.equal(true);
      await sleep(200);
      raw.write(detach(0, true));
      expect(await raw.waitFor((r) => !!r.find('detach'))).to.equal(true);
      raw.write(flow({ nextIncomingId: t.uint(2), incomingWindow: t.uint(100) }));
      expect(await raw.waitFor((r) => transfers(r).length >= 5, 1500)).to.equal(true);
      await sleep(200);
      // Before the fix: the rest of the big messages after the detach, on h0, and h1's ids after theirs.
      expect(summary(raw.frames)).to.deep.equal(['T h0 id0 more', 'T h0 id0 more', 'D h0', 'T h1 id1', 'T h1 id2', 'T h1 id3']);
    } finally { raw.destroy(); }
    expect((await consumeAll('da.big')).map((b) => String(b).slice(0, 2))).to.deep.equal(['a0', 'a1', 'a2']);
  });

  it('deliveries a client leaves unsettled on links it detaches do not stall its session (2048 and more)', async function () {
    tb = await startTestBroker();
    await publish('da.unsettled', Array.from({ length: 50 }, (_, i) => i));
    const raw = await RawClient.connect(tb.port);
    try {
      raw.write(AMQP_HEADER, open(), begin(0, { incomingWindow: t.uint(1000000) }));
      const count = (name: string) => raw.frames.filter((f) => f.name === name).length;
      for (let i = 0; i < 230; i++) {
        const before = count('transfer'), detaches = count('detach');
        raw.write(
          attach({ name: t.str(`l${i}`), handle: t.uint(0), role: t.bool(true), source: source({ address: t.str('da.unsettled') }), target: null }),
          flow({ nextIncomingId: t.uint(before), incomingWindow: t.uint(1000000), handle: t.uint(0), deliveryCount: t.uint(0), linkCredit: t.uint(10) }),
        );
        // Before the fix: cycle 204 got 8, then nothing, on any link of the session.
        expect(await raw.waitFor(() => count('transfer') >= before + 10, 2000), `cycle ${i}: 10 transfers (got ${count('transfer') - before})`).to.equal(true);
        raw.write(detach(0, true));
        expect(await raw.waitFor(() => count('detach') > detaches)).to.equal(true);
      }
      expect(raw.frames.filter((f) => f.error)).to.deep.equal([]);
    } finally { raw.destroy(); }
    await sleep(200);
    expect(await consumeAll('da.unsettled')).to.have.length(50);
  });

  it("a publisher's first-acquirer=true is false once a link has acquired the message [AMQP 3.2.1]", async function () {
    tb = await startTestBroker();
    const c = await connect(tb.url);
    try {
      await sendAll(await openSender(c, 'da.first'), [{ body: 'x', first_acquirer: true }]);
      const r = await openReceiver(c, 'da.first');
      const seen: Array<[unknown, unknown]> = [];
      r.on('message', (ctx: any) => {
        seen.push([ctx.message.first_acquirer, ctx.message.delivery_count ?? 0]);
        if (seen.length === 1) ctx.delivery.release(); else ctx.delivery.accept();
      });
      r.add_credit(5);
      await sleep(400);
      expect(seen).to.deep.equal([[true, 0], [false, 0]]);
    } finally { await c.close(); }
  });

  it('rcv-settle-mode second: the broker settles an accept only once the message\'s removal is on disk (a kill -9 then cannot bring it back)', async function () {
    tb = await startTestBroker();
    await publish({ address: 'da.second', capabilities: ['create-on-demand', 'queue', 'durable'] } as any, [0, 1, 2, 3, 4]);
    // Every batch from now on takes 300 ms to be durable; note when the one removing a message ends.
    const store = tb.broker.store;
    const batch = store.batch.bind(store);
    let removalsWrittenAt = 0;
    store.batch = async (ops, sync) => {
      await sleep(300);
      await batch(ops, sync);
      if (ops.some((op) => op.type === 'del' && op.key[0] === CoreTables.log)) removalsWrittenAt = Date.now();
    };
    const c = await connect(tb.url);
    try {
      const rcv = await openReceiver(c, 'da.second', { rcv_settle_mode: 1 });
      const settledAt: number[] = [];
      rcv.on('settled', () => settledAt.push(Date.now()));
      rcv.on('message', (ctx: any) => ctx.delivery.accept());
      rcv.add_credit(5);
      for (let i = 0; i < 100 && settledAt.length < 5; i++) await sleep(20);
      expect(settledAt, 'the broker settled the 5 accepts').to.have.length(5);
      expect(removalsWrittenAt, 'the removals were written').to.be.greaterThan(0);
      // Before the fix the broker settled each accept at once, 300 ms before its removal was durable.
      expect(Math.min(...settledAt)).to.be.at.least(removalsWrittenAt);
    } finally { await c.close(); }
    await tb.restart();
    expect(await consumeAll('da.second'), 'accepted and settled: gone after a restart').to.deep.equal([]);
  });
});
