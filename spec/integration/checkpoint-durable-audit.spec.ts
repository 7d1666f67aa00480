/**
 * Checkpoints, durable subscriptions and replays whose position the log no longer holds
 * (a code review, session 22). Each case failed on the code before its fix:
 * 1. the log trim deleted rows before it moved the floor: a checkpoint reader attaching, or
 *    one streaming from the log, went on from the first row left (a gap, no bootstrap);
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
});
