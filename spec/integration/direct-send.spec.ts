/**
 * Deliveries written past rhea's outgoing queue (sink.ts #sendDirect), pre-settled and
 * unsettled, keep the session's rules: delivery ids in sequence with rhea's own deliveries on the same session,
 * the peer's incoming window, link credit, and unique tags. rhea's client checks the first
 * two itself: a delivery id out of sequence throws "frame sequence error", and more transfers
 * than its incoming window overflow its delivery buffer.
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, send, receive } from '../support/client.js';
import { tmFilters } from '../support/sow-client.js';

/** Receives `count` messages on `conn` (own session if given), pre-settled or not. */
function take(conn: any, address: any, count: number, opts: { presettled: boolean; credit: number; session?: any }): Promise<{ bodies: unknown[]; tags: string[] }> {
  return new Promise((resolve, reject) => {
    const bodies: unknown[] = [];
    const tags: string[] = [];
    const ropts = { source: address, credit_window: opts.credit, autoaccept: true, ...(opts.presettled ? { snd_settle_mode: 1 } : {}) };
    const rcv = opts.session ? opts.session.open_receiver(ropts) : conn.open_receiver(ropts);
    const timer = setTimeout(() => reject(new Error(`timed out with ${bodies.length}/${count}`)), 20000);
    rcv.on('message', (ctx: any) => {
      bodies.push(ctx.message.body);
      tags.push(Buffer.from(ctx.delivery.tag).toString('latin1'));
      if (bodies.length === count) { clearTimeout(timer); resolve({ bodies, tags }); }
    });
    rcv.on('receiver_error', (ctx: any) => { clearTimeout(timer); reject(new Error('receiver error: ' + ctx.receiver.error?.description)); });
    conn.on('error', (e: any) => { clearTimeout(timer); reject(e); });
    conn.on('connection_error', (ctx: any) => { clearTimeout(timer); reject(new Error('connection error: ' + ctx.connection.error?.description)); });
  });
}

const range = (n: number, f: (i: number) => unknown) => Array.from({ length: n }, (_, i) => f(i));

describe('deliveries written directly (sink.ts)', function () {
  const b = useBroker();

  it('keep to a small incoming window of the peer, in order, with rhea\'s tags', async function () {
    const url = b.get().url;
    await send(url, 'q.direct.window', range(3000, (i) => ({ body: i })));
    // An incoming window of 8: rhea's client throws on a 9th transfer beyond it.
    const c = await connect(url, { session_buffer_size: 8 });
    try {
      const got = await take(c.connection, 'q.direct.window', 3000, { presettled: true, credit: 500 });
      expect(got.bodies).to.deep.equal(range(3000, (i) => i));
      expect(got.tags).to.deep.equal(range(3000, (i) => String(i)));
    } finally { await c.close(); }
  });

  it('share a session with unsettled deliveries of another link: delivery ids stay in sequence', async function () {
    const url = b.get().url;
    await send(url, 'q.direct.mixA', range(2000, (i) => ({ body: `a${i}` })));
    await send(url, 'q.direct.mixB', range(2000, (i) => ({ body: `b${i}` })));
    const c = await connect(url);
    try {
      const session = c.connection.create_session();
      session.begin();
      const [a, bb] = await Promise.all([
        take(c.connection, 'q.direct.mixA', 2000, { presettled: true, credit: 300, session }),
        take(c.connection, 'q.direct.mixB', 2000, { presettled: false, credit: 300, session }),
      ]);
      expect(a.bodies).to.deep.equal(range(2000, (i) => `a${i}`));
      expect(bb.bodies).to.deep.equal(range(2000, (i) => `b${i}`));
      // Pre-settled, so consumed; accepted, so consumed too.
      expect(await receive(url, 'q.direct.mixA', { idleMs: 300 })).to.have.length(0);
      expect(await receive(url, 'q.direct.mixB', { idleMs: 300 })).to.have.length(0);
    } finally { await c.close(); }
  });

  it('a pre-settled SOW query over a small window streams every record and its markers', async function () {
    const url = b.get().url;
    const queue = { address: 'sow.direct', capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'sow.key': '/id' } };
    await send(url, queue, range(1500, (i) => ({ body: JSON.stringify({ id: `k${String(i).padStart(4, '0')}`, v: i }) })));
    const c = await connect(url, { session_buffer_size: 16 });
    try {
      // group_begin, 1500 records, group_end
      const got = await take(c.connection, { address: 'sow.direct', filter: tmFilters({ command: 'sow' }) }, 1502, { presettled: true, credit: 400 });
      const records = got.bodies.slice(1, 1501).map((x) => JSON.parse(String(x)).v);
      expect(records).to.deep.equal(range(1500, (i) => i)); // key order = publish order here
      expect(new Set(got.tags).size).to.equal(got.tags.length);
    } finally { await c.close(); }
  });

  it('never beyond the link credit the receiver gave', async function () {
    const url = b.get().url;
    await send(url, 'q.direct.credit', range(50, (i) => ({ body: i })));
    const c = await connect(url);
    try {
      const got: unknown[] = [];
      const rcv = c.connection.open_receiver({ source: 'q.direct.credit', credit_window: 0, autoaccept: true, snd_settle_mode: 1 });
      rcv.on('message', (ctx: any) => got.push(ctx.message.body));
      await new Promise((res) => rcv.once('receiver_open', res));
      rcv.add_credit(7);
      await new Promise((res) => setTimeout(res, 400));
      expect(got).to.deep.equal(range(7, (i) => i));
      rcv.add_credit(3);
      await new Promise((res) => setTimeout(res, 400));
      expect(got).to.deep.equal(range(10, (i) => i));
    } finally { await c.close(); }
  });

  it('unsettled: held until the peer settles them; released ones come back, accepted ones are gone', async function () {
    const url = b.get().url;
    await send(url, 'q.direct.unsettled', range(600, (i) => ({ body: i })));
    const c = await connect(url);
    try {
      const held: any[] = [];
      const seen: number[] = [];
      const rcv = c.connection.open_receiver({ source: 'q.direct.unsettled', credit_window: 0, autoaccept: false });
      rcv.on('message', (ctx: any) => { held.push(ctx.delivery); seen.push(ctx.message.body); });
      await new Promise((res) => rcv.once('receiver_open', res));
      rcv.add_credit(300);
      for (let i = 0; i < 100 && held.length < 300; i++) await new Promise((res) => setTimeout(res, 20));
      expect(seen).to.deep.equal(range(300, (i) => i)); // all 300 out at once, none settled yet
      for (const d of held.splice(0, 100)) d.release();
      for (const d of held.splice(0)) d.accept();
      rcv.add_credit(400);
      for (let i = 0; i < 100 && seen.length < 700; i++) await new Promise((res) => setTimeout(res, 20));
      for (const d of held.splice(0)) d.accept();
      expect(seen).to.have.length(700);
      // The 100 released came back (before the 300 never sent), each exactly once.
      expect([...seen.slice(300)].sort((x, y) => x - y)).to.deep.equal(range(100, (i) => i).concat(range(300, (i) => 300 + i)));
      await new Promise((res) => setTimeout(res, 200));
    } finally { await c.close(); }
    expect(await receive(url, 'q.direct.unsettled', { idleMs: 300 })).to.have.length(0);
  });

  it('a SOW record larger than the peer\'s frames goes the rhea way, in several frames, between direct ones', async function () {
    const url = b.get().url;
    const sowQ = { address: 'sow.direct.big', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } };
    const big = 'x'.repeat(20000);
    const records = range(30, (i) => ({ id: `k${String(i).padStart(2, '0')}`, pad: i % 10 === 5 ? big : 'small' }));
    await send(url, sowQ, records.map((r) => ({ body: JSON.stringify(r) })));
    const c = await connect(url, { max_frame_size: 4096 });
    // count the transfer frames that say more follow: the big records' first frames
    let continued = 0;
    const onTransfer = c.connection.on_transfer;
    c.connection.on_transfer = function (frame: any) { if (frame.performative.more) continued++; return onTransfer.call(this, frame); };
    try {
      for (const presettled of [true, false]) {
        const got = await take(c.connection, { address: 'sow.direct.big', filter: tmFilters({ command: 'sow' }) }, 32, { presettled, credit: 7 });
        const bodies = got.bodies.slice(1, 31).map((x) => JSON.parse(typeof x === 'string' ? x : Buffer.from((x as any).content ?? x).toString()));
        expect(bodies, `presettled=${presettled}`).to.deep.equal(records);
      }
      expect(continued, 'frames of the 6 big records (2 queries) that had more to follow').to.be.at.least(6 * 4);
    } finally { await c.close(); }
  });
});
