/**
 * Where a durable subscription's position and a time bookmark stand when the log bound has
 * dropped what lies before them (review of session 22's "fallen off the log" fix). Each case
 * marked (before: ...) failed on the code before its fix:
 * 1. a durable subscription with a filter moved only on the deliveries it accepted: the events
 *    its filter skipped left it behind, and once log.max_count of them had been dropped every
 *    re-attach was refused with scn-not-found, though it had missed nothing;
 * 2. a time after the newest dropped event and before the oldest held one resolved to nothing
 *    (older than the log): default `now` replayed nothing, `fail` was scn-not-found; wire.md 5
 *    resolves it to the last event at or before it (dropped), whose successors are all held.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, collect, openReceiver, send, sleep, errorOf, type Received } from '../support/client.js';
import { tmFilters, cmdOf, scnOf, keyOf } from '../support/sow-client.js';
import { runRetention } from '../../lib/ext/sow/index.js';
import { listSubscriptions } from '../../lib/ext/checkpoints/index.js';
import { ManualClock } from '../../lib/index.js';

const SUBS_TABLE = 0x03;
const browseOnly = (name: string, args: Record<string, unknown> = {}) => ({ address: name, capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'qpid.browse-only': true, ...args } });
const sowQ = (name: string, args: Record<string, unknown> = {}) => ({ address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', ...args } });
const colored = (body: string, color: string) => ({ body, application_properties: { color } });
const blues = (n: number, from = 0) => Array.from({ length: n }, (_, i) => colored(`b${from + i}`, 'blue'));
const rec = (id: string, color: string) => ({ body: JSON.stringify({ id, color }) });
/** A durable receiver that selects red messages (a selector), or red records (a content filter on a SOW queue). */
const redSub = (address: string) => ({ address, durable: 2, expiry_policy: 'never', filter: tmFilters({ selector: "color = 'red'" }) });
const redSowSub = (address: string) => ({ address, durable: 2, expiry_policy: 'never', filter: tmFilters({ command: 'subscribe', filter: "/color = 'red'" }) });
const positions = (tb: TestBroker) => listSubscriptions(tb.broker).map((s) => s.position);

/** Attaches as container `cont`, link `sub`, reads until idle, detaches without closing (the subscription stays). */
async function attachAndRead(url: string, source: any, opts: { idleMs?: number; credit?: number } = {}): Promise<{ got: Received[]; err?: string; description?: string }> {
  const c = await connect(url, { container_id: 'cont' });
  try {
    let rcv: any;
    try { rcv = await openReceiver(c, source, { name: 'sub' }); } catch (e: any) { return { got: [], err: e.condition, description: e.message }; }
    let err: { condition?: string; description?: string } | undefined;
    const note = () => { const e = errorOf(rcv.remote?.detach?.error ?? rcv.error); if (e.condition) err = e; };
    if (rcv.is_closed()) { note(); return { got: [], err: err?.condition, description: err?.description }; }
    rcv.once('receiver_close', note);
    const got = await collect(rcv, { idleMs: opts.idleMs ?? 700, credit: opts.credit ?? 50 });
    await sleep(100);
    if (!err && rcv.is_open()) { rcv.detach(); await sleep(150); }
    return { got, err: err?.condition, description: err?.description };
  } finally { await c.close(); }
}
const bodies = (got: Received[]) => got.map((m) => m.message.body);

describe('durable positions and time bookmarks at the log bound', function () {
  this.timeout(60000);
  let tb: TestBroker | undefined;
  afterEach(async () => { await tb?.stop(); tb = undefined; });

  describe('1. a durable subscription with a selector on a browse-only queue with log.max_count', function () {
    it('moves over what its attached link skipped, and resumes after more skipped messages than the log holds (before: refused)', async function () {
      tb = await startTestBroker();
      await send(tb.url, browseOnly('dp.on', { 'log.max_count': 5 }), [colored('r1', 'red')]);
      const c = await connect(tb.url, { container_id: 'cont' });
      const rcv = await openReceiver(c, redSub('dp.on'), { name: 'sub' });
      expect(bodies(await collect(rcv, { idleMs: 500, credit: 50 }))).to.deep.equal(['r1']);
      await send(tb.url, 'dp.on', blues(10)); // SCN 2-11: the attached link's reader passes them
      await sleep(300);
      expect(positions(tb), 'passed in memory at once').to.deep.equal([11]);
      rcv.detach(); await sleep(200); await c.close();
      await tb.restart(); // the position the link passed was written at its detach
      expect(positions(tb)).to.deep.equal([11]);
      await send(tb.broker.urls[0], 'dp.on', [colored('r2', 'red')]);
      const again = await attachAndRead(tb.broker.urls[0], redSub('dp.on'));
      expect(again.err, again.description).to.equal(undefined);
      expect(bodies(again.got)).to.deep.equal(['r2']);
    });

    it('a detached subscription moves over the skipped messages the bound drops (before: refused)', async function () {
      tb = await startTestBroker();
      await send(tb.url, browseOnly('dp.off', { 'log.max_count': 5 }), [colored('r1', 'red')]);
      expect(bodies((await attachAndRead(tb.url, redSub('dp.off'))).got)).to.deep.equal(['r1']);
      await send(tb.url, 'dp.off', [...blues(10), colored('r2', 'red')]); // SCN 2-12; 8-12 kept
      expect(positions(tb), 'up to the last skipped message dropped').to.deep.equal([7]);
      const again = await attachAndRead(tb.url, redSub('dp.off'));
      expect(again.err, again.description).to.equal(undefined);
      expect(bodies(again.got)).to.deep.equal(['r2']);
    });

    it('after a restart too, before the link is back: its filter is kept with it (before: refused)', async function () {
      tb = await startTestBroker();
      await send(tb.url, browseOnly('dp.rs', { 'log.max_count': 5 }), [colored('r1', 'red')]);
      expect(bodies((await attachAndRead(tb.url, redSub('dp.rs'))).got)).to.deep.equal(['r1']);
      await tb.restart();
      const url = tb.broker.urls[0];
      await send(url, 'dp.rs', [...blues(10), colored('r2', 'red')]);
      const again = await attachAndRead(url, redSub('dp.rs'));
      expect(again.err, again.description).to.equal(undefined);
      expect(bodies(again.got)).to.deep.equal(['r2']);
    });

    it('a message it would have received, dropped while it was detached, is still scn-not-found (never a gap)', async function () {
      tb = await startTestBroker();
      await send(tb.url, browseOnly('dp.miss', { 'log.max_count': 5 }), [colored('r1', 'red')]);
      expect(bodies((await attachAndRead(tb.url, redSub('dp.miss'))).got)).to.deep.equal(['r1']);
      await send(tb.url, 'dp.miss', [...blues(2), colored('r2', 'red'), ...blues(8, 2)]); // r2 = SCN 4 goes
      expect(positions(tb), 'stops before the red one').to.deep.equal([3]);
      const again = await attachAndRead(tb.url, redSub('dp.miss'));
      expect(bodies(again.got)).to.deep.equal([]);
      expect(again.err, again.description).to.equal('tidemark:scn-not-found');
      expect(positions(tb), 'kept where it was').to.deep.equal([3]);
    });

    it('an attached link whose reader had not reached a message it would have received when the bound dropped it: later accepts do not carry the position past it', async function () {
      tb = await startTestBroker();
      await send(tb.url, browseOnly('dp.slow', { 'log.max_count': 5 }), [colored('r1', 'red')]);
      const c = await connect(tb.url, { container_id: 'cont' });
      const rcv = await openReceiver(c, redSub('dp.slow'), { name: 'sub' });
      const got: string[] = [];
      rcv.on('message', (ctx: any) => { got.push(ctx.message.body); ctx.delivery.accept(); });
      let closedWith: string | undefined;
      rcv.once('receiver_close', () => { closedWith = errorOf(rcv.remote?.detach?.error ?? rcv.error).condition; });
      rcv.add_credit(1);
      await sleep(300);
      expect(got).to.deep.equal(['r1']);
      // no credit: r2 (SCN 2) waits, and the bound drops it under the reader
      await send(tb.url, 'dp.slow', [colored('r2', 'red'), ...blues(10), colored('r3', 'red')]);
      rcv.add_credit(10);
      await sleep(400);
      // (it used to skip what was gone, as a ring browser does, and go on with r3: a gap)
      expect(got, 'nothing after the gap').to.deep.equal(['r1']);
      expect(closedWith, 'the link falls off where it would have skipped').to.equal('tidemark:scn-not-found');
      await c.close();
      expect(positions(tb), 'before r2').to.deep.equal([1]);
      const again = await attachAndRead(tb.url, redSub('dp.slow'));
      expect(again.err, again.description).to.equal('tidemark:scn-not-found');
    });

    it('a long run of skipped messages writes the position a few times, not once per message', async function () {
      tb = await startTestBroker();
      await send(tb.url, browseOnly('dp.w', { 'log.max_count': 5 }), [colored('r1', 'red')]);
      const c = await connect(tb.url, { container_id: 'cont' });
      const rcv = await openReceiver(c, redSub('dp.w'), { name: 'sub' });
      await collect(rcv, { idleMs: 400, credit: 50 });
      const committer = tb.broker.committer as any;
      const addQuiet = committer.addQuiet;
      let subWrites = 0;
      committer.addQuiet = function (ops: any[]) { for (const op of ops) if (op.key[0] === SUBS_TABLE) subWrites++; return addQuiet.call(this, ops); };
      try {
        for (let i = 0; i < 10; i++) await send(tb.url, 'dp.w', blues(50, i * 50)); // 500 skipped, each batch passed at once
        await sleep(1300);
        expect(positions(tb)).to.deep.equal([501]);
        expect(subWrites, `${subWrites} writes`).to.be.within(1, 4);
      } finally { committer.addQuiet = addQuiet; }
      rcv.detach(); await sleep(200); await c.close();
    });
  });

  describe('1b. the same on a SOW queue (a content filter, log.max_count)', function () {
    it('an attached link moves over the events its filter skipped (before: refused)', async function () {
      tb = await startTestBroker();
      await send(tb.url, sowQ('dps.on', { 'log.max_count': 5 }), [rec('x', 'blue')]); // SCN 1
      const c = await connect(tb.url, { container_id: 'cont' });
      const rcv = await openReceiver(c, redSowSub('dps.on'), { name: 'sub' });
      const first = collect(rcv, { idleMs: 600, credit: 50 });
      await sleep(100);
      await send(tb.url, 'dps.on', [rec('a', 'red')]); // SCN 2
      expect((await first).filter((m) => cmdOf(m) === 'publish').map(keyOf)).to.deep.equal(['a']);
      await send(tb.url, 'dps.on', Array.from({ length: 10 }, (_, i) => rec(`k${i}`, 'blue'))); // SCN 3-12
      await sleep(300);
      expect(positions(tb)).to.deep.equal([12]);
      rcv.detach(); await sleep(200); await c.close();
      await send(tb.url, 'dps.on', [rec('b', 'red')]); // SCN 13
      await runRetention(tb.broker);
      const again = await attachAndRead(tb.url, redSowSub('dps.on'));
      expect(again.err, again.description).to.equal(undefined);
      expect(again.got.filter((m) => cmdOf(m) === 'publish').map(scnOf)).to.deep.equal([13]);
    });

    for (const restart of [false, true]) {
      it(`a detached subscription moves over the events its filter skips as they commit${restart ? ', after a restart too' : ''} (before: refused)`, async function () {
        tb = await startTestBroker();
        await send(tb.url, sowQ('dps.off', { 'log.max_count': 5 }), [rec('x', 'blue')]); // SCN 1
        const c = await connect(tb.url, { container_id: 'cont' });
        const rcv = await openReceiver(c, redSowSub('dps.off'), { name: 'sub' });
        const first = collect(rcv, { idleMs: 600, credit: 50 });
        await sleep(100);
        await send(tb.url, 'dps.off', [rec('a', 'red')]); // SCN 2
        expect((await first).filter((m) => cmdOf(m) === 'publish').map(keyOf)).to.deep.equal(['a']);
        rcv.detach(); await sleep(200); await c.close();
        expect(tb.broker.queueInfo(tb.broker.nodes.get('dps.off')!).consumers, 'what watches it is no consumer').to.equal(0);
        if (restart) await tb.restart();
        const url = tb.broker.urls[0];
        // blue ones, a delete of a blue record, and an update that makes the red record blue (none sent to it)
        await send(url, 'dps.off', [...Array.from({ length: 8 }, (_, i) => rec(`k${i}`, 'blue')), { body: JSON.stringify({ id: 'k0' }), application_properties: { 'tm-op': 'delete' } }, rec('a', 'blue')]); // SCN 3-12
        expect(positions(tb)).to.deep.equal([12]);
        await send(url, 'dps.off', [rec('b', 'red')]); // SCN 13
        await runRetention(tb.broker);
        const again = await attachAndRead(url, redSowSub('dps.off'));
        expect(again.err, again.description).to.equal(undefined);
        expect(again.got.filter((m) => cmdOf(m) === 'publish').map(scnOf)).to.deep.equal([13]);
      });
    }

    it('an event it would have received, trimmed while it was detached, is still scn-not-found', async function () {
      tb = await startTestBroker();
      await send(tb.url, sowQ('dps.miss', { 'log.max_count': 5 }), [rec('x', 'blue')]); // SCN 1
      const c = await connect(tb.url, { container_id: 'cont' });
      const rcv = await openReceiver(c, redSowSub('dps.miss'), { name: 'sub' });
      const first = collect(rcv, { idleMs: 600, credit: 50 });
      await sleep(100);
      await send(tb.url, 'dps.miss', [rec('a', 'red')]); // SCN 2
      expect((await first).length).to.equal(1);
      rcv.detach(); await sleep(200); await c.close();
      await send(tb.url, 'dps.miss', [rec('k0', 'blue'), rec('b', 'red'), ...Array.from({ length: 8 }, (_, i) => rec(`k${i + 1}`, 'blue'))]); // b = SCN 4
      await runRetention(tb.broker);
      expect(positions(tb), 'stops before b').to.deep.equal([3]);
      const again = await attachAndRead(tb.url, redSowSub('dps.miss'));
      expect(again.err, again.description).to.equal('tidemark:scn-not-found');
    });
  });

  describe('2. a time bookmark between the newest dropped event and the oldest held one', function () {
    let tb2: TestBroker | undefined;
    const T: Record<string, string> = {};
    const first: Record<string, string> = {};
    const early: Record<string, string> = {};
    before(async function () {
      tb2 = await startTestBroker();
      for (const [name, extra] of [['tb.bo', { 'qpid.browse-only': true }], ['tb.sow', { 'sow.key': '/id' }]] as const) {
        first[name] = new Date(Date.now() - 1000).toISOString(); // before the first message ever
        for (let i = 1; i <= 10; i++) {
          await send(tb2.url, { address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'log.max_count': 5, ...extra } }, [{ body: JSON.stringify({ id: `k${i}`, i }) }]);
          await sleep(15);
          if (i === 2) { early[name] = new Date().toISOString(); await sleep(15); }
          if (i === 5) { T[name] = new Date().toISOString(); await sleep(15); }
        }
      }
      await runRetention(tb2.broker);
    });
    after(async () => { await tb2?.stop(); });

    const replay = async (address: string, bookmark: string, options?: Record<string, unknown>) => {
      const c = await connect(tb2!.broker.urls[0]);
      try {
        let rcv: any;
        try { rcv = await openReceiver(c, { address, filter: tmFilters({ command: 'subscribe', bookmark, options }) }); } catch (e: any) { return { got: [] as Received[], err: e.condition as string | undefined }; }
        let err: string | undefined;
        const note = () => { err = errorOf(rcv.remote?.detach?.error ?? rcv.error).condition; };
        // (a time bookmark on a SOW queue is resolved after the attach: its error may come at once)
        if (rcv.is_closed()) { note(); return { got: [] as Received[], err }; }
        rcv.once('receiver_close', note);
        const got = await collect(rcv, { idleMs: 600, credit: 50 });
        await sleep(100);
        return { got, err };
      } finally { await c.close(); }
    };
    const shown = (got: Received[]) => got.map((m) => `${cmdOf(m)} ${scnOf(m)}`);
    const REPLAY = ['publish 6', 'publish 7', 'publish 8', 'publish 9', 'publish 10', 'completed 10'];

    for (const q of ['tb.sow', 'tb.bo']) {
      it(`${q}: resolves to the newest dropped event (SCN 5) and replays 6..10, with the default and with fail${q === 'tb.bo' ? ' (before: nothing / scn-not-found)' : ' (before: nothing, once the trim had run)'}`, async function () {
        const byDefault = await replay(q, T[q]);
        expect(byDefault.err).to.equal(undefined);
        expect(shown(byDefault.got)).to.deep.equal(REPLAY);
        const failing = await replay(q, T[q], { bookmark_not_found: 'fail' });
        expect(failing.err).to.equal(undefined);
        expect(shown(failing.got)).to.deep.equal(REPLAY);
      });

      it(`${q}: a time before the newest dropped event, or before the first event ever, still follows bookmark_not_found`, async function () {
        for (const t of [early[q], first[q]]) {
          expect((await replay(q, t, { bookmark_not_found: 'fail' })).err, t).to.equal('tidemark:scn-not-found');
          expect(shown((await replay(q, t)).got), `${t}: now`).to.deep.equal(['completed 10']);
          expect(shown((await replay(q, t, { bookmark_not_found: 'epoch' })).got), `${t}: epoch`).to.deep.equal(REPLAY);
        }
      });
    }

    it('tb.sow: after a restart the time still resolves (the newest cut event keeps its index row)', async function () {
      await tb2!.restart();
      const again = await replay('tb.sow', T['tb.sow'], { bookmark_not_found: 'fail' });
      expect(again.err).to.equal(undefined);
      expect(shown(again.got)).to.deep.equal(REPLAY);
    });
  });

  it('2b. a plain queue with log.retention: a time after the newest message the retention dropped replays what is held (before: nothing)', async function () {
    const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);
    const clock = new ManualClock(T0);
    tb = await startTestBroker({}, { clock });
    await send(tb.url, browseOnly('dp.ret', { 'log.retention': '60s' }), [1, 2, 3].map((n) => ({ body: `m${n}` }))); // at T0
    clock.set(T0 + 10_000);
    await send(tb.url, 'dp.ret', [4, 5].map((n) => ({ body: `m${n}` }))); // at T0 + 10 s
    clock.set(T0 + 65_000); // m1-m3 are past the retention
    for (let i = 0; i < 40 && tb.broker.queueInfo(tb.broker.nodes.get('dp.ret')!).scn_oldest !== 4; i++) await sleep(100);
    expect(tb.broker.queueInfo(tb.broker.nodes.get('dp.ret')!).scn_oldest).to.equal(4);
    const c = await connect(tb.url);
    try {
      const at = (t: number, options?: Record<string, unknown>) => openReceiver(c, { address: 'dp.ret', filter: tmFilters({ command: 'subscribe', bookmark: new Date(t).toISOString(), options }) });
      const rcv = await at(T0 + 5_000, { bookmark_not_found: 'fail' });
      expect((await collect(rcv, { idleMs: 500 })).map((m) => `${cmdOf(m)} ${scnOf(m)}`)).to.deep.equal(['publish 4', 'publish 5', 'completed 5']);
      let err: any;
      await at(T0 - 5_000, { bookmark_not_found: 'fail' }).then((r) => new Promise((res) => r.once('receiver_close', () => { err = errorOf(r.remote?.detach?.error ?? r.error); res(null); })), (e) => { err = e; });
      expect(err?.condition, 'before the first message').to.equal('tidemark:scn-not-found');
    } finally { await c.close(); }
  });
});
