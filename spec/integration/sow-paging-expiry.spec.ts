import { expect } from 'chai';
import { useBroker, startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, send, sleep, type Received, type Conn } from '../support/client.js';
import { tmFilters, cmdOf, scnOf, keyOf, bodyJson, sowQuery } from '../support/sow-client.js';
import { ManualClock } from '../../lib/index.js';
import { runSweeps, SowStructure } from '../../lib/ext/sow/index.js';

const sowQueue = (name: string, args: Record<string, unknown> = {}) => ({
  address: name, capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'sow.key': '/id', ...args },
});
const rec = (id: string, extra: Record<string, unknown> = {}, ttl?: number) => ({ ...(ttl !== undefined ? { ttl } : {}), body: JSON.stringify({ id, ...extra }) });
const del = (id: string) => ({ message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id }) });

/** `cmd:key[:reason]` for every message. */
const seqOf = (got: Received[]) => got.map((m) => `${cmdOf(m)}:${keyOf(m)}${m.message.message_annotations?.['x-opt-tm-oof-reason'] ? ':' + m.message.message_annotations['x-opt-tm-oof-reason'] : ''}`);

interface Sub { conn: Conn; got: Received[]; close(): Promise<void> }

/** A subscriber that accepts everything and keeps credit up. */
async function subscribe(url: string, address: string, f: Parameters<typeof tmFilters>[0]): Promise<Sub> {
  const conn = await connect(url);
  const rcv = await openReceiver(conn, { address, filter: tmFilters(f) });
  const got: Received[] = [];
  rcv.on('message', (ctx: any) => { got.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept(); if (rcv.credit < 50) rcv.add_credit(100); });
  rcv.add_credit(100);
  await until(() => got.some((m) => cmdOf(m) === 'group_end'));
  return { conn, got, close: () => conn.close() };
}

async function until(cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) { if (Date.now() > end) throw new Error('timed out'); await sleep(10); }
}

/** Messages after group_end. */
const live = (s: Sub) => s.got.slice(s.got.findIndex((m) => cmdOf(m) === 'group_end') + 1);
const snapshot = (s: Sub) => s.got.filter((m) => cmdOf(m) === 'sow').map(keyOf);

/** Sends, then waits until `n` more live messages arrived (and a little longer, to catch extras). */
async function step(url: string, address: string, s: Sub, msgs: unknown[], n: number): Promise<string[]> {
  const before = live(s).length;
  const out = await send(url, address, msgs as any[]);
  expect(out.every((o) => o.state === 'accepted'), JSON.stringify(out)).to.equal(true);
  await until(() => live(s).length >= before + n);
  await sleep(n === 0 ? 300 : 100);
  return seqOf(live(s).slice(before));
}

describe('paginated sow_and_subscribe (semantics.md 5)', function () {
  this.timeout(30000);
  const b = useBroker();

  async function eightRecords(q: string): Promise<void> {
    await send(b.get().url, sowQueue(q), ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'].map((id) => rec(id, { v: 1 })));
  }

  it('with oof: records entering the page are published, records leaving it get oof match; events after the page are silent', async function () {
    const url = b.get().url, q = 'pg.oof';
    await eightRecords(q);
    const s = await subscribe(url, q, { command: 'sow_and_subscribe', filter: '/v > 0', options: { top_n: 3, skip_n: 2, oof: true } });
    try {
      expect(snapshot(s)).to.deep.equal(['c', 'd', 'e']);
      // An insert before the page shifts it: e leaves, b enters.
      expect(await step(url, q, s, [rec('0', { v: 1 })], 2)).to.deep.equal(['oof:e:match', 'publish:b']);
      // A delete inside the page: oof deleted, and e comes back at the end.
      expect(await step(url, q, s, [del('c')], 2)).to.deep.equal(['oof:c:deleted', 'publish:e']);
      // After the page end: nothing.
      expect(await step(url, q, s, [rec('z', { v: 1 })], 0)).to.deep.equal([]);
      expect(await step(url, q, s, [rec('g', { v: 2 })], 0)).to.deep.equal([]);
      // An update inside the page that keeps its place.
      expect(await step(url, q, s, [rec('d', { v: 5 })], 1)).to.deep.equal(['publish:d']);
      // A delete before the page shifts it the other way: b leaves, f enters.
      expect(await step(url, q, s, [del('0')], 2)).to.deep.equal(['oof:b:match', 'publish:f']);
      // A record in the page stops matching: oof match (new state), g enters.
      const got = await step(url, q, s, [rec('e', { v: 0 })], 2);
      expect(got).to.deep.equal(['oof:e:match', 'publish:g']);
      const l = live(s);
      expect(bodyJson(l[l.length - 2])).to.deep.equal({ id: 'e', v: 0 });
      expect(bodyJson(l[l.length - 1])).to.deep.equal({ id: 'g', v: 2 });
      // It matches again, before the page: everything shifts right by one.
      expect(await step(url, q, s, [rec('e', { v: 3 })], 2)).to.deep.equal(['oof:g:match', 'publish:e']);
      // The SCN of messages caused by one event is that event's SCN: live SCNs never go back.
      const scns = live(s).map(scnOf);
      for (let i = 1; i < scns.length; i++) expect(scns[i]).to.be.at.least(scns[i - 1]);
    } finally { await s.close(); }
    // The page the link holds is the page a query returns now.
    const now = await sowQuery(url, q, { filter: '/v > 0', options: { top_n: 3, skip_n: 2 } });
    expect(now.records.map(keyOf)).to.deep.equal(['d', 'e', 'f']);
  });

  it('without oof: entering records are published, a deleted page record is a delete, records merely leaving get nothing', async function () {
    const url = b.get().url, q = 'pg.nooof';
    await eightRecords(q);
    const s = await subscribe(url, q, { command: 'sow_and_subscribe', filter: '/v > 0', options: { top_n: 3, skip_n: 2 } });
    try {
      expect(snapshot(s)).to.deep.equal(['c', 'd', 'e']);
      expect(await step(url, q, s, [rec('0', { v: 1 })], 1)).to.deep.equal(['publish:b']);
      expect(await step(url, q, s, [del('c')], 2)).to.deep.equal(['delete:c', 'publish:e']);
      expect(await step(url, q, s, [rec('d', { v: 0 })], 1)).to.deep.equal(['publish:f']);
      expect(await step(url, q, s, [rec('h', { v: 9 })], 0)).to.deep.equal([]);
    } finally { await s.close(); }
  });

  it('order_by DESC pages, ties broken by key order, and the page follows value changes', async function () {
    const url = b.get().url, q = 'pg.desc';
    await send(url, sowQueue(q), [rec('a', { p: 5 }), rec('b', { p: 3 }), rec('c', { p: 3 }), rec('d', { p: 3 }), rec('e', { p: 1 }), rec('f', { p: 9 })]);
    // f9 a5 b3 c3 d3 e1 -> page (skip 1, top 2) = a, b
    const s = await subscribe(url, q, { command: 'sow_and_subscribe', options: { top_n: 2, skip_n: 1, order_by: '/p DESC', oof: true } });
    try {
      expect(snapshot(s)).to.deep.equal(['a', 'b']);
      // A tie updated in place keeps its place (after the page): nothing.
      expect(await step(url, q, s, [rec('c', { p: 3, x: 1 })], 0)).to.deep.equal([]);
      // f9 a5 d4 b3 c3 e1 -> a, d
      expect(await step(url, q, s, [rec('d', { p: 4 })], 2)).to.deep.equal(['oof:b:match', 'publish:d']);
      // a5 d4 b3 c3 e1 f0 -> d, b (f left from before the page)
      expect(await step(url, q, s, [rec('f', { p: 0 })], 2)).to.deep.equal(['oof:a:match', 'publish:b']);
      // a5 d4 g4 b3 ... -> d, g (g ties with d and sorts after it by key)
      expect(await step(url, q, s, [rec('g', { p: 4 })], 2)).to.deep.equal(['oof:b:match', 'publish:g']);
      // a5 0:4 d4 g4 -> 0, d (key '0' sorts before 'd' in the tie)
      expect(await step(url, q, s, [rec('0', { p: 4 })], 2)).to.deep.equal(['oof:g:match', 'publish:0']);
    } finally { await s.close(); }
    const now = await sowQuery(url, q, { options: { top_n: 2, skip_n: 1, order_by: '/p DESC' } });
    expect(now.records.map(keyOf)).to.deep.equal(['0', 'd']);
  });

  it('a record without the order_by field sorts last (NULL) in ASC pages; skip_n 0 is a first page', async function () {
    const url = b.get().url, q = 'pg.null';
    await send(url, sowQueue(q), [rec('a', { p: 2 }), rec('b', { p: 1 }), rec('c', {})]);
    const s = await subscribe(url, q, { command: 'sow_and_subscribe', options: { top_n: 2, skip_n: 0, order_by: '/p', oof: true } });
    try {
      expect(snapshot(s)).to.deep.equal(['b', 'a']);
      expect(await step(url, q, s, [rec('c', { p: 0 })], 2)).to.deep.equal(['oof:a:match', 'publish:c']);
      expect(await step(url, q, s, [rec('b', {})], 2)).to.deep.equal(['oof:b:match', 'publish:a']);
    } finally { await s.close(); }
  });

  it('replace onto another page: records off the new page leave focus (oof match), not deleted; unchanged ones are not resent', async function () {
    const url = b.get().url, q = 'pg.replace';
    await send(url, sowQueue(q), [rec('a'), rec('b'), rec('c'), rec('d')]);
    const c = await connect(url);
    try {
      const old = await openReceiver(c, { address: q, filter: tmFilters({ command: 'sow_and_subscribe', options: { top_n: 2, skip_n: 0, oof: true } }) }, { name: 'page-1' });
      const first: Received[] = [];
      old.on('message', (ctx: any) => { first.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept(); });
      old.add_credit(100);
      await until(() => first.some((m) => cmdOf(m) === 'group_end'));
      expect(first.filter((m) => cmdOf(m) === 'sow').map(keyOf)).to.deep.equal(['a', 'b']);
      const nu = await openReceiver(c, { address: q, filter: tmFilters({ command: 'sow_and_subscribe', options: { top_n: 2, skip_n: 1, oof: true, replace: 'page-1' } }) }, { name: 'page-2' });
      const got: Received[] = [];
      nu.on('message', (ctx: any) => { got.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept(); });
      nu.add_credit(100);
      await until(() => got.some((m) => cmdOf(m) === 'group_end'));
      await send(url, q, [del('b')]);
      await until(() => got.length >= 6);
      await sleep(200);
      // semantics.md 5: only records between the markers; the oof for the record off the page after them
      expect(seqOf(got)).to.deep.equal(['group_begin:', 'sow:c', 'group_end:', 'oof:a:match', 'oof:b:deleted', 'publish:d']);
    } finally { await c.close(); }
  });

  it('top_n alone only limits the snapshot: every later matching event is delivered', async function () {
    const url = b.get().url, q = 'pg.toponly';
    await eightRecords(q);
    const s = await subscribe(url, q, { command: 'sow_and_subscribe', options: { top_n: 2, oof: true } });
    try {
      expect(snapshot(s)).to.deep.equal(['a', 'b']);
      expect(await step(url, q, s, [rec('0', { v: 1 }), rec('h', { v: 2 })], 2)).to.deep.equal(['publish:0', 'publish:h']);
    } finally { await s.close(); }
  });
});

describe('SOW record expiry by TTL (semantics.md 2, 5)', function () {
  this.timeout(30000);
  const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);
  const S = 1000;
  let clock: ManualClock;
  let tb: TestBroker;
  beforeEach(async () => { clock = new ManualClock(T0); tb = await startTestBroker({}, { clock }); });
  afterEach(async () => { await tb.stop(); });

  const structure = (q: string) => tb.broker.nodes.get(q)!.structure as SowStructure;
  /** Keeps the background timer from sweeping this queue, so the test decides when expiry runs. */
  function holdSweeps(q: string): void { (structure(q) as any).expireDue = async () => 0; }
  /** Runs the real expiry now, for every held queue. */
  async function sweep(): Promise<number> {
    let n = 0;
    for (const q of tb.broker.nodes.list()) if (q.structure instanceof SowStructure) n += await SowStructure.prototype.expireDue.call(q.structure, clock.now());
    return n;
  }

  it('with oof: a delivered record that expires is an oof expired carrying its last state; queries hide it before the sweep', async function () {
    const q = 'exp.oof';
    await send(tb.url, sowQueue(q), [rec('a', { v: 1 }, 10 * S), rec('b', { v: 1 }, 60 * S), rec('c', { v: 1 })]);
    holdSweeps(q);
    const s = await subscribe(tb.url, q, { command: 'sow_and_subscribe', options: { oof: true } });
    const other = await subscribe(tb.url, q, { command: 'sow_and_subscribe', filter: "/id = 'c'", options: { oof: true } });
    try {
      expect(snapshot(s)).to.deep.equal(['a', 'b', 'c']);
      clock.set(T0 + 5 * S);
      await send(tb.url, q, [rec('a', { v: 2 }, 6 * S)]); // the latest write's TTL counts: a now expires at T0+11s
      await until(() => live(s).length === 1);
      clock.set(T0 + 10500);
      expect((await sowQuery(tb.url, q)).records.map(keyOf)).to.deep.equal(['a', 'b', 'c']);
      clock.set(T0 + 11 * S);
      // Before any sweep, queries no longer return a.
      const before = await sowQuery(tb.url, q);
      expect(before.records.map(keyOf)).to.deep.equal(['b', 'c']);
      expect(before.groupEnd).to.equal(4);
      expect(structure(q).records.has('a'), 'not swept yet').to.equal(true);
      expect(await sweep()).to.equal(1);
      await until(() => live(s).length === 2);
      const m = live(s)[1];
      expect(seqOf([m])).to.deep.equal(['oof:a:expired']);
      expect(bodyJson(m)).to.deep.equal({ id: 'a', v: 2 });
      expect(scnOf(m)).to.equal(5); // a logged event with its own SCN
      // b is re-published without a TTL before it expires: it no longer expires.
      clock.set(T0 + 30 * S);
      await send(tb.url, q, [rec('b', { v: 2 })]);
      clock.set(T0 + 61 * S);
      expect(await sweep()).to.equal(0);
      await sleep(200);
      expect(seqOf(live(s))).to.deep.equal(['publish:a', 'oof:a:expired', 'publish:b']);
      expect(seqOf(live(other))).to.deep.equal([], 'never delivered a, so no oof');
      expect((await sowQuery(tb.url, q)).records.map(keyOf)).to.deep.equal(['b', 'c']);
      expect(tb.broker.nodes.get(q)!.counters.expired).to.equal(1);
    } finally { await s.close(); await other.close(); }
    // The expiry is in the log as a delete: a replay from the start sees it.
    const c = await connect(tb.url);
    try {
      const rcv = await openReceiver(c, { address: q, filter: tmFilters({ command: 'subscribe', bookmark: '0' }) });
      const got: Received[] = [];
      rcv.on('message', (ctx: any) => { got.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept(); });
      rcv.add_credit(100);
      await until(() => got.some((m) => cmdOf(m) === 'completed'));
      expect(seqOf(got)).to.deep.equal(['publish:a', 'publish:b', 'publish:c', 'publish:a', 'delete:a', 'publish:b', 'completed:']);
    } finally { await c.close(); }
  });

  it('without oof: the expiry is a delete; a subscriber that was never sent the record gets nothing', async function () {
    const q = 'exp.nooof';
    await send(tb.url, sowQueue(q), [rec('a', { v: 1, colour: 'red' }, 5 * S), rec('b', { v: 1, colour: 'blue' }, 5 * S)]);
    holdSweeps(q);
    const s = await subscribe(tb.url, q, { command: 'sow_and_subscribe', filter: "/colour = 'red'" });
    try {
      expect(snapshot(s)).to.deep.equal(['a']);
      clock.set(T0 + 5 * S); // expiry is inclusive: at exactly expiresAt the record is gone
      expect(await sweep()).to.equal(2);
      await until(() => live(s).length === 1);
      await sleep(200);
      expect(seqOf(live(s))).to.deep.equal(['delete:a']);
      expect(bodyJson(live(s)[0])).to.deep.equal({ id: 'a', v: 1, colour: 'red' });
      expect((await sowQuery(tb.url, q)).records).to.have.length(0);
    } finally { await s.close(); }
  });

  it('a paginated subscription: an expiring page record is an oof expired and the next record enters', async function () {
    const q = 'exp.page';
    await send(tb.url, sowQueue(q), [rec('a'), rec('b', {}, 10 * S), rec('c'), rec('d')]);
    holdSweeps(q);
    const s = await subscribe(tb.url, q, { command: 'sow_and_subscribe', options: { top_n: 2, skip_n: 1, oof: true } });
    try {
      expect(snapshot(s)).to.deep.equal(['b', 'c']);
      clock.set(T0 + 10 * S);
      // A snapshot taken now (also paginated) skips the expired record.
      expect((await sowQuery(tb.url, q, { options: { top_n: 2, skip_n: 1 } })).records.map(keyOf)).to.deep.equal(['c', 'd']);
      await sweep();
      await until(() => live(s).length === 2);
      expect(seqOf(live(s))).to.deep.equal(['oof:b:expired', 'publish:d']);
    } finally { await s.close(); }
  });

  it('the background task expires records without being asked', async function () {
    const q = 'exp.timer';
    await send(tb.url, sowQueue(q), [rec('a', {}, 1 * S), rec('b')]);
    const s = await subscribe(tb.url, q, { command: 'sow_and_subscribe', options: { oof: true } });
    try {
      clock.set(T0 + 2 * S);
      await until(() => live(s).length === 1, 4000);
      expect(seqOf(live(s))).to.deep.equal(['oof:a:expired']);
      expect(structure(q).records.has('a')).to.equal(false);
    } finally { await s.close(); }
  });

  it('expiry times survive a restart', async function () {
    const q = 'exp.restart';
    await send(tb.url, sowQueue(q), [rec('a', {}, 10 * S), rec('b')]);
    await tb.restart();
    holdSweeps(q);
    clock.set(T0 + 10 * S);
    expect((await sowQuery(tb.broker.urls[0], q)).records.map(keyOf)).to.deep.equal(['b']);
    expect(await sweep()).to.equal(1);
    expect(structure(q).records.has('a')).to.equal(false);
  });

  it('on a queue with history, TTL is ignored for SOW records', async function () {
    const q = 'exp.hist';
    await send(tb.url, sowQueue(q, { 'sow.history.window': '1h' }), [rec('a', { v: 1 }, 1 * S), rec('b', { v: 1 })]);
    clock.set(T0 + 60 * S);
    expect(await runSweeps(tb.broker)).to.equal(0);
    const r = await sowQuery(tb.url, q);
    expect(r.records.map(keyOf)).to.deep.equal(['a', 'b']);
    expect(r.groupEnd).to.equal(2);
  });
});
