/**
 * SOW history, session 23 review (docs/robustness.md 14, "History"): granularity goes by when
 * a copy was kept, a historical top_n 0 query, time bookmarks under concurrent publishing, the
 * version index with churning keys, and the bookmark edge cases.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, collect, errorOf, send, sleep } from '../support/client.js';
import { tmFilters, sowQuery, keyOf, bodyJson, cmdOf, scnOf } from '../support/sow-client.js';
import { ManualClock } from '../../lib/index.js';
import { runRetention } from '../../lib/ext/sow/index.js';
import { SowStructure } from '../../lib/ext/sow/sow-structure.js';
import { readKeyHistory } from '../../lib/ext/sow/history-read.js';
import { timeKey, histKey } from '../../lib/ext/sow/tables.js';
import { encodeEvent, decodeEvent } from '../../lib/core/engine/event-record.js';

const T0 = Date.UTC(2026, 5, 1, 9, 0, 0), SEC = 1000, MIN = 60 * SEC;
const iso = (ms: number) => new Date(ms).toISOString();
const del = (id: string) => ({ message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id }) });
const pub = (id: string, v: number) => ({ body: JSON.stringify({ id, v }) });

describe('history audit (session 23 review)', function () {
  this.timeout(60000);
  let clock: ManualClock;
  let tb: TestBroker;
  beforeEach(async () => { clock = new ManualClock(T0); tb = await startTestBroker({}, { clock }); });
  afterEach(async () => { await tb.stop(); });

  const declare = (q: string, props: Record<string, string>) => ({ address: q, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', ...props } });
  async function at(t: number, q: string | object, msg: object): Promise<void> {
    clock.set(T0 + t);
    const o = await send(tb.url, q, [msg]);
    expect(o[0].state, JSON.stringify(o[0])).to.equal('accepted');
  }
  const state = async (q: string, t: number) => (await sowQuery(tb.url, q, { bookmark: iso(T0 + t) })).records.map((m) => `${keyOf(m)}=${bodyJson(m).v}`);
  const kept = async (q: string, key: string) => (await readKeyHistory(tb.broker.nodes.get(q)!, key))!.versions.map((x) => x.scn);

  describe('granularity: a copy is kept when the event superseding it arrives, no more than once per G', () => {
    const G10 = { 'sow.history.window': '1d', 'sow.history.granularity': '10s' };

    it('a version current for an hour, made 3 s after the kept one, is kept (it was dropped: a query inside the hour answered the version before it)', async () => {
      await at(0, declare('g.long', G10), pub('a', 1));
      await at(5 * SEC, 'g.long', pub('a', 2)); // v1 kept (at 5 s)
      await at(8 * SEC, 'g.long', pub('a', 3)); // v2 dropped (8 - 5 < 10)
      await at(3600 * SEC, 'g.long', pub('a', 4)); // v3 kept (3600 - 5 >= 10)
      clock.set(T0 + 3700 * SEC);
      expect(await kept('g.long', 'a')).to.deep.equal([1, 3, 4]);
      expect(await state('g.long', 1800 * SEC)).to.deep.equal(['a=3']);
      expect(await state('g.long', 6 * SEC)).to.deep.equal(['a=1']); // v2 (5-8 s) skipped: the state before it
    });

    it('a tombstone current for an hour is kept: the key stays deleted for a query inside that hour (it answered the version kept before the delete)', async () => {
      await at(0, declare('g.tomb', G10), pub('a', 1));
      await at(5 * SEC, 'g.tomb', pub('a', 2)); // v1 kept at 5 s
      await at(8 * SEC, 'g.tomb', del('a')); // v2 dropped
      await at(3600 * SEC, 'g.tomb', pub('a', 3)); // the tombstone kept
      clock.set(T0 + 3700 * SEC);
      expect(await kept('g.tomb', 'a')).to.deep.equal([1, 3, 4]);
      expect(await state('g.tomb', 1800 * SEC)).to.deep.equal([]);
      // Deleted for less than G since the last copy kept: the tombstone goes, and the key shows its older kept version then.
      await at(3603 * SEC, 'g.tomb', del('a')); // v3 dropped? 3603 - 3600 < 10: yes
      await at(3605 * SEC, 'g.tomb', pub('a', 4)); // the tombstone at 3603 dropped (3605 - 3600 < 10)
      expect(await kept('g.tomb', 'a')).to.deep.equal([1, 3, 6]);
      clock.set(T0 + 3700 * SEC);
      expect(await state('g.tomb', 3604 * SEC)).to.deep.equal([]); // the tombstone at 8 s, the state kept before
    });

    it('a restart gets back when the last copy was kept (stored with the version), not the time of a version', async () => {
      await at(0, declare('g.restart', G10), pub('a', 1));
      await at(5 * SEC, 'g.restart', pub('a', 2)); // v1 kept at 5 s
      await at(8 * SEC, 'g.restart', pub('a', 3)); // v2 dropped; last copy kept at 5 s
      await tb.restart();
      await at(16 * SEC, 'g.restart', pub('a', 4)); // 16 - 5 >= 10: v3 kept (by v3's own time, 8 s, or v1's, it was dropped)
      clock.set(T0 + 20 * SEC);
      expect(await kept('g.restart', 'a')).to.deep.equal([1, 3, 4]);
      expect(await state('g.restart', 12 * SEC)).to.deep.equal(['a=3']);
      await at(20 * SEC, 'g.restart', pub('a', 5)); // 20 - 16 < 10: v4 dropped
      expect(await kept('g.restart', 'a')).to.deep.equal([1, 3, 5]);
    });

    it('rows written before the keeping time was stored: the newest row\'s time is taken (fewer copies, never two within G)', async () => {
      await at(0, declare('g.old', G10), pub('a', 1));
      await at(5 * SEC, 'g.old', pub('a', 2)); // v1 kept at 5 s
      await at(8 * SEC, 'g.old', pub('a', 3)); // v2 dropped
      // The rows as an earlier Tidemark wrote them: no `kept`.
      const q = tb.broker.nodes.get('g.old')!;
      const rows = await q.ctx.store.all({ gte: histKey(q.id, 'a', 0), lte: histKey(q.id, 'a', 1e9) });
      expect(rows.some(([, v]) => decodeEvent(v).meta.kept === 5 * SEC + T0)).to.equal(true);
      await q.ctx.store.batch(rows.map(([k, v]) => { const { meta, message } = decodeEvent(v); return { type: 'put' as const, key: k, value: encodeEvent({ ts: meta.ts, op: meta.op }, message) }; }), true);
      await tb.restart();
      await at(16 * SEC, 'g.old', pub('a', 4)); // taken as kept at 8 s (v3's time): 16 - 8 < 10, v3 dropped
      expect(await kept('g.old', 'a')).to.deep.equal([1, 4]);
      await at(19 * SEC, 'g.old', pub('a', 5)); // 19 - 8 >= 10: v4 kept (its row, written now, says the last copy went at 8 s)
      await at(25 * SEC, 'g.old', pub('a', 6)); // 25 - 19 < 10: v5 dropped
      expect(await kept('g.old', 'a')).to.deep.equal([1, 4, 6]);
    });
  });

  describe('historical top_n 0', () => {
    /** Holds every batch written for `ms`: the committer stays busy, so a query waits for its quiescent point. */
    function slowWrites(ms: number): () => void {
      const store = tb.broker.nodes.get('t0.q')!.ctx.store as any;
      const orig = store.batch;
      store.batch = async (...a: unknown[]) => { await sleep(ms); return orig.apply(store, a); };
      return () => { store.batch = orig; };
    }

    it('sow_and_subscribe: group_end carries the bookmark SCN and the scan is released, with the committer busy when it attaches', async () => {
      for (let i = 0; i < 30; i++) await at(i, i === 0 ? declare('t0.q', { 'sow.history.window': '1h' }) : 't0.q', pub(`k${i % 5}`, i));
      clock.set(T0 + MIN);
      const s = tb.broker.nodes.get('t0.q')!.structure as SowStructure;
      const restore = slowWrites(300);
      const busy = send(tb.url, 't0.q', [pub('k0', 99)]); // in flight while the link attaches
      await sleep(50);
      const c = await connect(tb.url);
      try {
        const rcv = await openReceiver(c, { address: 't0.q', filter: tmFilters({ command: 'sow_and_subscribe', bookmark: '20', options: { top_n: 0 } }) });
        const got = await collect(rcv, { idleMs: 1500, credit: 100 });
        restore();
        await busy;
        const ge = got.find((m) => cmdOf(m) === 'group_end');
        expect(ge && scnOf(ge), got.map((m) => `${cmdOf(m)}:${scnOf(m)}`).join(' ')).to.equal(20);
        expect(got.filter((m) => cmdOf(m) === 'sow')).to.have.length(0);
        expect(got.filter((m) => cmdOf(m) === 'publish').map(scnOf)).to.deep.equal([21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]);
        expect(got.filter((m) => cmdOf(m) === 'completed')).to.have.length(1);
        await sleep(300);
        expect(s.versions.openReaders, 'index readers held by the idle link').to.equal(0);
      } finally { restore(); await c.close(); }
    });

    it('sow with order_by: group_end carries the bookmark SCN, the committer busy when it attaches', async () => {
      for (let i = 0; i < 30; i++) await at(i, i === 0 ? declare('t0.q', { 'sow.history.window': '1h' }) : 't0.q', pub(`k${i % 5}`, i));
      clock.set(T0 + MIN);
      const restore = slowWrites(300);
      const busy = send(tb.url, 't0.q', [pub('k0', 99)]);
      await sleep(50);
      try {
        const r = await sowQuery(tb.url, 't0.q', { bookmark: '20', options: { top_n: 0, order_by: '/v' } });
        expect(r.groupEnd).to.equal(20);
        expect(r.records).to.have.length(0);
      } finally { restore(); await busy; }
    });
  });

  describe('time bookmarks: the last event at or before T', () => {
    it('an event committed while the time index is read, newer than T, is not in the answer', async () => {
      await at(0, declare('tb.q', { 'sow.history.window': '1h' }), pub('a', 1));
      clock.set(T0 + 10 * SEC);
      const q = tb.broker.nodes.get('tb.q')!;
      const store = q.ctx.store as any;
      const orig = store.all;
      const T = T0 + 5 * SEC;
      const afterT = timeKey(q.id, T + 1, 0);
      let hooked = false;
      // The read of "the first index row after T" returns, then an event at 10 s commits before scnAtTime goes on.
      store.all = async (opts: any, ...rest: unknown[]) => {
        const rows = await orig.call(store, opts, ...rest);
        if (!hooked && Buffer.isBuffer(opts?.gte) && opts.gte.equals(afterT)) { hooked = true; await send(tb.url, 'tb.q', [pub('a', 2)]); }
        return rows;
      };
      try {
        const r = await sowQuery(tb.url, 'tb.q', { bookmark: iso(T) });
        expect(hooked).to.equal(true);
        expect(r.groupEnd).to.equal(1);
        expect(r.records.map((m) => bodyJson(m).v)).to.deep.equal([1]);
      } finally { store.all = orig; }
    });

    it('an event at or before a past T still being written is in the answer', async () => {
      await at(0, declare('tw.q', { 'sow.history.window': '1h' }), pub('a', 1));
      const q = tb.broker.nodes.get('tw.q')!;
      const store = q.ctx.store as any;
      const orig = store.batch;
      store.batch = async (...a: unknown[]) => { await sleep(400); return orig.apply(store, a); };
      try {
        clock.set(T0 + 3 * SEC);
        const writing = send(tb.url, 'tw.q', [pub('a', 2)]); // SCN 2 at 3 s, durable in 400 ms
        await sleep(50);
        clock.set(T0 + 5 * SEC);
        const r = await sowQuery(tb.url, 'tw.q', { bookmark: iso(T0 + 4 * SEC) });
        await writing;
        expect(r.groupEnd).to.equal(2);
        expect(r.records.map((m) => bodyJson(m).v)).to.deep.equal([2]);
      } finally { store.batch = orig; }
    });
  });

  it('the version index does not keep the keys the sweep purged whole (order ids, no historical query)', async () => {
    const q = 'churn.q';
    const s0 = await send(tb.url, declare(q, { 'sow.history.window': '1s' }), [pub('seed', 0)]);
    expect(s0[0].state).to.equal('accepted');
    const s = tb.broker.nodes.get(q)!.structure as SowStructure;
    for (let round = 0; round < 8; round++) {
      const msgs: object[] = [];
      for (let i = 0; i < 1000; i++) { const id = `order-${round}-${i}`; msgs.push(pub(id, 1), del(id)); }
      const out = await send(tb.url, q, msgs);
      expect(out.every((o) => o.state === 'accepted')).to.equal(true);
      clock.set(clock.now() + 5 * SEC);
      await runRetention(tb.broker);
    }
    expect(s.versions.size, 'versions left').to.equal(1); // the seed's
    expect(s.versions.keyCount, 'keys with an entry in the index').to.be.at.most(2100);
  });

  describe('bookmarks', () => {
    async function setup(q: string) {
      await at(0, declare(q, { 'sow.history.window': '10m' }), pub('a', 1));
      await at(MIN, q, pub('a', 2));
      await at(MIN, q, del('a'));
      await at(2 * MIN, q, pub('a', 3));
      clock.set(T0 + 30 * MIN);
      await runRetention(tb.broker);
    }
    async function attach(q: string, command: string, bookmark: string) {
      const c = await connect(tb.url);
      try {
        const rcv = await openReceiver(c, { address: q, filter: tmFilters({ command, bookmark }) });
        const got = await collect(rcv, { idleMs: 400, credit: 50 });
        return { got: got.map((m) => `${cmdOf(m)}:${scnOf(m)}`), error: errorOf(rcv.error), info: rcv.error?.info };
      } catch (e: any) { return { got: [], error: { condition: e.condition, description: e.message }, info: undefined }; } finally { await c.close(); }
    }

    it('a sow_and_subscribe older than the window reports as oldest-scn the oldest SCN it may start from (it was the log floor)', async () => {
      await setup('bm.old');
      const r = await attach('bm.old', 'sow_and_subscribe', '1');
      expect(r.error.condition).to.equal('tidemark:scn-not-found');
      // Events 1-4 at 0, 1, 1, 2 min; the window starts at 20 min: the state after SCN 4 is the oldest one kept.
      expect(r.info).to.deep.equal({ 'oldest-scn': 4, 'requested-scn': 1 });
      const retry = await attach('bm.old', 'sow_and_subscribe', '4');
      expect(retry.error.condition).to.equal(undefined);
      expect(retry.got).to.deep.equal(['group_begin:-1', 'sow:4', 'group_end:4', 'completed:4']);
    });

    it('a decimal SCN bookmark is its value: 00 is 0, 004 is 4', async () => {
      await setup('bm.zero');
      for (const command of ['sow', 'sow_and_subscribe']) {
        expect(await attach('bm.zero', command, '00'), command).to.deep.equal(await attach('bm.zero', command, '0'));
        expect(await attach('bm.zero', command, '004'), command).to.deep.equal(await attach('bm.zero', command, '4'));
      }
      expect((await attach('bm.zero', 'sow_and_subscribe', '00')).got).to.deep.equal(['group_begin:-1', 'group_end:0', 'publish:1', 'publish:2', 'delete:3', 'publish:4', 'completed:4']);
    });

    it('an SCN past the last committed one is refused (amqp:invalid-field), as docs/sow.md now says', async () => {
      await setup('bm.ahead');
      for (const command of ['sow', 'sow_and_subscribe']) expect((await attach('bm.ahead', command, '5')).error.condition, command).to.equal('amqp:invalid-field');
    });
  });
});
