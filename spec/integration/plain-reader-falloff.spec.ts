/**
 * A reader of a plain (non-SOW) log-bounded queue that falls behind `log.max_count` or
 * `log.retention` WHILE it reads (wire.md 6, semantics.md 7-8: no gap, no duplicate). A
 * checkpoint reader, a replay subscriber (bookmark) and a durable reader of a browse-only queue
 * used to skip what the bound dropped under them, as a ring browser does, and only their next
 * attach said they had fallen off. Now, at the point where the reader would skip, after
 * everything before the gap was sent, its link is detached with `tidemark:scn-not-found` and
 * info {oldest-scn, requested-scn}, as the attach check says it. A plain browser still skips;
 * drops that are not the log bound's (TTL expiry, LVQ replacement) do not make a reader fall
 * off, nor does a filtered reader's skipped message; a reader that keeps up is never detached.
 * The cases marked (before: ...) failed on the code before the fix.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, send, sleep, errorOf, type Conn, type Received } from '../support/client.js';
import { tmFilters, cmdOf, scnOf } from '../support/sow-client.js';
import { listSubscriptions } from '../../lib/ext/checkpoints/index.js';
import { ManualClock } from '../../lib/index.js';
import { trimListByAge, filteredReaders } from '../../lib/ext/replay/index.js';
import type { ListStructure } from '../../lib/core/queue/list-structure.js';

const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);
const FLEX = { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: -1, prevScn: -1, windowOffset: -1 };
const plainQ = (name: string, args: Record<string, unknown>) => ({ address: name, capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: args });
const msgs = (from: number, to: number, extra: Record<string, unknown> = {}) => Array.from({ length: to - from + 1 }, (_, i) => ({ body: `m${from + i}`, ...extra }));
const bodies = (got: Received[]) => got.filter((m) => !cmdOf(m) || cmdOf(m) === 'publish').map((m) => m.message.body);

async function waitFor(cond: () => boolean, ms = 10000): Promise<void> {
  for (const end = Date.now() + ms; !cond(); await sleep(20)) if (Date.now() > end) throw new Error('timed out waiting');
}

/** An info map as rhea decoded it, as plain numbers by key. */
function infoOf(e: any): Record<string, number> {
  const info = e?.info ?? (Array.isArray(e?.value) ? e.value[2] : undefined);
  const out: Record<string, number> = {};
  const pick = (v: any) => Number(v && typeof v === 'object' && 'value' in v ? v.value : v);
  if (info && typeof info === 'object') for (const [k, v] of Object.entries(info)) out[k] = pick(v);
  return out;
}

/** A receiver whose credit the test gives by hand; it records what arrives and how its link ended. */
class Reader {
  readonly got: Received[] = [];
  closed?: { condition?: string; description?: string; info: Record<string, number> };
  constructor(readonly conn: Conn, readonly rcv: any) {
    rcv.on('message', (ctx: any) => { this.got.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept(); });
    rcv.once('receiver_close', () => {
      const e = rcv.remote?.detach?.error ?? rcv.error;
      this.closed = { ...errorOf(e), info: infoOf(e) };
    });
  }
  static async open(url: string, source: any, opts: { container?: string; name?: string } = {}): Promise<Reader> {
    const c = await connect(url, opts.container ? { container_id: opts.container } : {});
    try { return new Reader(c, await openReceiver(c, source, opts.name ? { name: opts.name } : {})); } catch (e) { await c.close(); throw e; }
  }
  /** Gives `n` credit and waits until `count` messages in all arrived, or the link is closed, then a little more. */
  async read(n: number, count?: number, idleMs = 400): Promise<void> {
    this.rcv.add_credit(n);
    if (count !== undefined) await waitFor(() => this.got.length >= count || this.closed !== undefined);
    await sleep(idleMs);
  }
  async close(): Promise<void> { await this.conn.close(); }
}

describe('a reader of a plain log-bounded queue that falls behind the bound while it reads', function () {
  this.timeout(60000);
  let tb: TestBroker | undefined;
  let clock: ManualClock;
  const readers: Reader[] = [];
  const track = (r: Reader) => { readers.push(r); return r; };
  beforeEach(async () => { clock = new ManualClock(T0); tb = await startTestBroker({}, { clock }); });
  afterEach(async () => {
    for (const r of readers.splice(0)) await r.close().catch(() => undefined);
    await tb?.stop(); tb = undefined;
  });

  it('a checkpoint reader behind log.max_count is detached with scn-not-found once it has sent what it could (before: went on at m6)', async function () {
    await send(tb!.url, plainQ('fo.cp', { 'log.max_count': 5 }), msgs(1, 3));
    const r = track(await Reader.open(tb!.url, { address: 'fo.cp', filter: tmFilters({ checkpoint: FLEX }) }));
    await r.read(2, 2);
    expect(bodies(r.got)).to.deep.equal(['m1', 'm2']);
    // 7 more: the queue keeps m6..m10; m3..m5, which the reader has not read, are gone
    await send(tb!.url, 'fo.cp', msgs(4, 10));
    expect(tb!.broker.queueInfo(tb!.broker.nodes.get('fo.cp')!).depth).to.equal(5);
    await r.read(20);
    expect(bodies(r.got), 'nothing after the gap').to.deep.equal(['m1', 'm2']);
    expect(r.closed?.condition, `the link ${r.closed ? `ended with ${r.closed.condition}` : 'is still open'}`).to.equal('tidemark:scn-not-found');
    expect(r.closed!.info).to.deep.equal({ 'oldest-scn': 6, 'requested-scn': 2 });
    expect(r.closed!.description).to.match(/checkpoint reader of fo\.cp is at SCN 2/);
    // the attach check agrees: the position it was at has fallen off
    const again = await Reader.open(tb!.url, { address: 'fo.cp', filter: tmFilters({ checkpoint: { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 2, prevScn: 2, windowOffset: -1 } }) }).then(() => undefined, (e) => e);
    expect(again?.condition).to.equal('tidemark:scn-not-found');
  });

  it('a checkpoint reader at m1 that gets credit only after 10 more publishes (before: went on at m7)', async function () {
    await send(tb!.url, plainQ('fo.cp1', { 'log.max_count': 5 }), msgs(1, 1));
    const r = track(await Reader.open(tb!.url, { address: 'fo.cp1', filter: tmFilters({ checkpoint: FLEX }) }));
    await r.read(1, 1);
    await send(tb!.url, 'fo.cp1', msgs(2, 11));
    await r.read(20);
    expect(bodies(r.got)).to.deep.equal(['m1']);
    expect(r.closed?.condition).to.equal('tidemark:scn-not-found');
    expect(r.closed!.info).to.deep.equal({ 'oldest-scn': 7, 'requested-scn': 1 });
  });

  it('a checkpoint reader behind log.retention (injected clock) is detached with scn-not-found (before: went on at m3)', async function () {
    await send(tb!.url, plainQ('fo.age', { 'log.retention': '10s' }), msgs(1, 2));
    const r = track(await Reader.open(tb!.url, { address: 'fo.age', filter: tmFilters({ checkpoint: FLEX }) }));
    await r.read(1, 1);
    clock.set(T0 + 8000);
    await send(tb!.url, 'fo.age', msgs(3, 3));
    clock.set(T0 + 15000); // m1 and m2 are past the retention; m2 was not read
    const q = tb!.broker.nodes.get('fo.age')!;
    await waitFor(() => tb!.broker.queueInfo(q).depth === 1); // the trim runs every second
    await r.read(10);
    expect(bodies(r.got)).to.deep.equal(['m1']);
    expect(r.closed?.condition).to.equal('tidemark:scn-not-found');
    expect(r.closed!.info).to.deep.equal({ 'oldest-scn': 3, 'requested-scn': 1 });
  });

  it('a replay subscriber (bookmark 0) behind log.max_count is detached with scn-not-found, without `completed` (before: went on at m7)', async function () {
    await send(tb!.url, plainQ('fo.rp', { 'log.max_count': 5 }), msgs(1, 3));
    const r = track(await Reader.open(tb!.url, { address: 'fo.rp', filter: tmFilters({ command: 'subscribe', bookmark: '0' }) }));
    await r.read(1, 1);
    expect(r.got.map(scnOf)).to.deep.equal([1]);
    await send(tb!.url, 'fo.rp', msgs(4, 11)); // keeps m7..m11
    await r.read(20);
    expect(r.got.map((m) => `${cmdOf(m)} ${scnOf(m)}`)).to.deep.equal(['publish 1']);
    expect(r.closed?.condition).to.equal('tidemark:scn-not-found');
    expect(r.closed!.info).to.deep.equal({ 'oldest-scn': 7, 'requested-scn': 1 });
    expect(r.closed!.description).to.match(/replay of fo\.rp is at SCN 1/);
  });

  it('a durable reader of a browse-only queue behind log.max_count is detached, keeps its position before the gap, and its next attach is refused (before: went on at m8)', async function () {
    const src = { address: 'fo.dur', durable: 2, expiry_policy: 'never' };
    await send(tb!.url, plainQ('fo.dur', { 'qpid.browse-only': true, 'log.max_count': 5 }), msgs(1, 2));
    const r = track(await Reader.open(tb!.url, src, { container: 'cont', name: 'sub' }));
    await r.read(2, 2);
    expect(bodies(r.got)).to.deep.equal(['m1', 'm2']);
    await waitFor(() => listSubscriptions(tb!.broker)[0]?.position === 2);
    await send(tb!.url, 'fo.dur', msgs(3, 12)); // keeps m8..m12
    await r.read(20);
    expect(bodies(r.got)).to.deep.equal(['m1', 'm2']);
    expect(r.closed?.condition).to.equal('tidemark:scn-not-found');
    expect(r.closed!.info).to.deep.equal({ 'oldest-scn': 8, 'requested-scn': 2 });
    expect(r.closed!.description).to.match(/durable subscription cont\/sub is at SCN 2/);
    await r.close();
    expect(listSubscriptions(tb!.broker).map((s) => s.position), 'the subscription is kept, before the gap').to.deep.equal([2]);
    const again = await Reader.open(tb!.url, src, { container: 'cont', name: 'sub' }).then((x) => { track(x); return undefined; }, (e) => e);
    expect(again?.condition).to.equal('tidemark:scn-not-found');
  });

  it('a durable reader resumed on a browse-only queue falls off the same way (before: went on at m8)', async function () {
    const src = { address: 'fo.dur2', durable: 2, expiry_policy: 'never' };
    await send(tb!.url, plainQ('fo.dur2', { 'qpid.browse-only': true, 'log.max_count': 5 }), msgs(1, 2));
    const first = await Reader.open(tb!.url, src, { container: 'cont', name: 'sub' });
    await first.read(1, 1);
    await waitFor(() => listSubscriptions(tb!.broker)[0]?.position === 1);
    await first.close();
    const r = track(await Reader.open(tb!.url, src, { container: 'cont', name: 'sub' }));
    await r.read(1, 1);
    expect(bodies(r.got)).to.deep.equal(['m2']);
    await send(tb!.url, 'fo.dur2', msgs(3, 12));
    await r.read(20);
    expect(bodies(r.got)).to.deep.equal(['m2']);
    expect(r.closed?.condition).to.equal('tidemark:scn-not-found');
    expect(r.closed!.info).to.deep.equal({ 'oldest-scn': 8, 'requested-scn': 2 });
  });

  it('a plain browser still skips what the bound dropped (ring semantics, unchanged)', async function () {
    await send(tb!.url, plainQ('fo.br', { 'qpid.browse-only': true, 'log.max_count': 5 }), msgs(1, 1));
    const r = track(await Reader.open(tb!.url, { address: 'fo.br' }));
    await r.read(1, 1);
    await send(tb!.url, 'fo.br', msgs(2, 11));
    await r.read(20, 6);
    expect(bodies(r.got)).to.deep.equal(['m1', 'm7', 'm8', 'm9', 'm10', 'm11']);
    expect(r.closed).to.equal(undefined);
  });

  it('a TTL expiry ahead of a checkpoint reader does not make it fall off (log.max_count and log.retention)', async function () {
    await send(tb!.url, plainQ('fo.ttl', { 'log.max_count': 5 }), [...msgs(1, 1), ...msgs(2, 3, { ttl: 1000 }), ...msgs(4, 4)]);
    const r = track(await Reader.open(tb!.url, { address: 'fo.ttl', filter: tmFilters({ checkpoint: FLEX }) }));
    await r.read(1, 1);
    clock.set(T0 + 2000); // m2, m3 expire
    await send(tb!.url, 'fo.ttl', msgs(5, 7)); // 5 live at most: nothing for the bound to drop
    await r.read(20, 5);
    expect(bodies(r.got)).to.deep.equal(['m1', 'm4', 'm5', 'm6', 'm7']);
    expect(r.closed).to.equal(undefined);

    // log.retention: m2 is expired and past the retention when the trim comes; the reader would not have had it
    await send(tb!.url, plainQ('fo.ttl2', { 'log.retention': '10s' }), [...msgs(1, 1), ...msgs(2, 2, { ttl: 5000 })]);
    const r2 = track(await Reader.open(tb!.url, { address: 'fo.ttl2', filter: tmFilters({ checkpoint: FLEX }) }));
    await r2.read(1, 1);
    clock.set(T0 + 2000 + 8000);
    await send(tb!.url, 'fo.ttl2', msgs(3, 3));
    clock.set(T0 + 2000 + 11000); // m2 expired (and older than 10 s); m1 older than 10 s, read already
    const q = tb!.broker.nodes.get('fo.ttl2')!;
    // The trim itself, before any timer runs (the TTL sweep's timer tends to come first): m2
    // leaves as expired, not as the log bound's drop; only m1 raises the floor.
    const list = q.structure as ListStructure;
    expect(trimListByAge(list, clock.now() - 10_000, clock.now())).to.equal(1);
    expect(list.logFloor).to.equal(1);
    expect(tb!.broker.queueInfo(q).depth).to.equal(1);
    await r2.read(10, 2);
    expect(bodies(r2.got)).to.deep.equal(['m1', 'm3']);
    expect(r2.closed).to.equal(undefined);
  });

  it('an LVQ replacement ahead of a checkpoint reader does not make it fall off', async function () {
    const k = (key: string, from: number, to: number) => msgs(from, to).map((m) => ({ ...m, application_properties: { k: key } }));
    await send(tb!.url, plainQ('fo.lvq', { 'qpid.last_value_queue_key': 'k', 'log.max_count': 5 }), k('x', 1, 1));
    const r = track(await Reader.open(tb!.url, { address: 'fo.lvq', filter: tmFilters({ checkpoint: FLEX }) }));
    await r.read(1, 1);
    await send(tb!.url, 'fo.lvq', [...k('a', 2, 4), ...k('b', 5, 5)]); // m2, m3 replaced by m4
    await r.read(20, 3);
    expect(bodies(r.got)).to.deep.equal(['m1', 'm4', 'm5']);
    expect(r.closed).to.equal(undefined);
  });

  it('a filtered checkpoint reader falls off only when a message it would have had was dropped (before: the second went on)', async function () {
    const colored = (from: number, to: number, color: string) => msgs(from, to).map((m) => ({ ...m, application_properties: { color } }));
    const src = (q: string) => ({ address: q, filter: { ...tmFilters({ checkpoint: FLEX }), ...tmFilters({ selector: "color = 'red'" }) } });
    // only blue ones dropped under it: nothing of its own is missing, it goes on
    await send(tb!.url, plainQ('fo.sel', { 'log.max_count': 3 }), colored(1, 1, 'red'));
    const r = track(await Reader.open(tb!.url, src('fo.sel')));
    await r.read(1, 1);
    await send(tb!.url, 'fo.sel', [...colored(2, 6, 'blue'), ...colored(7, 7, 'red')]);
    await r.read(10, 2);
    expect(bodies(r.got)).to.deep.equal(['m1', 'm7']);
    expect(r.closed).to.equal(undefined);
    // a red one dropped under it: detached
    await send(tb!.url, plainQ('fo.sel2', { 'log.max_count': 3 }), colored(1, 1, 'red'));
    const r2 = track(await Reader.open(tb!.url, src('fo.sel2')));
    await r2.read(1, 1);
    await send(tb!.url, 'fo.sel2', [...colored(2, 2, 'blue'), ...colored(3, 3, 'red'), ...colored(4, 7, 'blue'), ...colored(8, 8, 'red')]);
    await r2.read(10);
    expect(bodies(r2.got)).to.deep.equal(['m1']);
    expect(r2.closed?.condition).to.equal('tidemark:scn-not-found');
    expect(r2.closed!.info).to.deep.equal({ 'oldest-scn': 6, 'requested-scn': 1 });
  });

  it('readers that keep up are never detached (checkpoint, replay, durable)', async function () {
    await send(tb!.url, plainQ('fo.up', { 'qpid.browse-only': true, 'log.max_count': 5 }), msgs(1, 1));
    const cp = track(await Reader.open(tb!.url, { address: 'fo.up', filter: tmFilters({ checkpoint: FLEX }) }));
    const rp = track(await Reader.open(tb!.url, { address: 'fo.up', filter: tmFilters({ command: 'subscribe', bookmark: '0' }) }));
    const dur = track(await Reader.open(tb!.url, { address: 'fo.up', durable: 2, expiry_policy: 'never' }, { container: 'cont', name: 'up' }));
    for (const r of [cp, rp, dur]) r.rcv.add_credit(1000);
    for (let i = 0; i < 20; i++) await send(tb!.url, 'fo.up', msgs(2 + i * 10, 11 + i * 10)); // 200 more, 10 at a time
    await waitFor(() => [cp, rp, dur].every((r) => bodies(r.got).length === 201 || r.closed !== undefined));
    await sleep(300);
    for (const r of [cp, rp, dur]) {
      expect(r.closed).to.equal(undefined);
      expect(bodies(r.got)).to.deep.equal(msgs(1, 201).map((m) => m.body));
    }
  });

  it('a replay reader that passed an expired message a consumer still holds is not detached when the retention trim drops it (review of the fix)', async function () {
    await send(tb!.url, plainQ('fo.exh', { 'log.retention': '10s' }), [{ body: 'm1', ttl: 1000 }]);
    // a consumer takes m1 and does not settle it
    const holder = await connect(tb!.url);
    try {
      const cons = await openReceiver(holder, { address: 'fo.exh' }, { autoaccept: false });
      const held: unknown[] = [];
      cons.on('message', (ctx: any) => held.push(ctx.message.body));
      cons.add_credit(1);
      await waitFor(() => held.length === 1);
      clock.set(T0 + 2000); // m1 expired, still held
      const r = track(await Reader.open(tb!.url, { address: 'fo.exh', filter: tmFilters({ command: 'subscribe', bookmark: '0' }) }));
      await r.read(10);
      expect(r.got.map(cmdOf)).to.deep.equal(['completed']);
      clock.set(T0 + 20000); // past the retention: the trim (every second) drops m1 as the log bound
      const list = tb!.broker.nodes.get('fo.exh')!.structure as ListStructure;
      await waitFor(() => list.logFloor >= 1);
      await send(tb!.url, 'fo.exh', msgs(2, 2));
      await r.read(0, 2);
      expect(r.closed, `the link ended with ${r.closed?.condition}: ${r.closed?.description}`).to.equal(undefined);
      expect(bodies(r.got)).to.deep.equal(['m2']);
    } finally { await holder.close(); }
  });

  it('closed filtered replay links are not kept by the queue until its bound next drops a message (review of the fix)', async function () {
    await send(tb!.url, plainQ('fo.leak', { 'log.max_count': 1000 }), msgs(1, 5));
    const list = tb!.broker.nodes.get('fo.leak')!.structure as ListStructure;
    const consumers = () => (list as any).consumerCount as number;
    for (let i = 0; i < 20; i++) {
      const r = await Reader.open(tb!.url, { address: 'fo.leak', filter: tmFilters({ command: 'subscribe', bookmark: '0', selector: "color = 'red'" }) });
      await r.read(10);
      await r.close();
    }
    await waitFor(() => consumers() === 0);
    expect(filteredReaders(list), 'closed readers still held').to.be.at.most(1);
  });
});
