/**
 * Checkpoints, durable subscriptions and replays whose position the log no longer holds
 * (a code review, session 22). Each case failed on the code before its fix:
 * 1. the log trim deleted rows before it moved the floor: a checkpoint reader attaching, or
 *    one streaming from the log, went on from the first row left (a gap, no bootstrap);
 * 2. after a restart a durable subscription fallen off the log resumed at the oldest event
 *    still there (the ring floor was not set), and on a browse-only queue it always did;
 * 3. a durable re-attach lost what its filters ask for: checkpoints, `completed`, annotations;
 * 4. a time bookmark on a plain queue ignored bookmark_not_found;
 * 5. a checkpoint from a deleted and re-created queue resumed online in the new one.
 * Also: a conflated message on a checkpoint link carried no checkpoint.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, openSender, sendAll, collect, send, sleep, errorOf, type Received } from '../support/client.js';
import { tmFilters, cmdOf, scnOf, keyOf, checkpointOf } from '../support/sow-client.js';
import { CoreTables, queuePrefix } from '../../lib/core/storage/keyspace.js';
import { runRetention } from '../../lib/ext/sow/index.js';
import { listSubscriptions } from '../../lib/ext/checkpoints/index.js';
import { ManualClock } from '../../lib/index.js';

const sowQ = (name: string, args: Record<string, unknown> = {}) => ({ address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', ...args } });
const browseOnly = (name: string, args: Record<string, unknown> = {}) => ({ address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.browse-only': true, ...args } });
const rec = (id: string, v: number) => ({ body: JSON.stringify({ id, v }) });
const durableSource = (address: string, extra: Record<string, unknown> = {}) => ({ address, durable: 2, expiry_policy: 'never', ...extra });
const FLEX = { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: -1, prevScn: -1, windowOffset: -1 };

/** A checkpoint annotation as plain JSON (longs as numbers, tsNsecs as a decimal string). */
const plainCp = (m: Received): any => {
  const cp = checkpointOf(m);
  return cp && JSON.parse(JSON.stringify(cp, (k, v) => {
    if (typeof v === 'bigint') return k === 'tsNsecs' ? String(v) : Number(v);
    if (v && v.type === 'Buffer' && Array.isArray(v.data) && v.data.length === 8) return String(Buffer.from(v.data).readBigInt64BE(0));
    if (k === 'tsNsecs' && typeof v === 'number') return String(v);
    return v;
  }));
};
async function waitFor(cond: () => boolean, ms = 10000): Promise<void> {
  for (const end = Date.now() + ms; !cond(); await sleep(20)) if (Date.now() > end) throw new Error('timed out waiting');
}
const show = (ms: Received[]) => ms.map((m) => `${cmdOf(m) || m.message.body} ${scnOf(m)}`).join(', ');

/** Attaches, reads until idle, and reports the error the link ended with (refused or detached), if any. */
async function attachAndRead(url: string, source: any, opts: { name?: string; container?: string; credit?: number; idleMs?: number; until?: (m: Received) => boolean } = {}): Promise<{ got: Received[]; err?: { condition?: string; description?: string } }> {
  const c = await connect(url, opts.container ? { container_id: opts.container } : {});
  try {
    let rcv: any;
    try { rcv = await openReceiver(c, source, opts.name ? { name: opts.name } : {}); } catch (e: any) { return { got: [], err: { condition: e.condition, description: e.message } }; }
    let err: { condition?: string; description?: string } | undefined;
    const noteError = () => { const e = errorOf(rcv.remote?.detach?.error ?? rcv.error); if (e.condition) err = e; };
    // (a link may be detached with its error before this line runs: a bookmark resolved after the attach)
    if (rcv.is_closed()) { noteError(); return { got: [], err }; }
    rcv.once('receiver_close', noteError);
    const got = await collect(rcv, { idleMs: opts.idleMs ?? 700, credit: opts.credit ?? 200, until: opts.until });
    await sleep(100);
    if (!err && rcv.is_open()) { rcv.detach(); await sleep(150); }
    return { got, err };
  } finally { await c.close(); }
}

describe('checkpoints and durable subscriptions whose position the log no longer holds (session 22)', function () {
  this.timeout(120000);
  let tb: TestBroker | undefined;
  afterEach(async () => { await tb?.stop(); tb = undefined; });

  describe('1. the log trim and readers behind the ring', function () {
    it('a reader attaching while the trim deletes rows, and one streaming from the log, fall off (bootstrap): never a gap', async function () {
      const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);
      const clock = new ManualClock(T0);
      tb = await startTestBroker({}, { clock });
      const c = await connect(tb.url);
      const snd = await openSender(c, sowQ('tr.q', { 'log.retention': '60s' }));
      const burst = async (from: number, n: number) => { for (let i = 0; i < n; i += 1000) await sendAll(snd, Array.from({ length: Math.min(1000, n - i) }, (_, j) => rec(`k${(from + i + j) % 50}`, from + i + j))); };
      await burst(1, 3000); // SCN 1-3000 at T0
      clock.set(T0 + 10_000);
      await burst(3001, 1600); // SCN 3001-4600
      clock.set(T0 + 20_000);
      await burst(4601, 23000); // SCN 4601-27600: the ring holds the last 20000 or so
      const q = tb.broker.nodes.get('tr.q')!;
      const s: any = q.structure;
      clock.set(T0 + 65_000); // the horizon passes the first group: the trim cuts at 3001
      await runRetention(tb.broker);
      expect(s.oldestLogScn).to.equal(3001);
      expect(s.ringFloor, 'the readers below are behind the ring').to.be.greaterThan(5000);
      const tsNsecs = String(BigInt(T0 + 10_000) * 1_000_000n);
      const at = (scn: number) => ({ consumption_mode: 'ONLINE_CONSUMPTION', windowScn: scn, prevScn: scn, windowOffset: -1, tsNsecs });

      // A reader streaming from the log: it holds the rows after 3050 it read ahead.
      const rc1 = await connect(tb.url);
      const streaming = await openReceiver(rc1, { address: 'tr.q', filter: tmFilters({ checkpoint: at(3050) }) });
      const streamed: Received[] = [];
      streaming.on('message', (ctx: any) => { streamed.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept(); });
      streaming.add_credit(10);
      await waitFor(() => streamed.length >= 10);
      await sleep(100);
      expect(streamed.map(scnOf)).to.deep.equal(Array.from({ length: 10 }, (_, i) => 3051 + i));

      // The next trim (cut at 4601) stops right after deleting the log rows.
      const store: any = q.ctx.store;
      const clearRange = store.clearRange.bind(store);
      const logPrefix = queuePrefix(CoreTables.log, q.id);
      let deleted!: () => void;
      const rowsDeleted = new Promise<void>((res) => { deleted = res; });
      let resume!: () => void;
      const held = new Promise<void>((res) => { resume = res; });
      store.clearRange = async (gte: Buffer, lt: Buffer) => {
        await clearRange(gte, lt);
        if (gte.equals(logPrefix)) { deleted(); await held; }
      };
      try {
        clock.set(T0 + 75_000);
        const trimmed = runRetention(tb.broker);
        await rowsDeleted;
        // attaching now, at 4000 (3001 <= 4000 < 4601): its next events are gone
        const attached = await attachAndRead(tb.url, { address: 'tr.q', filter: tmFilters({ checkpoint: at(4000) }) }, { until: () => true, idleMs: 3000 });
        const first = attached.got[0];
        expect(cmdOf(first) === 'group_begin' && plainCp(first)?.consumption_mode === 'BOOTSTRAP_SNAPSHOT', `after checkpoint 4000 the first message is ${cmdOf(first)} ${scnOf(first)}: events 4001-${scnOf(first) - 1} skipped`).to.equal(true);
        // the streaming reader sends what it holds (to 4050), then has fallen off: a bootstrap.
        // With 500 rows left it reads ahead from 4051, and finds 4601 first; held there until
        // that read is done (else the reader can send the 500 first and find the floor itself).
        streaming.add_credit(490);
        await waitFor(() => streamed.length === 500);
        await sleep(500);
        streaming.add_credit(1500);
        const past4050 = (m: Received) => cmdOf(m) === 'group_begin' || scnOf(m) > 4050;
        await waitFor(() => streamed.some(past4050));
        const rest = streamed.slice(10, streamed.findIndex(past4050) + 1);
        const events = rest.filter((m) => cmdOf(m) === 'publish');
        expect(events.map(scnOf), show(rest.slice(-3))).to.deep.equal(Array.from({ length: 990 }, (_, i) => 3061 + i));
        expect(cmdOf(rest[rest.length - 1]), `after 4050: ${show(rest.slice(-1))}`).to.equal('group_begin');
        expect(plainCp(rest[rest.length - 1])).to.include({ consumption_mode: 'BOOTSTRAP_SNAPSHOT' });
        resume();
        await trimmed;
      } finally {
        resume();
        store.clearRange = clearRange;
        await rc1.close(); await c.close();
      }
      expect(s.oldestLogScn).to.equal(4601);
    });
  });

  describe('2. a durable subscription fallen off the log', function () {
    const attachSub = (url: string, address: string, extra: Record<string, unknown> = {}) => attachAndRead(url, durableSource(address, extra), { name: 'sub', container: 'cont', credit: 100, idleMs: 800 });

    for (const restart of [false, true]) {
      it(`SOW queue with log.max_count: the re-attach is scn-not-found${restart ? ' after a restart too' : ''}, never the events after the gap`, async function () {
        tb = await startTestBroker();
        await send(tb.url, sowQ('df.sow', { 'log.max_count': 5 }), [rec('a', 1), rec('b', 1), rec('c', 1)]); // SCN 1-3
        expect((await attachSub(tb.url, 'df.sow')).got.length).to.equal(3);
        expect(listSubscriptions(tb.broker)[0].position).to.equal(3);
        await send(tb.url, 'df.sow', Array.from({ length: 20 }, (_, i) => rec(`k${i}`, i))); // SCN 4-23, 19-23 kept
        await runRetention(tb.broker);
        if (restart) await tb.restart();
        expect(tb.broker.queueInfo(tb.broker.nodes.get('df.sow')!).scn_oldest).to.equal(19);
        const second = await attachSub(tb.broker.urls[0], 'df.sow');
        expect(second.got.map(scnOf), 'nothing after the gap').to.deep.equal([]);
        expect(second.err?.condition, second.err?.description).to.equal('tidemark:scn-not-found');
        expect(listSubscriptions(tb.broker).map((x) => x.position), 'the subscription is kept where it was').to.deep.equal([3]);
      });

      it(`browse-only queue with log.max_count: the re-attach is scn-not-found${restart ? ' after a restart too' : ''}`, async function () {
        tb = await startTestBroker();
        await send(tb.url, browseOnly('df.bo', { 'log.max_count': 5 }), [1, 2, 3].map((n) => ({ body: `m${n}` })));
        expect((await attachSub(tb.url, 'df.bo')).got.map((m) => m.message.body)).to.deep.equal(['m1', 'm2', 'm3']);
        await send(tb.url, 'df.bo', Array.from({ length: 20 }, (_, i) => ({ body: `m${i + 4}` }))); // SCN 4-23, 19-23 kept
        if (restart) await tb.restart();
        const second = await attachSub(tb.broker.urls[0], 'df.bo');
        expect(second.got.map((m) => m.message.body), 'nothing after the gap').to.deep.equal([]);
        expect(second.err?.condition, second.err?.description).to.equal('tidemark:scn-not-found');
      });
    }

    it('a durable subscriber that falls off while it reads is detached with scn-not-found, and the subscription stays (the client answering closed=true does not end it)', async function () {
      const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);
      const clock = new ManualClock(T0);
      tb = await startTestBroker({}, { clock });
      const c = await connect(tb.url);
      const snd = await openSender(c, sowQ('df.read', { 'log.retention': '60s' }));
      for (let i = 0; i < 24; i++) {
        if (i === 3) clock.set(T0 + 10_000);
        await sendAll(snd, Array.from({ length: 1000 }, (_, j) => rec(`k${j % 50}`, i * 1000 + j))); // SCN 1-3000 at T0, 3001-24000 at T0 + 10 s
      }
      await c.close();
      // a subscription from SCN 100: behind the ring, it reads the log (rows 101-1100 held)
      const rc = await connect(tb.url, { container_id: 'cont' });
      try {
        const rcv = await openReceiver(rc, durableSource('df.read', { filter: tmFilters({ command: 'subscribe', bookmark: '100' }) }), { name: 'sub' });
        const got: Received[] = [];
        rcv.on('message', (ctx: any) => { got.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept(); });
        const closed = new Promise<{ condition?: string }>((res) => rcv.once('receiver_close', () => res(errorOf(rcv.remote?.detach?.error ?? rcv.error))));
        rcv.add_credit(10);
        await waitFor(() => got.length === 10);
        clock.set(T0 + 75_000); // the cut: 3001
        await runRetention(tb.broker);
        rcv.add_credit(2000);
        expect((await closed).condition).to.equal('tidemark:scn-not-found');
        expect(got.map(scnOf)).to.deep.equal(Array.from({ length: 1000 }, (_, i) => 101 + i));
      } finally { await rc.close(); }
      await sleep(200);
      expect(listSubscriptions(tb.broker).map((x) => x.position)).to.deep.equal([1100]);
      const again = await attachSub(tb.url, 'df.read', { filter: tmFilters({ command: 'subscribe', bookmark: '100' }) });
      expect(again.err?.condition).to.equal('tidemark:scn-not-found');
    });

    it('browse-only queue without log bounds: messages gone by ring overflow are no fall (the browse resumes with what is there)', async function () {
      tb = await startTestBroker();
      await send(tb.url, browseOnly('df.ring', { 'qpid.max_count': 5, 'qpid.policy_type': 'ring' }), [1, 2, 3].map((n) => ({ body: `m${n}` })));
      expect((await attachSub(tb.url, 'df.ring')).got.length).to.equal(3);
      await send(tb.url, 'df.ring', Array.from({ length: 20 }, (_, i) => ({ body: `m${i + 4}` })));
      const second = await attachSub(tb.url, 'df.ring');
      expect(second.err).to.equal(undefined);
      expect(second.got.map((m) => m.message.body)).to.deep.equal(['m19', 'm20', 'm21', 'm22', 'm23']);
    });

    it('a SOW queue after a restart with the log trimmed whole (log.retention): the re-attach is scn-not-found, not the next live event', async function () {
      const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);
      const clock = new ManualClock(T0);
      tb = await startTestBroker({}, { clock });
      await send(tb.url, sowQ('df.ret', { 'log.retention': '10s' }), [rec('a', 1), rec('b', 1)]); // SCN 1-2
      expect((await attachSub(tb.url, 'df.ret')).got.length).to.equal(2);
      await send(tb.url, 'df.ret', [rec('c', 1), rec('d', 1)]); // SCN 3-4
      clock.set(T0 + 60_000);
      await runRetention(tb.broker);
      await tb.restart();
      const q = tb.broker.nodes.get('df.ret')!;
      expect((q.structure as any).oldestLogScn, 'an empty log starts after the head').to.equal(5);
      const second = await attachSub(tb.broker.urls[0], 'df.ret');
      expect(second.err?.condition, second.err?.description).to.equal('tidemark:scn-not-found');
      // a checkpoint at 2 falls off too (a bootstrap), and one at the head reads on
      const boot = await attachAndRead(tb.broker.urls[0], { address: 'df.ret', filter: tmFilters({ checkpoint: { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 2, prevScn: 2, windowOffset: -1 } }) }, { until: (m) => cmdOf(m) === 'completed' });
      expect(cmdOf(boot.got[0])).to.equal('group_begin');
      expect(boot.got.filter((m) => cmdOf(m) === 'sow').map(keyOf)).to.deep.equal(['a', 'b', 'c', 'd']);
    });
  });

  describe('3. a durable re-attach keeps what its filters ask for', function () {
    const readDurable = (source: any, name: string, until?: (m: Received) => boolean) => attachAndRead(tb!.url, source, { name, container: 'cont', credit: 100, until }).then((r) => r.got);

    it('checkpoint link on a SOW queue: every message of the re-attached link carries x-opt-tm-checkpoint, from the stored position', async function () {
      tb = await startTestBroker();
      await send(tb.url, sowQ('dr.cp'), [rec('a', 1), rec('b', 1)]);
      const src = durableSource('dr.cp', { filter: tmFilters({ checkpoint: FLEX }) });
      const first = (await readDurable(src, 'cp')).filter((m) => cmdOf(m) === 'publish');
      expect(first.map((m) => plainCp(m)?.windowScn)).to.deep.equal([1, 2]);
      await send(tb.url, 'dr.cp', [rec('c', 1), rec('d', 1)]);
      const second = await readDurable(src, 'cp');
      expect(second.map((m) => `${cmdOf(m)} ${scnOf(m)} ${plainCp(m)?.windowScn}`), 'wire.md 6').to.deep.equal(['publish 3 3', 'publish 4 4']);
    });

    it('checkpoint link on a SOW queue fallen off the log: the re-attach bootstraps, as the checkpoint would', async function () {
      tb = await startTestBroker();
      await send(tb.url, sowQ('dr.cpoff', { 'log.max_count': 3 }), [rec('a', 1), rec('b', 1)]);
      const src = durableSource('dr.cpoff', { filter: tmFilters({ checkpoint: FLEX }) });
      expect((await readDurable(src, 'cp')).map(scnOf)).to.deep.equal([1, 2]);
      await send(tb.url, 'dr.cpoff', [rec('c', 1), rec('d', 1), rec('a', 2), rec('e', 1)]); // SCN 3-6, 4-6 kept
      await runRetention(tb.broker);
      const second = await readDurable(src, 'cp', (m) => cmdOf(m) === 'completed');
      expect(cmdOf(second[0])).to.equal('group_begin');
      expect(plainCp(second[0])).to.include({ consumption_mode: 'BOOTSTRAP_SNAPSHOT' });
      expect(second.filter((m) => cmdOf(m) === 'sow').map(keyOf)).to.include.members(['a', 'c', 'd', 'e']);
    });

    it('subscribe with a bookmark on a SOW queue: the re-attached link sends `completed` after its replay', async function () {
      tb = await startTestBroker();
      await send(tb.url, sowQ('dr.sow'), [rec('a', 1), rec('b', 1)]);
      const src = durableSource('dr.sow', { filter: tmFilters({ command: 'subscribe', bookmark: '0' }) });
      expect((await readDurable(src, 'bm')).map(cmdOf)).to.deep.equal(['publish', 'publish', 'completed']);
      await send(tb.url, 'dr.sow', [rec('c', 1)]);
      expect((await readDurable(src, 'bm')).map((m) => `${cmdOf(m)} ${scnOf(m)}`), 'wire.md 5: completed always follows the replay').to.deep.equal(['publish 3', 'completed 3']);
    });

    it('subscribe with a bookmark on a browse-only queue: the re-attached link keeps the x-opt-tm-* annotations and `completed`', async function () {
      tb = await startTestBroker();
      await send(tb.url, browseOnly('dr.bo'), [{ body: 'm1' }, { body: 'm2' }]);
      const src = durableSource('dr.bo', { filter: tmFilters({ command: 'subscribe', bookmark: '0' }) });
      const first = await readDurable(src, 'bo');
      expect(first.map((m) => [m.message.body, cmdOf(m), scnOf(m)])).to.deep.equal([['m1', 'publish', 1], ['m2', 'publish', 2], [null, 'completed', 2]]);
      await send(tb.url, 'dr.bo', [{ body: 'm3' }]);
      const second = await readDurable(src, 'bo');
      expect(second.map((m) => [m.message.body, cmdOf(m), scnOf(m)]), 'wire.md 4.2 annotations on every message of a tidemark: link').to.deep.equal([['m3', 'publish', 3], [null, 'completed', 3]]);
    });

    it('a content filter alone, and a checkpoint, on a browse-only queue: annotations (and checkpoints) after the re-attach too', async function () {
      tb = await startTestBroker();
      await send(tb.url, browseOnly('dr.cf'), [1, 2].map((v) => ({ body: JSON.stringify({ v }) })));
      const filtered = durableSource('dr.cf', { filter: tmFilters({ filter: '/v > 0' }) });
      const checkpointed = durableSource('dr.cf', { filter: tmFilters({ checkpoint: FLEX }) });
      expect((await readDurable(filtered, 'cf')).map((m) => `${cmdOf(m)} ${scnOf(m)}`)).to.deep.equal(['publish 1', 'publish 2']);
      expect((await readDurable(checkpointed, 'ck')).map((m) => `${cmdOf(m)} ${scnOf(m)} ${plainCp(m)?.windowScn}`)).to.deep.equal(['publish 1 1', 'publish 2 2']);
      await send(tb.url, 'dr.cf', [{ body: JSON.stringify({ v: 3 }) }]);
      expect((await readDurable(filtered, 'cf')).map((m) => `${cmdOf(m)} ${scnOf(m)}`)).to.deep.equal(['publish 3']);
      expect((await readDurable(checkpointed, 'ck')).map((m) => `${cmdOf(m)} ${scnOf(m)} ${plainCp(m)?.windowScn}`)).to.deep.equal(['publish 3 3']);
    });
  });

  describe('4. a time bookmark older than the retained log of a plain queue', function () {
    // one broker for this block (tb4: the outer afterEach stops tb)
    let tb4: TestBroker | undefined;
    let T = '';
    const sowT = { T: '' };
    before(async function () {
      tb4 = await startTestBroker();
      for (const [name, extra] of [['pt.bo', { 'qpid.browse-only': true }], ['pt.sow', { 'sow.key': '/id' }]] as const) {
        for (let i = 1; i <= 10; i++) {
          await send(tb4!.url, { address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'log.max_count': 5, ...extra } }, [{ body: JSON.stringify({ id: `k${i}`, i }) }]);
          await sleep(15);
          if (i === 2) { const t = new Date().toISOString(); if (name === 'pt.bo') T = t; else sowT.T = t; await sleep(15); }
        }
      }
    });
    after(async () => { await tb4?.stop(); });

    const replay = (address: string, bookmark: string, options?: Record<string, unknown>) => attachAndRead(tb4!.url, { address, filter: tmFilters({ command: 'subscribe', bookmark, options }) }, { idleMs: 600, credit: 50 });

    it('SOW queue (reference): default `now` replays nothing old; fail is scn-not-found', async function () {
      expect((await replay('pt.sow', sowT.T)).got.map((m) => [cmdOf(m), scnOf(m)])).to.deep.equal([['completed', 10]]);
      expect((await replay('pt.sow', sowT.T, { bookmark_not_found: 'fail' })).err?.condition).to.equal('tidemark:scn-not-found');
    });
    it('browse-only queue: default `now` replays nothing old', async function () {
      const { got } = await replay('pt.bo', T);
      expect(got.map((m) => [cmdOf(m), scnOf(m)])).to.deep.equal([['completed', 10]]);
    });
    it('browse-only queue: bookmark_not_found fail is scn-not-found, epoch replays what is retained', async function () {
      const { err, got } = await replay('pt.bo', T, { bookmark_not_found: 'fail' });
      expect(err?.condition, `got ${show(got)}`).to.equal('tidemark:scn-not-found');
      expect((await replay('pt.bo', T, { bookmark_not_found: 'epoch' })).got.map(scnOf)).to.deep.equal([6, 7, 8, 9, 10, 10]);
    });
    it('browse-only queue: a time the retained log covers replays after it', async function () {
      const { got } = await replay('pt.bo', new Date().toISOString());
      expect(got.map((m) => [cmdOf(m), scnOf(m)])).to.deep.equal([['completed', 10]]);
      const before = await replay('pt.bo', '20200101T000000Z', { bookmark_not_found: 'fail' });
      expect(before.err?.condition).to.equal('tidemark:scn-not-found');
    });
  });

  describe('5. a checkpoint from a deleted and re-created queue', function () {
    /** Reads with a checkpoint until `until` (or idle). */
    const read = (q: string, checkpoint: unknown, until?: (m: Received) => boolean, count?: number) => attachAndRead(tb!.url, { address: q, filter: tmFilters({ checkpoint }) }, { until: until ?? (count !== undefined ? (() => { let n = 0; return () => ++n >= count; })() : undefined), credit: 500, idleMs: 800 }).then((r) => r.got);
    const asFilter = (cp: any) => JSON.stringify(cp);

    async function recreate(q: string, n: number) {
      await sleep(5);
      expect(await tb!.broker.nodes.delete(q)).to.equal(true);
      await sleep(5);
      await send(tb!.url, sowQ(q), Array.from({ length: n }, (_, i) => rec(`new${String(i).padStart(3, '0')}`, i)));
    }

    it('an online position the new queue still covers is not taken for a position in it: a full bootstrap', async function () {
      tb = await startTestBroker();
      await send(tb.url, sowQ('rc.q'), Array.from({ length: 50 }, (_, i) => rec(`old${i}`, i))); // SCN 1-50
      const seen = await read('rc.q', FLEX, undefined, 50);
      const cp = plainCp(seen[seen.length - 1]);
      expect(cp.windowScn).to.equal(50);
      await recreate('rc.q', 100); // SCN 1-100 of the new queue
      const got = await read('rc.q', asFilter(cp), (m) => cmdOf(m) === 'completed');
      expect(`${cmdOf(got[0])} ${plainCp(got[0])?.consumption_mode} ${plainCp(got[0])?.bootstrap_since_scn}`).to.equal('group_begin BOOTSTRAP_SNAPSHOT 0');
      expect(got.filter((m) => cmdOf(m) === 'sow')).to.have.length(100);
    });

    it('a snapshot checkpoint (and a catch-up one) from the earlier queue: a full bootstrap, not a resumed snapshot', async function () {
      tb = await startTestBroker();
      await send(tb.url, sowQ('rs.q'), Array.from({ length: 50 }, (_, i) => rec(`old${String(i).padStart(3, '0')}`, i)));
      const boot = await read('rs.q', { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 0, prevScn: 0, windowOffset: -1 }, (m) => cmdOf(m) === 'completed');
      const midSnapshot = plainCp(boot.find((m) => keyOf(m) === 'old010')!);
      const catchUp = plainCp(boot.find((m) => cmdOf(m) === 'group_end')!);
      expect(midSnapshot).to.include({ consumption_mode: 'BOOTSTRAP_SNAPSHOT', snapshot_offset: 'old010' });
      expect(catchUp).to.include({ consumption_mode: 'BOOTSTRAP_CATCHUP' });
      expect(midSnapshot.tsNsecs, 'a snapshot checkpoint carries the time it was taken').to.be.a('string');
      await recreate('rs.q', 100);
      for (const cp of [midSnapshot, catchUp]) {
        const got = await read('rs.q', asFilter(cp), (m) => cmdOf(m) === 'completed');
        expect(`${cmdOf(got[0])} ${plainCp(got[0])?.consumption_mode} ${plainCp(got[0])?.snapshot_offset}`, cp.consumption_mode).to.equal('group_begin BOOTSTRAP_SNAPSHOT undefined');
        expect(got.filter((m) => cmdOf(m) === 'sow'), cp.consumption_mode).to.have.length(100);
      }
    });

    it('a checkpoint of this queue (or one without tsNsecs) still resumes online', async function () {
      tb = await startTestBroker();
      await send(tb.url, sowQ('ok.q'), Array.from({ length: 5 }, (_, i) => rec(`k${i}`, i)));
      const seen = await read('ok.q', FLEX, undefined, 3);
      const cp = plainCp(seen[2]);
      const got = await read('ok.q', asFilter(cp));
      expect(got.map((m) => `${cmdOf(m)} ${scnOf(m)}`)).to.deep.equal(['publish 4', 'publish 5']);
      const { tsNsecs: _t, ...noTs } = cp;
      expect((await read('ok.q', asFilter(noTs))).map(scnOf)).to.deep.equal([4, 5]);
    });
  });

  describe('a conflated message on a checkpoint link', function () {
    it('carries the checkpoint before the oldest event still held back for another key', async function () {
      tb = await startTestBroker();
      await send(tb.url, sowQ('cf.q'), [rec('a', 0)]); // SCN 1
      const c = await connect(tb.url);
      try {
        const rcv = await openReceiver(c, { address: 'cf.q', filter: tmFilters({ checkpoint: { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 1, prevScn: 1, windowOffset: -1 }, options: { conflation: '400ms' } }) });
        const got: Received[] = [];
        rcv.on('message', (ctx: any) => { got.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept(); });
        rcv.add_credit(50);
        await send(tb.url, 'cf.q', [rec('a', 1)]); // SCN 2
        await waitFor(() => got.length === 1);
        // right after a flush: the next four are held together until the next one
        await send(tb.url, 'cf.q', [rec('b', 1), rec('a', 2), rec('c', 1), rec('b', 2)]); // SCN 3-6
        await waitFor(() => got.length === 4);
        await sleep(500);
        expect(got.map((m) => `${keyOf(m)} ${scnOf(m)}`)).to.deep.equal(['a 2', 'a 4', 'c 5', 'b 6']);
        // b has been held since 3: until it is sent, a resume must start there (a and c come again)
        expect(got.map((m) => plainCp(m)?.prevScn)).to.deep.equal([2, 2, 2, 6]);
      } finally { await c.close(); }
    });
  });
});
