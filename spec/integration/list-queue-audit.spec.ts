/**
 * Plain (list) queues, found by a code review in session 22 (docs/robustness.md section 13):
 * the dispatch hint after a compaction, a compaction in the middle of a dispatch scan, limits
 * counting expired messages, and a refused transaction's SCNs given back while its entries
 * stayed in the list.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, openSender, sendAll, sleep, type Conn, send, receive, r, collect } from '../support/client.js';
import { ManualClock } from '../../lib/core/clock.js';
import { tmFilters, scnOf, cmdOf } from '../support/sow-client.js';
import { TransactionalState } from '../../lib/core/protocol/rhea-patches.js';
import { openCoordinator, markTransactionalTransfers } from '../../tools/common/transactions.js';

/**
 * A consumer holding the oldest message unsettled while two others consume thousands behind it:
 * MessageList compacts (holes in the middle, list-structure #trim) and renumbers positions,
 * but ListStructure's #hint keeps its old, larger value, so the remaining messages are never
 * offered to anyone (until something is released).
 */

describe('plain queues (session 22 review): compaction vs dispatch hint', function () {
  this.timeout(90000);
  let tb: TestBroker;
  afterEach(async () => { await tb?.stop(); });

  it('two consumers get every message while a third holds the oldest one unsettled', async function () {
    tb = await startTestBroker();
    const N = 6000;
    const conns: Conn[] = [];
    try {
      const c = await connect(tb.url); conns.push(c);
      const s = await openSender(c, 'lqa.compact');
      const out = await sendAll(s, Array.from({ length: N }, (_, i) => ({ body: i })));
      expect(out.every((o) => o.state === 'accepted')).to.equal(true);
      // A: takes the oldest and holds it.
      const a = await openReceiver(c, 'lqa.compact');
      const heldByA: number[] = [];
      a.on('message', (ctx: any) => { heldByA.push(ctx.message.body); });
      a.add_credit(1);
      await sleep(300);
      expect(heldByA).to.deep.equal([0]);
      // B and C: consume the rest, accepting each.
      const got: number[] = [];
      for (let k = 0; k < 2; k++) {
        const ck = await connect(tb.url); conns.push(ck);
        const rk = await openReceiver(ck, 'lqa.compact');
        rk.on('message', (ctx: any) => { got.push(ctx.message.body); ctx.delivery.accept(); if (rk.credit < 50) rk.add_credit(100 - rk.credit); });
        rk.add_credit(100);
      }
      const deadline = Date.now() + 20000;
      let last = -1, same = 0;
      while (got.length < N - 1 && Date.now() < deadline) {
        await sleep(200);
        if (got.length === last) { if (++same > 10) break; } else { same = 0; last = got.length; }
      }
      const q = (tb.broker as any);
      expect(got.length, `B+C got ${got.length} of ${N - 1}`).to.equal(N - 1);
      expect(new Set(got).size).to.equal(N - 1);
    } finally { for (const c of conns.reverse()) await c.close(); }
  });
});

/**
 * Compaction DURING a consumer's scan: #nextAvailable removes expired entries as it walks
 * (#expired -> #remove -> MessageList #trim), the list compacts and renumbers mid-loop, and
 * the loop goes on with its old `pos`/`end` (list.at(pos)! is undefined: TypeError caught by
 * dispatch, "dispatch failed"), leaving #hint at a stale position.
 */

describe('plain queues (session 22 review): compaction in the middle of a scan (TTL)', function () {
  this.timeout(90000);
  let tb: TestBroker;
  afterEach(async () => { await tb?.stop(); });

  it('the live messages behind 5000 expired ones all reach a consumer, in order', async function () {
    const T0 = Date.UTC(2026, 0, 1);
    const clock = new ManualClock(T0);
    tb = await startTestBroker({}, { clock });
    const conns: Conn[] = [];
    try {
      const c = await connect(tb.url); conns.push(c);
      const s = await openSender(c, 'lqa.midscan');
      await sendAll(s, [{ body: 'head' }]);
      const a = await openReceiver(c, 'lqa.midscan');
      const held: unknown[] = [];
      a.on('message', (ctx: any) => { held.push(ctx.message.body); });
      a.add_credit(1);
      await sleep(300);
      expect(held).to.deep.equal(['head']);
      const out1 = await sendAll(s, Array.from({ length: 5000 }, (_, i) => ({ body: `ttl${i}`, ttl: 1000 })));
      const out2 = await sendAll(s, Array.from({ length: 100 }, (_, i) => ({ body: i })));
      expect([...out1, ...out2].every((o) => o.state === 'accepted')).to.equal(true);
      clock.advance(5000); // every ttl message is expired (the 1 s sweeper may or may not get there first)
      const c2 = await connect(tb.url); conns.push(c2);
      const b = await openReceiver(c2, 'lqa.midscan');
      const got: unknown[] = [];
      b.on('message', (ctx: any) => { got.push(ctx.message.body); ctx.delivery.accept(); });
      b.add_credit(200);
      await sleep(2500);
      expect(got).to.deep.equal(Array.from({ length: 100 }, (_, i) => i));
    } finally { for (const c of conns.reverse()) await c.close(); }
  });
});

/**
 * Reject policy counts expired messages that the 1 s background sweep has not removed yet:
 * the queue's statistics say depth 0 (stats() sweeps first), yet a publish is refused as
 * "queue is full". Likewise a ring drops (as 'dropped') a live message it did not need to.
 */

describe('plain queues (session 22 review): limits vs expired-but-unswept messages', function () {
  this.timeout(30000);
  let tb: TestBroker;
  const T0 = Date.UTC(2026, 0, 1);
  const clock = new ManualClock(T0);
  afterEach(async () => { await tb?.stop(); });

  it('reject policy: a publish into a queue whose messages all expired is accepted', async function () {
    tb = await startTestBroker({}, { clock });
    const decl = { address: 'lqa.rej', capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'qpid.max_count': 2, 'qpid.policy_type': 'reject' } };
    const first = await send(tb.url, decl, [{ body: 'a', ttl: 1000 }, { body: 'b', ttl: 1000 }]);
    expect(first.map((o) => o.state)).to.deep.equal(['accepted', 'accepted']);
    clock.advance(5000);
    const out = await send(tb.url, 'lqa.rej', [{ body: 'c' }]);
    expect(out[0], JSON.stringify(out[0])).to.deep.include({ state: 'accepted' });
  });

  it('ring policy: an expired message makes room before a live one is dropped', async function () {
    tb = await startTestBroker({}, { clock });
    clock.set(T0);
    const decl = { address: 'lqa.ring', capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'qpid.max_count': 2, 'qpid.policy_type': 'ring' } };
    await send(tb.url, decl, [{ body: 'live' }, { body: 'dies', ttl: 1000 }]);
    clock.advance(5000);
    await send(tb.url, 'lqa.ring', [{ body: 'new' }]);
    const got = await receive(tb.url, 'lqa.ring', { idleMs: 400 });
    expect(got.map((m) => m.message.body)).to.deep.equal(['live', 'new']);
  });
});

/**
 * A transaction refused at prepare (here: the 4th message of a window hits a reject limit)
 * gives its SCNs back (transactions.ts #commit), but its entries were already appended to the
 * queue's MessageList (ListStructure.prepare) and stay there as removed holes with those SCNs.
 * The next publishes reuse the SCNs behind them: the list is no longer sorted by SCN and
 * MessageList.positionAfter (binary search) lands wrongly: a replay `subscribe` after SCN 3
 * also delivers SCN 3.
 */

const T = r.types;
const M = r.message;
function controlBody(code: number, fields: unknown[]): Buffer {
  const w = new T.Writer();
  w.write(T.described_nc(T.wrap_ulong(code), T.wrap_list(fields)));
  return Buffer.concat([Buffer.from([0x00, 0x53, 0x77]), w.toBuffer()]);
}
function outcomeOf(d: any) {
  const s = d.remote_state;
  if (s instanceof TransactionalState) { const inner = s.outcome ? M.unwrap_outcome(s.outcome) : undefined; return { state: 'transactional', inner: inner?.constructor?.composite_type, condition: inner?.error?.condition }; }
  return { state: s?.constructor?.composite_type ?? 'none', condition: s?.error?.condition, description: s?.error?.description };
}
async function control(coord: any, body: Buffer): Promise<any> {
  return new Promise((resolve) => {
    const d = coord.send(body, undefined, 0);
    const on = (ctx: any) => { if (ctx.delivery === d) { coord.removeListener('settled', on); resolve(d); } };
    coord.on('settled', on);
  });
}

describe('plain queues (session 22 review): SCNs given back by a refused transaction', function () {
  this.timeout(30000);
  let tb: TestBroker;
  afterEach(async () => { await tb?.stop(); });

  it('a replay after SCN N never delivers N', async function () {
    tb = await startTestBroker();
    const decl = { address: 'lqa.txq', capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'qpid.max_count': 5, 'qpid.policy_type': 'reject' } };
    expect((await send(tb.url, decl, [{ body: 'p1' }, { body: 'p2' }])).map((o) => o.state)).to.deep.equal(['accepted', 'accepted']); // SCN 1, 2
    const conn: Conn = await connect(tb.url);
    try {
      const coord = await new Promise<any>((res) => { const s = openCoordinator(conn.connection, 'ctrl'); s.once('sendable', () => res(s)); });
      const dd = await control(coord, controlBody(0x31, [null]));
      const txn: Buffer = dd.remote_state.txn_id;
      const s = await openSender(conn, 'lqa.txq');
      const txnOf = new Map<number, Buffer>();
      markTransactionalTransfers(s.session, txnOf);
      for (const body of ['t1', 't2', 't3', 't4']) { const d = s.send({ body }); txnOf.set(d.id, txn); }
      const dis = outcomeOf(await control(coord, controlBody(0x32, [T.wrap_binary(txn), false])));
      expect(dis.state, JSON.stringify(dis)).to.equal('rejected');
      expect(dis.condition).to.equal('amqp:transaction:rollback');
    } finally { await conn.close(); }
    expect((await send(tb.url, 'lqa.txq', [{ body: 'p3' }, { body: 'p4' }])).map((o) => o.state)).to.deep.equal(['accepted', 'accepted']); // SCN 3, 4
    const c2 = await connect(tb.url);
    try {
      const rcv = await openReceiver(c2, { address: 'lqa.txq', filter: tmFilters({ command: 'subscribe', bookmark: '3' }) });
      const got = await collect(rcv, { idleMs: 1000, until: (m) => cmdOf(m) === 'completed' });
      const data = got.filter((m) => cmdOf(m) !== 'completed').map((m) => `${m.message.body}@${scnOf(m)}`);
      expect(data).to.deep.equal(['p4@4']);
    } finally { await c2.close(); }
  });
});
