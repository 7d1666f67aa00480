import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, openSender, sendAll, collect, send, sleep, type Received } from '../support/client.js';
import { tmFilters, cmdOf, scnOf, keyOf, bodyJson, sowQuery } from '../support/sow-client.js';
import { ManualClock } from '../../lib/index.js';
import { runRetention } from '../../lib/ext/sow/index.js';
import { SowStructure } from '../../lib/ext/sow/sow-structure.js';

const S = 1000, M = 60 * S;
const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);
const iso = (ms: number) => new Date(ms).toISOString();
const amps = (ms: number) => new Date(ms).toISOString().replace(/[-:]/g, '').replace(/\.(\d{3})Z$/, '.$1000Z');

function histQueue(name: string, args: Record<string, unknown> = {}) {
  return { address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', 'sow.history.window': '1h', ...args } };
}
const pub = (body: Record<string, unknown>, o?: string) => (o ? { message_annotations: { 'x-opt-tm-op': o }, body: JSON.stringify(body) } : { body: JSON.stringify(body) });

async function stateAt(url: string, q: string, bookmark: string): Promise<Record<string, unknown>> {
  const r = await sowQuery(url, q, { bookmark });
  return Object.fromEntries(r.records.map((m) => [keyOf(m), bodyJson(m).v]));
}

/** Subscribes with filters; returns messages up to and including `completed`, plus a live tail. */
async function subscribeUntilCompleted(url: string, q: string, f: Parameters<typeof tmFilters>[0], then?: () => Promise<void>, liveCount = 0): Promise<Received[]> {
  const c = await connect(url);
  try {
    const rcv = await openReceiver(c, { address: q, filter: tmFilters(f) });
    const got = await collect(rcv, { idleMs: 3000, credit: 500, until: (m) => cmdOf(m) === 'completed' });
    if (then) {
      const live = collect(rcv, { idleMs: 1500, credit: 500, count: liveCount });
      await then();
      got.push(...(await live));
    }
    return got;
  } finally { await c.close(); }
}

describe('history and replay (semantics.md 6, 7)', function () {
  this.timeout(60000);
  let clock: ManualClock;
  let tb: TestBroker;
  beforeEach(async () => { clock = new ManualClock(T0); tb = await startTestBroker({}, { clock }); });
  afterEach(async () => { await tb.stop(); });

  async function at(ms: number, q: string, msgs: unknown[]) {
    clock.set(ms);
    const out = await send(tb.url, q === 'new' ? q : q, msgs as any[]);
    expect(out.every((o) => o.state === 'accepted'), JSON.stringify(out)).to.equal(true);
  }

  it('granularity 0: a query at T returns the versions current at T, deleted-later included, deleted-before excluded', async function () {
    const q = 'h.g0';
    clock.set(T0); await send(tb.url, histQueue(q), [pub({ id: 'a', v: 1 }), pub({ id: 'b', v: 1 }), pub({ id: 'c', v: 1 })]);
    await at(T0 + 10 * S, q, [pub({ id: 'a', v: 2 }), pub({ id: 'c' }, 'delete')]);
    await at(T0 + 20 * S, q, [pub({ id: 'a', v: 3 }), pub({ id: 'b' }, 'delete'), pub({ id: 'd', v: 1 })]);
    await at(T0 + 30 * S, q, [pub({ id: 'c', v: 9 })]);
    clock.set(T0 + 40 * S);
    expect(await stateAt(tb.url, q, iso(T0 + 5 * S))).to.deep.equal({ a: 1, b: 1, c: 1 });
    expect(await stateAt(tb.url, q, amps(T0 + 15 * S))).to.deep.equal({ a: 2, b: 1 });
    expect(await stateAt(tb.url, q, iso(T0 + 25 * S))).to.deep.equal({ a: 3, d: 1 });
    expect(await stateAt(tb.url, q, iso(T0 + 35 * S))).to.deep.equal({ a: 3, c: 9, d: 1 });
    expect(await stateAt(tb.url, q, iso(T0 - S))).to.deep.equal({});
    // exact boundary: an event at T is included
    expect(await stateAt(tb.url, q, iso(T0 + 10 * S))).to.deep.equal({ a: 2, b: 1 });
    // SCN bookmarks: state after event N (events 1-3 at T0, 4-5 at +10s)
    expect(await stateAt(tb.url, q, '4')).to.deep.equal({ a: 2, b: 1, c: 1 });
    const r = await sowQuery(tb.url, q, { bookmark: '4' });
    expect(r.groupEnd).to.equal(4);
  });

  it('a T older than the window returns nothing; superseded versions are purged once older than the window, the current one never', async function () {
    const q = 'h.window';
    clock.set(T0); await send(tb.url, histQueue(q, { 'sow.history.window': '10m' }), [pub({ id: 'a', v: 1 }), pub({ id: 'x', v: 1 })]);
    await at(T0 + 1 * M, q, [pub({ id: 'a', v: 2 })]);
    await at(T0 + 2 * M, q, [pub({ id: 'x' }, 'delete')]);
    clock.set(T0 + 5 * M);
    expect(await stateAt(tb.url, q, iso(T0 + 30 * S))).to.deep.equal({ a: 1, x: 1 });
    const before = tb.broker.queueInfo(tb.broker.nodes.get(q)!).history_versions as number;
    expect(before).to.equal(4);
    clock.set(T0 + 12 * M + S);
    await runRetention(tb.broker);
    expect(await stateAt(tb.url, q, iso(T0 + 30 * S))).to.deep.equal({});
    // sow_and_subscribe from there has no state to start from (semantics.md 6): refused at
    // attach with scn-not-found saying so, before any marker
    const c = await connect(tb.url);
    try {
      // (a time bookmark is resolved after the attach: the link is then detached)
      const rcv = await openReceiver(c, { address: q, filter: tmFilters({ command: 'sow_and_subscribe', bookmark: iso(T0 + 30 * S) }) });
      const got = await collect(rcv, { idleMs: 500 });
      expect(got.map(cmdOf), 'no markers before the error').to.deep.equal([]);
      expect(rcv.error?.condition).to.equal('tidemark:scn-not-found');
      expect(rcv.error?.description).to.equal(`bookmark ${iso(T0 + 30 * S)} is older than the history window of ${q} (600000 ms): no state to start a sow_and_subscribe from (the oldest SCN it can start from is 4)`);
      // (events 1-4 at T0, T0, +1m, +2m; the window starts at +2m 1s: the state after SCN 4 is the oldest kept)
      expect(rcv.error?.info).to.deep.equal({ 'oldest-scn': 4, 'requested-scn': 2 });
    } finally { await c.close(); }
    // a1 stopped being current at +1m, more than the window ago: purged; a2 is current: kept;
    // x's version stopped at +2m and its tombstone is from +2m, both past the window: purged.
    expect(tb.broker.queueInfo(tb.broker.nodes.get(q)!).history_versions).to.equal(1);
    expect(await stateAt(tb.url, q, iso(T0 + 11 * M))).to.deep.equal({ a: 2 });
  });

  it('an SCN bookmark older than the window answers as a time that old does: nothing (never a state mixing purged and kept versions)', async function () {
    // log.max_count 2: SCN 2's time comes from the time index, SCN 4's from its log row
    const q = 'h.scnwindow';
    clock.set(T0); await send(tb.url, histQueue(q, { 'sow.history.window': '10m', 'log.max_count': 2 }), [pub({ id: 'a', v: 1 }), pub({ id: 'b', v: 1 })]);
    await at(T0 + 1 * M, q, [pub({ id: 'b', v: 2 }), pub({ id: 'c', v: 1 })]);
    await at(T0 + 2 * M, q, [pub({ id: 'c' }, 'delete')]);
    clock.set(T0 + 5 * M);
    await runRetention(tb.broker);
    expect(await stateAt(tb.url, q, '2')).to.deep.equal({ a: 1, b: 1 });
    expect(await stateAt(tb.url, q, '4')).to.deep.equal({ a: 1, b: 2, c: 1 });
    clock.set(T0 + 12 * M + S);
    await runRetention(tb.broker);
    // b1 and c1 are purged, a1 and b2 kept: a state at 2 or 4 would be [a1] / [a1, b2], which never existed
    const at2 = await sowQuery(tb.url, q, { bookmark: '2' });
    expect(at2.records.map(keyOf)).to.deep.equal([]);
    expect(await stateAt(tb.url, q, '4')).to.deep.equal({});
    // the head's state is the current one, however old its event; 'now' the same
    expect(await stateAt(tb.url, q, '5')).to.deep.equal({ a: 1, b: 2 });
    expect(await stateAt(tb.url, q, 'now')).to.deep.equal({ a: 1, b: 2 });
    // a state that lasted into the window is answered: publish at +12m, then SCN 5 (lasting until +12m) is in it
    await at(T0 + 12 * M + 2 * S, q, [pub({ id: 'd', v: 1 })]);
    expect(await stateAt(tb.url, q, '5')).to.deep.equal({ a: 1, b: 2 });
    expect(await stateAt(tb.url, q, '4')).to.deep.equal({});
  });

  it('a historical query applies the content filter, top_n and skip_n (streamed) and order_by', async function () {
    const q = 'h.opts';
    clock.set(T0); await send(tb.url, histQueue(q), ['a', 'b', 'c', 'd', 'e'].map((id, i) => pub({ id, v: i + 1 })));
    await at(T0 + 10 * S, q, ['a', 'b', 'c', 'd', 'e'].map((id) => pub({ id, v: 100 })));
    const at5 = iso(T0 + 5 * S);
    const keysOf = async (f: Record<string, unknown>) => (await sowQuery(tb.url, q, { bookmark: at5, ...f })).records.map((m) => `${keyOf(m)}${bodyJson(m).v}`);
    expect(await keysOf({ filter: '/v >= 2' })).to.deep.equal(['b2', 'c3', 'd4', 'e5']);
    expect(await keysOf({ filter: '/v >= 2', options: { top_n: 2, skip_n: 1 } })).to.deep.equal(['c3', 'd4']);
    expect(await keysOf({ options: { top_n: 2, order_by: '/v DESC' } })).to.deep.equal(['e5', 'd4']);
  });

  it('the window purge continues after a restart (what to purge is rebuilt from storage)', async function () {
    const q = 'h.purge-restart';
    clock.set(T0); await send(tb.url, histQueue(q, { 'sow.history.window': '10m' }), [pub({ id: 'a', v: 1 }), pub({ id: 'x', v: 1 })]);
    await at(T0 + 1 * M, q, [pub({ id: 'a', v: 2 }), pub({ id: 'x' }, 'delete')]);
    await tb.restart();
    tb.url = tb.broker.urls[0];
    clock.set(T0 + 12 * M);
    await runRetention(tb.broker);
    expect(tb.broker.queueInfo(tb.broker.nodes.get(q)!).history_versions).to.equal(1);
    expect(await stateAt(tb.url, q, iso(T0 + 11 * M))).to.deep.equal({ a: 2 });
  });

  it('granularity G keeps at most one superseded version per key per G, and queries return states that existed', async function () {
    const q = 'h.gran';
    clock.set(T0); await send(tb.url, histQueue(q, { 'sow.history.granularity': '1m' }), [pub({ id: 'a', v: 0 })]);
    for (let i = 1; i <= 12; i++) await at(T0 + i * 10 * S, q, [pub({ id: 'a', v: i })]);
    clock.set(T0 + 3 * M);
    const versions = tb.broker.queueInfo(tb.broker.nodes.get(q)!).history_versions as number;
    // 13 versions over 2 minutes at G = 1m: v0, v6 kept as superseded (+ v12 current), or so: far fewer than 13.
    expect(versions).to.be.at.most(4);
    const seen = new Set<number>();
    for (let t = 0; t <= 120; t += 5) {
      const st = await stateAt(tb.url, q, iso(T0 + t * S));
      const v = st.a as number;
      expect(v, `state at +${t}s`).to.be.at.most(Math.floor(t / 10));
      seen.add(v);
    }
    expect([...seen].every((v) => Number.isInteger(v) && v >= 0 && v <= 12)).to.equal(true);
  });

  it('a key deleted and re-created has the right state on each side of the gap', async function () {
    const q = 'h.recreate';
    clock.set(T0); await send(tb.url, histQueue(q), [pub({ id: 'k', v: 1 })]);
    await at(T0 + 10 * S, q, [pub({ id: 'k' }, 'delete')]);
    await at(T0 + 20 * S, q, [pub({ id: 'k', v: 2 })]);
    expect(await stateAt(tb.url, q, iso(T0 + 5 * S))).to.deep.equal({ k: 1 });
    expect(await stateAt(tb.url, q, iso(T0 + 15 * S))).to.deep.equal({});
    expect(await stateAt(tb.url, q, iso(T0 + 25 * S))).to.deep.equal({ k: 2 });
  });

  it('a bookmark on a queue without history is amqp:invalid-field; a malformed bookmark too', async function () {
    await send(tb.url, { address: 'h.nohist', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } }, [pub({ id: 'a', v: 1 })]);
    const c = await connect(tb.url);
    try {
      for (const [q, f] of [['h.nohist', { command: 'sow', bookmark: iso(T0) }], ['h.nohist', { command: 'subscribe', bookmark: 'yesterday' }]] as const) {
        let err: any;
        try { await openReceiver(c, { address: q, filter: tmFilters(f) }); } catch (e) { err = e; }
        expect(err?.condition, JSON.stringify(f)).to.equal('amqp:invalid-field');
      }
    } finally { await c.close(); }
  });

  it('historical sow_and_subscribe: state at T, every event after it in SCN order, completed, then live', async function () {
    const q = 'h.sas';
    clock.set(T0); await send(tb.url, histQueue(q), [pub({ id: 'a', v: 1 }), pub({ id: 'b', v: 1 })]);
    await at(T0 + 10 * S, q, [pub({ id: 'a', v: 2 }), pub({ id: 'b' }, 'delete')]);
    await at(T0 + 20 * S, q, [pub({ id: 'c', v: 1 })]);
    const got = await subscribeUntilCompleted(tb.url, q, { command: 'sow_and_subscribe', bookmark: iso(T0 + 5 * S) }, async () => {
      await at(T0 + 30 * S, q, [pub({ id: 'a', v: 3 })]);
    }, 1);
    const seq = got.map((m) => `${cmdOf(m)}:${keyOf(m)}`);
    expect(seq).to.deep.equal(['group_begin:', 'sow:a', 'sow:b', 'group_end:', 'publish:a', 'delete:b', 'publish:c', 'completed:', 'publish:a']);
    expect(scnOf(got[3])).to.equal(2);
    const live = got.filter((m) => cmdOf(m) === 'publish').map(scnOf);
    expect(live).to.deep.equal([3, 5, 6]);
    const map = new Map<string, number>();
    for (const m of got) {
      if (cmdOf(m) === 'sow' || cmdOf(m) === 'publish') map.set(keyOf(m), bodyJson(m).v);
      if (cmdOf(m) === 'delete') map.delete(keyOf(m));
    }
    const final = await stateAt(tb.url, q, 'now');
    expect(Object.fromEntries(map)).to.deep.equal(final);
  });

  it('replay: bookmarks 0, an SCN, a timestamp and now give exact event sets with completed at the cut-over', async function () {
    const q = 'h.replay';
    clock.set(T0); await send(tb.url, histQueue(q), [pub({ id: 'a', v: 1 }), pub({ id: 'b', v: 1 })]);
    await at(T0 + 10 * S, q, [pub({ id: 'a', v: 2 }), pub({ id: 'a' }, 'delete')]);
    await at(T0 + 20 * S, q, [pub({ id: 'c', v: 1 })]);
    const scns = (ms: Received[]) => ms.filter((m) => !['completed', 'group_begin', 'group_end'].includes(cmdOf(m))).map(scnOf);
    const r0 = await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: '0' });
    expect(scns(r0)).to.deep.equal([1, 2, 3, 4, 5]);
    expect(cmdOf(r0[r0.length - 1])).to.equal('completed');
    expect(r0.map(cmdOf).slice(0, 5)).to.deep.equal(['publish', 'publish', 'publish', 'delete', 'publish']);
    const r3 = await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: '3' });
    expect(scns(r3)).to.deep.equal([4, 5]);
    const rt = await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: iso(T0 + 10 * S) });
    expect(scns(rt)).to.deep.equal([5]);
    const rn = await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: 'now' }, async () => {
      await at(T0 + 30 * S, q, [pub({ id: 'z', v: 1 })]);
    }, 1);
    expect(rn.map(cmdOf)).to.deep.equal(['completed', 'publish']);
    expect(scnOf(rn[1])).to.equal(6);
  });

  it('replay under a running publisher: completed comes at the replay target, before anything committed since (bookmark now: first of all)', async function () {
    const q = 'h.cut';
    await send(tb.url, histQueue(q), [pub({ id: 'a', v: 0 })]);
    const pc = await connect(tb.url);
    try {
      const snd = await openSender(pc, q);
      const publishing = sendAll(snd, Array.from({ length: 6000 }, (_, i) => pub({ id: `k${i % 50}`, v: i })));
      for (let i = 0; i < 500 && tb.broker.nodes.get(q)!.committedScn < 300; i++) await sleep(5);
      for (const bookmark of ['now', '100']) {
        const c = await connect(tb.url);
        try {
          const rcv = await openReceiver(c, { address: q, filter: tmFilters({ command: 'subscribe', bookmark }) });
          let afterCut = -1;
          const got = await collect(rcv, { idleMs: 3000, credit: 500, until: (m) => { if (afterCut >= 0) afterCut++; else if (cmdOf(m) === 'completed') afterCut = 0; return afterCut === 50; } });
          const cut = got.findIndex((m) => cmdOf(m) === 'completed');
          expect(cut, `${bookmark}: completed arrives`).to.be.at.least(0);
          if (bookmark === 'now') expect(cut, 'now: nothing old, completed first').to.equal(0);
          const at = scnOf(got[cut]);
          const before = got.slice(0, cut).map(scnOf), after = got.slice(cut + 1).map(scnOf);
          if (bookmark === '100') expect(before[0]).to.equal(101);
          // the replay ends at the cut, live events follow it: no gap, no duplicate
          expect([...before, ...after]).to.deep.equal(Array.from({ length: before.length + after.length }, (_, i) => (before[0] ?? at + 1) + i));
          expect(before.every((x) => x <= at) && after.every((x) => x > at), `${bookmark}: replay <= ${at} < live`).to.equal(true);
          if (bookmark === 'now') expect(after.length, 'now: live events after completed').to.be.greaterThan(0);
        } finally { await c.close(); }
      }
      await publishing;
    } finally { await pc.close(); }
  });

  it('log.max_count trims the log; an older SCN bookmark fails with tidemark:scn-not-found unless bookmark_not_found says otherwise', async function () {
    const q = 'h.trim';
    clock.set(T0);
    await send(tb.url, histQueue(q, { 'log.max_count': 3 }), Array.from({ length: 10 }, (_, i) => pub({ id: `k${i}`, v: i })));
    await runRetention(tb.broker);
    expect(tb.broker.queueInfo(tb.broker.nodes.get(q)!).scn_oldest).to.equal(8);
    const c = await connect(tb.url);
    try {
      let err: any;
      try { await openReceiver(c, { address: q, filter: tmFilters({ command: 'subscribe', bookmark: '2' }) }); } catch (e) { err = e; }
      expect(err?.condition).to.equal('tidemark:scn-not-found');
      expect(err?.message).to.match(/oldest SCN 8/);
      // wire.md 5: info {oldest-scn, requested-scn}, as the client decodes it
      expect(err.link.error.info).to.deep.equal({ 'oldest-scn': 8, 'requested-scn': 2 });
    } finally { await c.close(); }
    const epoch = await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: '2', options: { bookmark_not_found: 'epoch' } });
    expect(epoch.filter((m) => cmdOf(m) === 'publish').map(scnOf)).to.deep.equal([8, 9, 10]);
    const now = await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: '2', options: { bookmark_not_found: 'now' } });
    expect(now.map(cmdOf)).to.deep.equal(['completed']);
  });

  it('log.max_count holds from the moment events commit, before the background trim reaches them', async function () {
    const q = 'h.maxcount-now';
    clock.set(T0);
    await send(tb.url, histQueue(q, { 'log.max_count': 3 }), Array.from({ length: 10 }, (_, i) => pub({ id: `k${i % 4}`, v: i })));
    const s = tb.broker.nodes.get(q)!.structure as SowStructure;
    expect(s.oldestLogScn, 'no trim has run: the rows are still there').to.equal(1);
    expect(s.logFloor).to.equal(8);
    expect((await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: '0' })).filter((m) => cmdOf(m) === 'publish').map(scnOf)).to.deep.equal([8, 9, 10]);
    expect((await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: '7' })).filter((m) => cmdOf(m) === 'publish').map(scnOf)).to.deep.equal([8, 9, 10]);
    const c = await connect(tb.url);
    try {
      let err: any;
      try { await openReceiver(c, { address: q, filter: tmFilters({ command: 'subscribe', bookmark: '2' }) }); } catch (e) { err = e; }
      expect(err?.condition).to.equal('tidemark:scn-not-found');
      expect(err.link.error.info).to.deep.equal({ 'oldest-scn': 8, 'requested-scn': 2 });
    } finally { await c.close(); }
  });

  it('log.retention trims by time with several events per timestamp; timestamp bookmarks resolve exactly (sparse time index)', async function () {
    const q = 'h.retention';
    const scns = (ms: Received[]) => ms.filter((m) => cmdOf(m) === 'publish').map(scnOf);
    clock.set(T0);
    await send(tb.url, histQueue(q, { 'log.retention': '90s' }), [pub({ id: 'a', v: 1 }), pub({ id: 'b', v: 1 }), pub({ id: 'c', v: 1 })]); // 1-3 at T0
    await at(T0 + 60 * S, q, [pub({ id: 'a', v: 2 }), pub({ id: 'b', v: 2 })]); // 4-5
    await at(T0 + 120 * S, q, [pub({ id: 'a', v: 3 }), pub({ id: 'b', v: 3 }), pub({ id: 'c', v: 3 })]); // 6-8
    // Before any trim: "last event at or before T" must be exact whichever event of a timestamp is indexed.
    expect(scns(await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: iso(T0 + 60 * S - 1) }))).to.deep.equal([4, 5, 6, 7, 8]);
    expect(scns(await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: iso(T0 + 60 * S) }))).to.deep.equal([6, 7, 8]);
    expect(scns(await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: iso(T0 + 90 * S) }))).to.deep.equal([6, 7, 8]);
    expect(scns(await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: iso(T0 + 120 * S) }))).to.deep.equal([]);
    // At T0+170s the horizon is T0+80s: events 1-5 are older, 6-8 stay.
    clock.set(T0 + 170 * S);
    await runRetention(tb.broker);
    expect(tb.broker.queueInfo(tb.broker.nodes.get(q)!).scn_oldest).to.equal(6);
    expect(scns(await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: '0', options: { bookmark_not_found: 'epoch' } }))).to.deep.equal([6, 7, 8]);
    // With history the time index keeps the window's rows (historical queries at a time need
    // them): T0+60s still resolves to SCN 5, and every event after it is retained.
    expect(scns(await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: iso(T0 + 60 * S), options: { bookmark_not_found: 'fail' } }))).to.deep.equal([6, 7, 8]);
    // A timestamp whose next events are gone: bookmark_not_found decides (default now).
    const c = await connect(tb.url);
    try {
      // (A timestamp is resolved after the attach, so the refusal is a detach with the error.)
      const closed = new Promise<any>((resolve) => {
        const rcv = c.connection.open_receiver({ source: { address: q, filter: tmFilters({ command: 'subscribe', bookmark: iso(T0 - S), options: { bookmark_not_found: 'fail' } }) } });
        rcv.on('receiver_close', () => resolve(rcv.remote.detach?.error ?? rcv.error));
        rcv.on('receiver_error', () => resolve(rcv.error));
      });
      const err = await Promise.race([closed, sleep(5000).then(() => undefined)]);
      expect(err?.condition).to.equal('tidemark:scn-not-found');
    } finally { await c.close(); }
    expect((await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: iso(T0 - S) })).map(cmdOf)).to.deep.equal(['completed']);
    // New events after the trim are indexed and found again.
    await at(T0 + 171 * S, q, [pub({ id: 'd', v: 1 }), pub({ id: 'e', v: 1 })]); // 9-10
    expect(scns(await subscribeUntilCompleted(tb.url, q, { command: 'subscribe', bookmark: iso(T0 + 170 * S) }))).to.deep.equal([9, 10]);
    // Everything older than the window: the whole log goes.
    clock.set(T0 + 400 * S);
    await runRetention(tb.broker);
    expect(tb.broker.queueInfo(tb.broker.nodes.get(q)!).scn_oldest).to.be.oneOf([0, 11]);
  });

  it('a historical query at a time still answers after the log trim took the events around it (history and log kept independently)', async function () {
    const q = 'h.trimmed-time';
    clock.set(T0);
    await send(tb.url, histQueue(q, { 'log.max_count': 2 }), [pub({ id: 'a', v: 1 }), pub({ id: 'b', v: 1 })]); // 1-2 at T0
    await at(T0 + 10 * S, q, [pub({ id: 'c', v: 1 })]); // 3
    await at(T0 + 20 * S, q, [pub({ id: 'a', v: 2 }), pub({ id: 'b', v: 2 })]); // 4-5
    clock.set(T0 + 30 * S);
    await runRetention(tb.broker);
    expect(tb.broker.queueInfo(tb.broker.nodes.get(q)!).scn_oldest).to.equal(4);
    expect(await stateAt(tb.url, q, iso(T0 + 5 * S))).to.deep.equal({ a: 1, b: 1 });
    expect(await stateAt(tb.url, q, iso(T0 + 15 * S))).to.deep.equal({ a: 1, b: 1, c: 1 });
    expect(await stateAt(tb.url, q, iso(T0 + 25 * S))).to.deep.equal({ a: 2, b: 2, c: 1 });
    expect((await sowQuery(tb.url, q, { bookmark: iso(T0 + 15 * S) })).groupEnd).to.equal(3);
  });

  it('the background history sweep, a few rows at a time, purges exactly what a full pass purges', async function () {
    // Two queues get the same events; one is purged by full passes, the other by the paced
    // sweep in chunks of 3 rows (resuming mid-key-group, across tombstones and re-creations).
    const qs = ['h.sweep.full', 'h.sweep.paced'];
    let seed = 77;
    const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
    const keys = ['a', 'b', 'c', 'd', 'e'];
    let t = T0;
    clock.set(t);
    for (const q of qs) await send(tb.url, histQueue(q, { 'sow.history.window': '100s' }), keys.map((k) => pub({ id: k, v: 0 })));
    const steps: Array<{ t: number; msg: unknown }> = [];
    for (let i = 1; i <= 80; i++) {
      t += Math.floor(rnd() * 6000);
      const k = keys[Math.floor(rnd() * keys.length)];
      steps.push({ t, msg: rnd() < 0.25 ? pub({ id: k }, 'delete') : pub({ id: k, v: i }) });
    }
    for (const q of qs) for (const st of steps) await at(st.t, q, [st.msg]);
    const full = tb.broker.nodes.get(qs[0])!.structure as any;
    const paced = tb.broker.nodes.get(qs[1])!.structure as any;
    // The broker's own 1 s sweep timer (real time, the manual clock's now) would run passes of
    // its own between these steps under a loaded run (a flake: a pass counted twice): this test
    // drives every pass itself.
    for (const s of [full, paced]) s.historyDue = () => false;
    const before = paced.historyVersions;
    for (const now of [T0 + 150 * S, T0 + 300 * S, t + 101 * S]) {
      clock.set(now);
      await full.trim(now, true);
      const passes = paced.sweepPasses;
      for (let i = 0; i < 200 && paced.sweepPasses === passes; i++) await paced.trim(now, false, 3);
      expect(paced.sweepPasses, 'a paced pass completes').to.equal(passes + 1);
      expect(paced.historyVersions, `versions at ${now - T0}`).to.equal(full.historyVersions);
      // The version index (historical queries) follows the purge: exactly the rows left.
      for (const s of [full, paced]) expect(s.versions.size, 'indexed versions').to.equal(s.historyVersions);
      for (const back of [0, 20, 50, 99]) {
        const T = iso(now - back * S);
        const states = await Promise.all(qs.map(async (q) => (await sowQuery(tb.url, q, { bookmark: T })).records.map((m) => `${keyOf(m)}=${bodyJson(m).v}`).sort()));
        expect(states[1], `state at now-${back}s`).to.deep.equal(states[0]);
      }
    }
    expect(paced.historyVersions).to.be.lessThan(before);
    // Nothing is due until a version has been superseded for longer than the window: the
    // background sweep does not scan meanwhile, then purges it once it is due.
    const t2 = t + 200 * S;
    await at(t2, qs[1], [pub({ id: 'a', v: 1000 })]);
    const versions = paced.historyVersions;
    const passes = paced.sweepPasses;
    clock.set(t2 + 50 * S);
    for (let i = 0; i < 5; i++) await paced.trim(t2 + 50 * S, false, 3);
    expect(paced.sweepPasses, 'no pass while nothing is due').to.equal(passes);
    clock.set(t2 + 101 * S);
    for (let i = 0; i < 200 && paced.sweepPasses === passes; i++) await paced.trim(t2 + 101 * S, false, 3);
    expect(paced.sweepPasses).to.equal(passes + 1);
    expect(paced.historyVersions).to.equal(versions - 1);
    expect(paced.versions.size).to.equal(versions - 1);
  });

  it('the background sweep of a new queue reads nothing until a version is due; after a restart one pass finds out what is', async function () {
    // A new queue started as "not known yet", so from its first second the sweep read its
    // whole history, 20000 rows a second, under load and then idle (about a minute of reads
    // after loading 1M versions), with nothing to purge for a whole window.
    const q = 'h.sweep.fresh';
    clock.set(T0);
    await send(tb.url, histQueue(q, { 'sow.history.window': '100s' }), ['a', 'b', 'c'].map((k) => pub({ id: k, v: 0 })));
    await at(T0 + 10 * S, q, ['a', 'b', 'c'].map((k) => pub({ id: k, v: 1 })));
    let s = tb.broker.nodes.get(q)!.structure as any;
    clock.set(T0 + 50 * S);
    for (let i = 0; i < 5; i++) await s.trim(T0 + 50 * S, false, 3);
    expect(s.sweepPasses, 'no pass over a new queue while nothing is due').to.equal(0);
    expect(s.historyVersions).to.equal(6);
    await tb.restart();
    s = tb.broker.nodes.get(q)!.structure as any;
    for (let i = 0; i < 20 && s.sweepPasses === 0; i++) await s.trim(T0 + 50 * S, false, 3);
    expect(s.sweepPasses, 'a recovered queue with history gets one pass').to.equal(1);
    expect(s.historyVersions, 'nothing was due').to.equal(6);
    for (let i = 0; i < 5; i++) await s.trim(T0 + 50 * S, false, 3);
    expect(s.sweepPasses, 'and none after it while nothing is due').to.equal(1);
    clock.set(T0 + 111 * S);
    for (let i = 0; i < 20 && s.sweepPasses === 1; i++) await s.trim(T0 + 111 * S, false, 3);
    expect(s.historyVersions, 'the superseded versions go once due').to.equal(3);
  });

  it('a restart with 150k history versions recovers them and answers current and historical queries', async function () {
    // Recovery used to build one purge entry per superseded version and push them with a
    // spread: past ~120k versions the restart died with "Maximum call stack size exceeded".
    this.timeout(120000);
    const q = 'h.big-restart';
    const N = 150000, K = 1000;
    clock.set(T0);
    await send(tb.url, histQueue(q), Array.from({ length: N / 2 }, (_, i) => pub({ id: `k${i % K}`, v: i })));
    clock.set(T0 + 10 * S);
    await send(tb.url, q, Array.from({ length: N / 2 }, (_, i) => pub({ id: `k${i % K}`, v: N / 2 + i })));
    await tb.restart();
    const info = tb.broker.queueInfo(tb.broker.nodes.get(q)!) as any;
    expect(info.history_versions, JSON.stringify(info)).to.equal(N);
    const now = await sowQuery(tb.url, q);
    expect(now.records).to.have.length(K);
    expect(now.records.every((m) => bodyJson(m).v >= N - K)).to.equal(true);
    const then = await sowQuery(tb.url, q, { bookmark: iso(T0 + 5 * S) });
    expect(then.records).to.have.length(K);
    expect(then.records.every((m) => bodyJson(m).v >= N / 2 - K && bodyJson(m).v < N / 2)).to.equal(true);
  });

  it('model test: random publishes, deltas and deletes at random times; historical queries at random instants match a model (G = 0)', async function () {
    const q = 'h.model';
    let seed = 4242;
    const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
    const keys = ['a', 'b', 'c', 'd'];
    const timeline: Array<{ t: number; state: Record<string, number> }> = [];
    const state: Record<string, Record<string, number>> = {};
    let t = T0;
    clock.set(t);
    await send(tb.url, histQueue(q), [pub({ id: 'a', v: 0 })]);
    state.a = { v: 0 };
    timeline.push({ t, state: { a: 0 } });
    for (let i = 1; i <= 60; i++) {
      t += 1 + Math.floor(rnd() * 5000);
      const k = keys[Math.floor(rnd() * keys.length)];
      const r = rnd();
      let msg;
      if (r < 0.2) { msg = pub({ id: k }, 'delete'); delete state[k]; }
      else if (r < 0.5) { msg = pub({ id: k, v: i }, 'delta'); state[k] = { ...(state[k] ?? {}), v: i }; }
      else { msg = pub({ id: k, v: i }); state[k] = { v: i }; }
      await at(t, q, [msg]);
      timeline.push({ t, state: Object.fromEntries(Object.entries(state).map(([kk, vv]) => [kk, vv.v])) });
    }
    clock.set(t + 1000);
    for (let n = 0; n < 15; n++) {
      const probe = T0 + Math.floor(rnd() * (t - T0 + 2000));
      let expected: Record<string, number> = {};
      for (const e of timeline) if (e.t <= probe) expected = e.state;
      expect(await stateAt(tb.url, q, iso(probe)), `at ${iso(probe)}`).to.deep.equal(expected);
    }
  });
});

void sleep;
