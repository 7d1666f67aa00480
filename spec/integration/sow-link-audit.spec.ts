/**
 * SOW links (session 22 code review of sow-consumer.ts, links.ts, paging.ts; docs/robustness.md
 * 13 "SOW links"). Each case failed on the code before its fix; the log read-ahead case on the
 * code before the trim moved its floor first (checkpoint-durable-audit.spec.ts has the others
 * of that fix).
 */
import { expect } from 'chai';
import { useBroker, startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, openSender, sendAll, collect, send, sleep, type Received } from '../support/client.js';
import { tmFilters, cmdOf, scnOf, keyOf, bodyJson, sowQuery } from '../support/sow-client.js';
import { runRetention } from '../../lib/ext/sow/index.js';
import { ManualClock } from '../../lib/index.js';

const sq = (name: string, args: Record<string, unknown> = {}) => ({ address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', ...args } });
const rec = (id: string, extra: Record<string, unknown> = {}) => ({ body: JSON.stringify({ id, ...extra }) });
const op = (o: string, body: unknown) => ({ message_annotations: { 'x-opt-tm-op': o }, body: JSON.stringify(body) });
/** `cmd:key[:oof-reason]` */
const tag = (m: Received) => {
  const a = m.message.message_annotations ?? {};
  const reason = a['x-opt-tm-oof-reason'];
  const k = a['x-opt-tm-key'];
  return `${cmdOf(m)}${k !== undefined ? ':' + k : ''}${reason ? ':' + reason : ''}`;
};
/** Records every message arriving on rcv (credit is the caller's). */
function tap(rcv: any): Received[] {
  const out: Received[] = [];
  rcv.on('message', (ctx: any) => { out.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept?.(); });
  return out;
}
/** Applies a link's messages to the client's view of the records. */
function apply(view: Map<string, any>, msgs: Received[]) {
  for (const m of msgs) {
    const c = cmdOf(m), k = keyOf(m);
    if (c === 'sow' || c === 'publish') view.set(k, bodyJson(m));
    else if (c === 'delete' || c === 'oof') view.delete(k);
  }
}

describe('SOW links (session 22 review)', function () {
  this.timeout(30000);
  const b = useBroker();

  describe('1. replace with top_n', function () {
    it('streamed (no order_by): no delete for records the snapshot did not reach', async function () {
      const url = b.get().url;
      const N = 3000;
      await send(url, sq('rt.big'), Array.from({ length: N }, (_, i) => rec(`k${String(i).padStart(5, '0')}`, { p: i === 0 ? 0 : 1 })));
      const c = await connect(url);
      try {
        const old = await openReceiver(c, { address: 'rt.big', filter: tmFilters({ command: 'sow_and_subscribe', filter: '/p = 1' }) }, { name: 'v1' });
        const first = await collect(old, { idleMs: 500, credit: 1000, until: (m) => cmdOf(m) === 'group_end' });
        expect(first.filter((m) => cmdOf(m) === 'sow')).to.have.length(N - 1);
        const nu = await openReceiver(c, { address: 'rt.big', filter: tmFilters({ command: 'sow_and_subscribe', options: { top_n: 1, replace: 'v1' } }) }, { name: 'v2' });
        const got = await collect(nu, { idleMs: 800, credit: 1000 });
        const bad = got.filter((m) => cmdOf(m) === 'delete' || cmdOf(m) === 'oof');
        expect(bad.length, `${bad.length} deletes, first ${bad.slice(0, 3).map(tag)}`).to.equal(0);
      } finally { await c.close(); }
    });

    it('with order_by (sorted, no skip_n): no false delete either', async function () {
      const url = b.get().url;
      await send(url, sq('rt.topn2'), [rec('a', { p: 1 }), rec('b', { p: 2 }), rec('c', { p: 3 })]);
      const c = await connect(url);
      try {
        const old = await openReceiver(c, { address: 'rt.topn2', filter: tmFilters({ command: 'sow_and_subscribe' }) }, { name: 'v1' });
        await collect(old, { idleMs: 300, until: (m) => cmdOf(m) === 'group_end' });
        const nu = await openReceiver(c, { address: 'rt.topn2', filter: tmFilters({ command: 'sow_and_subscribe', options: { top_n: 1, order_by: '/p DESC', oof: true, replace: 'v1' } }) }, { name: 'v2' });
        const got = await collect(nu, { idleMs: 600 });
        const tags = got.map(tag);
        expect(tags.filter((t) => t.includes('deleted') || t.startsWith('delete')), tags.join(',')).to.deep.equal([]);
      } finally { await c.close(); }
    });

    const pastPage = [
      // streamed: the page (k000, k001, new to the client) fills in the first chunk; the changes are in the second
      { name: 'streamed', count: 600, oldFilter: '/p = 1 AND /n > 1', orderBy: undefined, page: ['k000', 'k001'], deleted: 'k597', left: 'k598', changed: 'k599', live: 'k550' },
      { name: 'order_by', count: 10, oldFilter: '/p = 1', orderBy: '/n DESC', page: [], deleted: 'k002', left: 'k003', changed: 'k004', live: 'k005' },
    ];
    for (const t of pastPage) {
      it(`records the client holds past the page (${t.name}): deleted, no longer matching, changed and unchanged ones, then live`, async function () {
        const url = b.get().url, q = `rt.past.${t.name}`;
        const ids = Array.from({ length: t.count }, (_, i) => `k${String(i).padStart(3, '0')}`);
        await send(url, sq(q), ids.map((id, i) => rec(id, { p: 1, n: i })));
        const c = await connect(url);
        try {
          const old = await openReceiver(c, { address: q, filter: tmFilters({ command: 'sow_and_subscribe', filter: t.oldFilter, options: { oof: true } }) }, { name: 'o1' });
          const seen = tap(old);
          const held = t.count - (t.oldFilter.includes('/n > 1') ? 2 : 0);
          old.add_credit(held + 2); // the snapshot only: the changes below stay unsent on this link
          await sleep(500);
          expect(seen.filter((m) => cmdOf(m) === 'sow')).to.have.length(held);
          await send(url, q, [op('delete', { id: t.deleted }), rec(t.left, { p: 2, n: 0 }), rec(t.changed, { p: 1, n: Number(t.changed.slice(1)), v: 2 })]);
          const nu = await openReceiver(c, { address: q, filter: tmFilters({ command: 'sow_and_subscribe', filter: '/p = 1', options: { top_n: 2, oof: true, replace: 'o1', ...(t.orderBy ? { order_by: t.orderBy } : {}) } }) }, { name: 'o2' });
          const got = tap(nu);
          nu.add_credit(100);
          await sleep(500);
          // unchanged records are kept (the page's too: by /n DESC k009 and k008), not sent again
          expect(got.map(tag)).to.deep.equal(['group_begin', ...t.page.map((k) => `sow:${k}`), `sow:${t.changed}`, 'group_end', `oof:${t.left}:match`, `oof:${t.deleted}:deleted`]);
          // a record kept past the page is still this link's: its delete comes
          const n = got.length;
          await send(url, q, [op('delete', { id: t.live })]);
          await sleep(300);
          expect(got.slice(n).map(tag)).to.deep.equal([`oof:${t.live}:deleted`]);
        } finally { await c.close(); }
      });
    }
  });

  describe('2. replace while the old link holds what it has not sent', function () {
    it('a paginated link whose shift-on message waits for credit: the record reaches the client', async function () {
      const url = b.get().url;
      await send(url, sq('rt.page'), [rec('a'), rec('b'), rec('c'), rec('d')]);
      const c = await connect(url);
      try {
        const old = await openReceiver(c, { address: 'rt.page', filter: tmFilters({ command: 'sow_and_subscribe', options: { top_n: 2, skip_n: 0 } }) }, { name: 'p1' });
        const seen = tap(old);
        old.add_credit(4); // group_begin, a, b, group_end
        await sleep(300);
        expect(seen.map(tag)).to.deep.equal(['group_begin', 'sow:a', 'sow:b', 'group_end']);
        old.add_credit(1);
        await send(url, 'rt.page', [op('delete', { id: 'a' })]); // page becomes b, c: delete a, publish c
        await sleep(300);
        expect(seen.map(tag)).to.deep.equal(['group_begin', 'sow:a', 'sow:b', 'group_end', 'delete:a']);
        // the client holds b; c is still in the old link's outbox
        const nu = await openReceiver(c, { address: 'rt.page', filter: tmFilters({ command: 'sow_and_subscribe', options: { top_n: 2, skip_n: 0, replace: 'p1' } }) }, { name: 'p2' });
        const got = await collect(nu, { idleMs: 600 });
        const view = new Map<string, any>([['b', {}]]);
        apply(view, got);
        expect([...view.keys()].sort(), got.map(tag).join(',')).to.deep.equal(['b', 'c']);
        expect(got.map(tag), 'b and the delete of a are not sent again').to.deep.equal(['group_begin', 'sow:c', 'group_end']);
      } finally { await c.close(); }
    });

    it('a conflating link with an update and a delete still held: the client gets the latest state and the delete', async function () {
      const url = b.get().url;
      await send(url, sq('rt.conf'), [rec('x', { v: 1 }), rec('y', { v: 1 })]);
      const c = await connect(url);
      try {
        const old = await openReceiver(c, { address: 'rt.conf', filter: tmFilters({ command: 'sow_and_subscribe', options: { conflation: '10s' } }) }, { name: 'c1' });
        const first = await collect(old, { idleMs: 300, until: (m) => cmdOf(m) === 'group_end' });
        expect(first.map(tag)).to.deep.equal(['group_begin', 'sow:x', 'sow:y', 'group_end']);
        await send(url, 'rt.conf', [rec('x', { v: 2 }), op('delete', { id: 'y' })]);
        await sleep(200);
        const nu = await openReceiver(c, { address: 'rt.conf', filter: tmFilters({ command: 'sow_and_subscribe', options: { replace: 'c1' } }) }, { name: 'c2' });
        const got = await collect(nu, { idleMs: 600 });
        const view = new Map<string, any>([['x', { v: 1 }], ['y', { v: 1 }]]);
        apply(view, got);
        expect([...view.entries()], got.map(tag).join(',')).to.deep.equal([['x', { id: 'x', v: 2 }]]);
      } finally { await c.close(); }
    });

    it('a replace of a replace not started yet (no credit): records that left focus get oof, none is sent again', async function () {
      const url = b.get().url;
      await send(url, sq('rt.chain'), [rec('a', { p: 1 }), rec('b', { p: 2 }), rec('c', { p: 3 }), rec('d', { p: 4 })]);
      const c = await connect(url);
      try {
        const view = new Map<string, any>();
        const l1 = await openReceiver(c, { address: 'rt.chain', filter: tmFilters({ command: 'sow_and_subscribe', options: { oof: true } }) }, { name: 'l1' });
        apply(view, await collect(l1, { idleMs: 300, until: (m) => cmdOf(m) === 'group_end' }));
        expect([...view.keys()]).to.deep.equal(['a', 'b', 'c', 'd']);
        const l2 = await openReceiver(c, { address: 'rt.chain', filter: tmFilters({ command: 'sow_and_subscribe', options: { oof: true, replace: 'l1' } }) }, { name: 'l2' });
        const l2msgs = tap(l2); // no credit
        await sleep(200);
        const l3 = await openReceiver(c, { address: 'rt.chain', filter: tmFilters({ command: 'sow_and_subscribe', filter: '/p > 2', options: { oof: true, replace: 'l2' } }) }, { name: 'l3' });
        const got = await collect(l3, { idleMs: 600 });
        apply(view, l2msgs);
        apply(view, got);
        expect([...view.keys()].sort(), got.map(tag).join(',')).to.deep.equal(['c', 'd']);
        expect(got.filter((m) => cmdOf(m) === 'sow').map(keyOf), 'sent again').to.deep.equal([]);
      } finally { await c.close(); }
    });
  });

  describe('3. conflation applies to the live part only', function () {
    const afterCompleted = (got: Received[]) => {
      const ci = got.findIndex((m) => cmdOf(m) === 'completed');
      return { ci, late: ci < 0 ? [] : got.slice(ci + 1).filter((m) => scnOf(m) <= scnOf(got[ci])).map(tag) };
    };

    it('subscribe from bookmark 0: every replayed event, before completed (wire.md 5)', async function () {
      const url = b.get().url;
      await send(url, sq('cf.replay'), Array.from({ length: 5 }, (_, i) => rec('x', { v: i })));
      const c = await connect(url);
      try {
        const rcv = await openReceiver(c, { address: 'cf.replay', filter: tmFilters({ command: 'subscribe', bookmark: '0', options: { conflation: '300ms' } }) });
        const got = await collect(rcv, { idleMs: 1200 });
        const tags = got.map((m) => `${tag(m)}@${scnOf(m)}`);
        const { ci, late } = afterCompleted(got);
        expect(ci, tags.join(',')).to.be.greaterThan(-1);
        expect(late, tags.join(',')).to.deep.equal([]);
        expect(got.slice(0, ci).map(scnOf), tags.join(',')).to.deep.equal([1, 2, 3, 4, 5]);
      } finally { await c.close(); }
    });

    it('historical sow_and_subscribe: the replay after the snapshot comes before completed', async function () {
      const url = b.get().url;
      await send(url, sq('cf.hist', { 'sow.history.window': '1d' }), Array.from({ length: 5 }, (_, i) => rec('x', { v: i })));
      const c = await connect(url);
      try {
        const rcv = await openReceiver(c, { address: 'cf.hist', filter: tmFilters({ command: 'sow_and_subscribe', bookmark: '2', options: { conflation: '300ms' } }) });
        const got = await collect(rcv, { idleMs: 1200 });
        const tags = got.map((m) => `${tag(m)}@${scnOf(m)}`);
        const { ci, late } = afterCompleted(got);
        expect(ci, tags.join(',')).to.be.greaterThan(-1);
        expect(late, tags.join(',')).to.deep.equal([]);
        expect(tags.slice(0, ci + 1), tags.join(',')).to.deep.equal(['group_begin@-1', 'sow:x@2', 'group_end@2', 'publish:x@3', 'publish:x@4', 'publish:x@5', 'completed@5']);
      } finally { await c.close(); }
    });

    it('live events after completed are still conflated', async function () {
      const url = b.get().url;
      await send(url, sq('cf.live'), [rec('x', { v: 0 })]);
      const c = await connect(url);
      try {
        const rcv = await openReceiver(c, { address: 'cf.live', filter: tmFilters({ command: 'subscribe', bookmark: '0', options: { conflation: '500ms' } }) });
        const got = tap(rcv);
        rcv.add_credit(100);
        await sleep(200);
        await send(url, 'cf.live', Array.from({ length: 5 }, (_, i) => rec('x', { v: i + 1 })));
        await sleep(1200);
        expect(got.map((m) => `${tag(m)}@${scnOf(m)}`)).to.deep.equal(['publish:x@1', 'completed@1', 'publish:x@6']);
      } finally { await c.close(); }
    });
  });

  it('a replay whose log read-ahead begins after the trim took its next events: scn-not-found, never a silent gap', async function () {
    this.timeout(90000);
    const url = b.get().url, q = 'ra.q';
    const pc = await connect(url);
    const s = await openSender(pc, sq(q, { 'log.max_count': 22000 }));
    const burst = async (n: number, from: number) => { for (let i = 0; i < n; i += 2000) await sendAll(s, Array.from({ length: 2000 }, (_, j) => rec(`k${(from + i + j) % 50}`, { n: from + i + j }))); };
    await burst(24000, 0);
    const c = await connect(url);
    try {
      const rcv = await openReceiver(c, { address: q, filter: tmFilters({ command: 'subscribe', bookmark: '0' }) });
      const got = tap(rcv);
      let err: any; rcv.on('receiver_error', () => { err = rcv.error; });
      rcv.add_credit(400);
      await sleep(500);
      expect(got).to.have.length(400);
      await burst(2000, 24000);
      await runRetention(b.get().broker);
      rcv.add_credit(150); // reaches the read-ahead point (500 rows left)
      await sleep(500);
      rcv.add_credit(100000);
      await sleep(3000);
      const scns = got.filter((m) => cmdOf(m) === 'publish').map(scnOf);
      const gaps: string[] = [];
      for (let i = 1; i < scns.length; i++) if (scns[i] !== scns[i - 1] + 1) gaps.push(`${scns[i - 1]}->${scns[i]}`);
      const condition = String(err?.condition ?? '');
      expect(gaps.length === 0 || condition === 'tidemark:scn-not-found', `${scns.length} events, gaps ${gaps.join(' ')}, condition ${condition}`).to.equal(true);
    } finally { await c.close(); await pc.close(); }
  });
});

describe('SCNs of a SOW queue whose log was trimmed whole (session 22 review)', function () {
  this.timeout(30000);
  let tb: TestBroker | undefined;
  afterEach(async () => { await tb?.stop(); tb = undefined; });

  it('after a restart the next event gets an SCN past every earlier one (log.retention took every row, the records were deleted)', async function () {
    const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);
    const clock = new ManualClock(T0);
    tb = await startTestBroker({}, { clock });
    await send(tb.url, sq('ret.sow', { durable: true, 'log.retention': '1s' }), [rec('a', { v: 1 }), rec('b', { v: 1 }), op('delete', { id: 'a' }), op('delete', { id: 'b' })]);
    expect(tb.broker.nodes.get('ret.sow')!.committedScn).to.equal(4);
    clock.set(T0 + 10_000);
    await runRetention(tb.broker); // the whole log goes
    expect(tb.broker.queueInfo(tb.broker.nodes.get('ret.sow')!).scn_oldest, 'the log is empty').to.equal(5);
    await tb.restart();
    expect(tb.broker.nodes.get('ret.sow')!.committedScn, 'head SCN after the restart').to.equal(4);
    await send(tb.broker.urls[0], 'ret.sow', [rec('c', { v: 1 })]);
    const r = await sowQuery(tb.broker.urls[0], 'ret.sow');
    expect(r.records.map(scnOf), 'x-opt-tm-scn of the new record').to.deep.equal([5]);
  });
});
