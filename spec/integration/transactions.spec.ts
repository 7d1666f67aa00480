/**
 * AMQP local transactions (AMQP 1.0 part 4; wire.md 3, semantics.md 8, docs/transactions.md):
 * a commit makes its messages visible at once as one window of contiguous SCNs, across
 * queues in one batch; a rollback leaves no trace; Proton's tx_send.py / tx_recv.py work
 * unchanged; a broker crash between declare and discharge leaves nothing.
 *
 * rhea has no transaction API: the coordinator attach, declare/discharge bodies and the
 * transactional-state on transfers are built by hand below.
 */
import { expect } from 'chai';
import { rmSync } from 'node:fs';
import { useBroker, spawnBroker, tempDir } from '../support/broker.js';
import { r, connect, openSender, sendAll, openReceiver, collect, receive, send, sleep, type Conn, type Received } from '../support/client.js';
import { sowQuery, scnOf, bodyJson, tmFilters, checkpointOf } from '../support/sow-client.js';
import { runProton, protonAvailable } from '../support/proton.js';
import { Coordinator, TransactionalState } from '../../lib/core/protocol/rhea-patches.js';
import { MAX_TRANSACTION_MESSAGES } from '../../lib/core/protocol/transactions.js';
import { openCoordinator, markTransactionalTransfers } from '../../tools/common/transactions.js';
import { controlBody, outcomeOf, type TxOutcome } from '../support/transactions.js';

const T = r.types;
const M = r.message;
const sowTarget = (name: string) => ({ address: name, capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'sow.key': '/id' } });
const rec = (id: string, extra: Record<string, unknown> = {}) => ({ body: JSON.stringify({ id, ...extra }) });


/** A transaction controller on one connection (the way Proton's Container does it). */
class Controller {
  readonly conn: Conn;
  readonly coordinator: any;
  readonly #txnOf = new Map<number, Buffer>();
  readonly #hooked = new Set<any>();

  private constructor(conn: Conn, coordinator: any) { this.conn = conn; this.coordinator = coordinator; }

  static async open(url: string): Promise<Controller> {
    const conn = await connect(url);
    const coordinator = await new Promise<any>((resolve, reject) => {
      const s = openCoordinator(conn.connection, 'txn-ctrl');
      s.once('sendable', () => resolve(s));
      s.once('sender_close', () => reject(Object.assign(new Error('coordinator refused'), { link: s })));
    });
    return new Controller(conn, coordinator);
  }

  #control(body: Buffer): Promise<any> {
    return new Promise((resolve) => {
      const d = this.coordinator.send(body, undefined, 0);
      const onSettled = (ctx: any) => { if (ctx.delivery === d) { this.coordinator.removeListener('settled', onSettled); resolve(d); } };
      this.coordinator.on('settled', onSettled);
    });
  }

  async declare(): Promise<Buffer> {
    const d = await this.#control(controlBody(0x31, [null]));
    const id = d.remote_state?.txn_id;
    if (!Buffer.isBuffer(id)) throw Object.assign(new Error('declare failed'), outcomeOf(d));
    return id;
  }

  async discharge(txnId: Buffer, fail: boolean): Promise<TxOutcome> {
    return outcomeOf(await this.#control(controlBody(0x32, [T.wrap_binary(txnId), fail])));
  }

  /** Makes `sender` put transactional-state{txnId} on the transfers of deliveries sent via sendTx. */
  #hook(sender: any): void {
    const session = sender.session;
    if (this.#hooked.has(session)) return;
    this.#hooked.add(session);
    markTransactionalTransfers(session, this.#txnOf);
  }

  /** Sends messages in the transaction; resolves with each delivery's outcome once settled. */
  sendTx(sender: any, txnId: Buffer, messages: any[]): Promise<TxOutcome[]> {
    this.#hook(sender);
    const deliveries = messages.map((m) => { const d = sender.send(m); this.#txnOf.set(d.id, txnId); return d; });
    return new Promise((resolve) => {
      const check = () => {
        if (deliveries.every((d) => d.remote_settled)) { sender.removeListener('settled', check); resolve(deliveries.map(outcomeOf)); }
      };
      sender.on('settled', check);
    });
  }

  close(): Promise<void> { return this.conn.close(); }
}

const txHex = (b: Buffer) => b.toString('hex');

describe('AMQP local transactions (wire.md 3, semantics.md 8)', function () {
  this.timeout(60000);
  const b = useBroker({ autoCreateQueues: true });
  const url = () => b.get().url;

  it('echoes a coordinator target with amqp:local-transactions', async function () {
    const c = await Controller.open(url());
    try {
      const t = c.coordinator.remote.attach.target;
      expect(t).to.be.instanceOf(Coordinator);
      expect([].concat(t.capabilities)).to.include('amqp:local-transactions');
      const id = await c.declare();
      expect(id.length).to.be.greaterThan(0);
      expect(await c.discharge(id, true)).to.deep.include({ state: 'accepted' });
    } finally { await c.close(); }
  });

  it('commit makes N messages visible at once as one window of contiguous SCNs', async function () {
    const q = 'tx.sow.commit';
    await send(url(), sowTarget(q), [rec('before')]); // SCN 1
    const c = await Controller.open(url());
    try {
      const s = await openSender(c.conn, sowTarget(q));
      const id = await c.declare();
      const n = 25;
      const outcomes = c.sendTx(s, id, Array.from({ length: n }, (_, i) => rec(`k${String(i).padStart(2, '0')}`, { i })));
      await sleep(300);
      // Nothing of the open transaction is visible; a plain publish meanwhile still is.
      expect((await send(url(), q, [rec('between')]))[0].state).to.equal('accepted'); // SCN 2
      expect((await sowQuery(url(), q)).records.map((m) => bodyJson(m).id)).to.have.members(['before', 'between']);
      const live = await connect(url());
      const sub = await openReceiver(live, { address: q });
      const seen = collect(sub, { count: n + 2, idleMs: 3000 }); // 'before', 'between', then the window
      expect(await c.discharge(id, false)).to.deep.include({ state: 'accepted' });
      const per = await outcomes;
      expect(per.every((o) => o.state === 'transactional' && o.inner === 'accepted' && o.txn === txHex(id)), JSON.stringify(per[0])).to.equal(true);
      const got = await seen;
      await live.close();
      expect(got.map((m) => bodyJson(m).i).filter((i) => i !== undefined)).to.deep.equal(Array.from({ length: n }, (_, i) => i));
      const after = await sowQuery(url(), q);
      const txRecords = after.records.filter((m) => bodyJson(m).i !== undefined).sort((x, y) => bodyJson(x).i - bodyJson(y).i);
      expect(txRecords).to.have.length(n);
      // One SCN each, in order, contiguous: 3 .. 3+n-1.
      expect(txRecords.map(scnOf)).to.deep.equal(Array.from({ length: n }, (_, i) => 3 + i));
      expect(after.groupEnd).to.equal(2 + n);
      const next = await send(url(), q, [rec('after')]);
      expect(next[0].state).to.equal('accepted');
      expect(scnOf((await sowQuery(url(), q)).records.find((m) => bodyJson(m).id === 'after')!)).to.equal(3 + n);
    } finally { await c.close(); }
  });

  it('checkpoints resume mid-window exactly, and so do the checkpoints of a mid-window resume (no event lost, none twice)', async function () {
    const q = 'tx.sow.midwindow';
    const c = await Controller.open(url());
    try {
      const s = await openSender(c.conn, sowTarget(q));
      const id = await c.declare();
      const outcomes = c.sendTx(s, id, ['a', 'b', 'c', 'd', 'e'].map((k) => rec(k))); // one window, SCNs 1..5
      expect(await c.discharge(id, false)).to.deep.include({ state: 'accepted' });
      await outcomes;
    } finally { await c.close(); }
    /** Reads `count` messages from a checkpoint; returns the keys and the last checkpoint (as plain numbers). */
    const readFrom = async (cp: Record<string, unknown>, count: number) => {
      const conn = await connect(url());
      try {
        const rcv = await openReceiver(conn, { address: q, filter: tmFilters({ checkpoint: cp }) });
        const got = await collect(rcv, { count, idleMs: 700, credit: count });
        const last = checkpointOf(got[got.length - 1]) as Record<string, unknown>;
        const plain = Object.fromEntries(Object.entries(last).filter(([k]) => k !== 'tsNsecs').map(([k, v]) => [k, typeof v === 'bigint' ? Number(v) : v]));
        return { keys: got.map((m) => bodyJson(m).id), cp: plain };
      } finally { await conn.close(); }
    };
    const first = await readFrom({ consumption_mode: 'ONLINE_CONSUMPTION', windowScn: -1, prevScn: -1, windowOffset: -1 }, 2);
    expect(first.keys).to.deep.equal(['a', 'b']);
    expect(first.cp).to.include({ windowScn: 5, prevScn: 0, windowOffset: 2 });
    const second = await readFrom(first.cp, 1);
    expect(second.keys).to.deep.equal(['c']);
    expect(second.cp).to.include({ windowScn: 5, prevScn: 0, windowOffset: 3 });
    const third = await readFrom(second.cp, 2);
    expect(third.keys).to.deep.equal(['d', 'e']);
    expect(third.cp).to.include({ windowScn: 5, prevScn: 5, windowOffset: -1 });
  });

  it('rollback leaves no trace: no message, no SCN used; transfers are settled rejected', async function () {
    const q = 'tx.sow.rollback';
    await send(url(), sowTarget(q), [rec('a')]); // SCN 1
    const c = await Controller.open(url());
    try {
      const s = await openSender(c.conn, sowTarget(q));
      const id = await c.declare();
      const outcomes = c.sendTx(s, id, [rec('x'), rec('y'), rec('z')]);
      await sleep(200);
      expect(await c.discharge(id, true)).to.deep.include({ state: 'accepted' });
      const per = await outcomes;
      expect(per.map((o) => [o.state, o.inner, o.condition])).to.deep.equal(Array(3).fill(['transactional', 'rejected', 'amqp:transaction:rollback']));
      await send(url(), q, [rec('b')]);
      const after = await sowQuery(url(), q);
      expect(after.records.map((m) => [bodyJson(m).id, scnOf(m)])).to.deep.equal([['a', 1], ['b', 2]]);
      // The same transaction cannot be discharged again.
      expect(await c.discharge(id, false)).to.deep.include({ state: 'rejected', condition: 'amqp:transaction:unknown-id' });
    } finally { await c.close(); }
  });

  it('a transaction spanning two queues commits both', async function () {
    const c = await Controller.open(url());
    try {
      const s1 = await openSender(c.conn, { address: 'tx.multi.a' });
      const s2 = await openSender(c.conn, sowTarget('tx.multi.b'));
      const id = await c.declare();
      const o1 = c.sendTx(s1, id, [{ body: 'a1' }, { body: 'a2' }]);
      const o2 = c.sendTx(s2, id, [rec('b1'), rec('b2'), rec('b3')]);
      await sleep(200);
      expect(await receive(url(), 'tx.multi.a', { idleMs: 300 })).to.have.length(0);
      expect(await c.discharge(id, false)).to.deep.include({ state: 'accepted' });
      expect((await o1).concat(await o2).every((o) => o.inner === 'accepted')).to.equal(true);
      expect((await receive(url(), 'tx.multi.a', { count: 2 })).map((m) => m.message.body)).to.deep.equal(['a1', 'a2']);
      expect((await sowQuery(url(), 'tx.multi.b')).records.map(scnOf)).to.deep.equal([1, 2, 3]);
    } finally { await c.close(); }
  });

  it('a transaction spanning two queues commits neither when one queue refuses a message', async function () {
    await send(url(), sowTarget('tx.none.b'), [rec('seed')]); // SCN 1
    const c = await Controller.open(url());
    try {
      const s1 = await openSender(c.conn, { address: 'tx.none.a' });
      const s2 = await openSender(c.conn, sowTarget('tx.none.b'));
      const id = await c.declare();
      const o1 = c.sendTx(s1, id, [{ body: 'a1' }]);
      const o2 = c.sendTx(s2, id, [rec('ok'), { body: JSON.stringify({ nokey: true }) }]);
      await sleep(200);
      const d = await c.discharge(id, false);
      expect(d.state).to.equal('rejected');
      expect(d.condition).to.equal('amqp:transaction:rollback');
      expect(d.description).to.match(/\/id/);
      expect((await o1).concat(await o2).every((o) => o.inner === 'rejected' && o.condition === 'amqp:transaction:rollback')).to.equal(true);
      expect(await receive(url(), 'tx.none.a', { idleMs: 300 })).to.have.length(0);
      await send(url(), 'tx.none.b', [rec('next')]);
      expect((await sowQuery(url(), 'tx.none.b')).records.map((m) => [bodyJson(m).id, scnOf(m)])).to.deep.equal([['next', 2], ['seed', 1]]);
    } finally { await c.close(); }
  });

  it('unknown txn-id: discharge and transfer are rejected with amqp:transaction:unknown-id', async function () {
    const c = await Controller.open(url());
    try {
      const bogus = Buffer.from('00112233445566778899aabbccddeeff', 'hex');
      expect(await c.discharge(bogus, false)).to.deep.include({ state: 'rejected', condition: 'amqp:transaction:unknown-id' });
      const s = await openSender(c.conn, { address: 'tx.unknown' });
      const [o] = await c.sendTx(s, bogus, [{ body: 'x' }]);
      expect(o).to.deep.include({ state: 'rejected', condition: 'amqp:transaction:unknown-id' });
      expect(await receive(url(), 'tx.unknown', { idleMs: 300 })).to.have.length(0);
    } finally { await c.close(); }
  });

  it(`over ${MAX_TRANSACTION_MESSAGES} messages the transaction can only roll back`, async function () {
    const c = await Controller.open(url());
    try {
      const s = await openSender(c.conn, { address: 'tx.limit' });
      const id = await c.declare();
      const outcomes = c.sendTx(s, id, Array.from({ length: MAX_TRANSACTION_MESSAGES + 1 }, (_, i) => ({ body: i })));
      await sleep(500);
      const d = await c.discharge(id, false);
      expect(d).to.deep.include({ state: 'rejected', condition: 'amqp:transaction:rollback' });
      const per = await outcomes;
      expect(per.at(-1)).to.deep.include({ state: 'rejected', condition: 'amqp:resource-limit-exceeded' });
      expect(per.slice(0, -1).every((o) => o.inner === 'rejected' && o.condition === 'amqp:transaction:rollback')).to.equal(true);
      expect(await receive(url(), 'tx.limit', { idleMs: 300 })).to.have.length(0);
    } finally { await c.close(); }
  });

  it('a coordinator link or connection that goes away rolls its open transactions back', async function () {
    const c = await Controller.open(url());
    const s = await openSender(c.conn, { address: 'tx.closed' });
    const id = await c.declare();
    const outcomes = c.sendTx(s, id, [{ body: 1 }, { body: 2 }]);
    await sleep(200);
    c.coordinator.close();
    const per = await outcomes;
    expect(per.every((o) => o.inner === 'rejected' && o.condition === 'amqp:transaction:rollback')).to.equal(true);
    await c.close();
    const c2 = await Controller.open(url());
    const s2 = await openSender(c2.conn, { address: 'tx.closed' });
    const id2 = await c2.declare();
    c2.sendTx(s2, id2, [{ body: 3 }]).catch(() => {});
    await sleep(200);
    c2.conn.connection.socket?.destroy?.(); // connection lost, no discharge
    await sleep(200);
    expect(await receive(url(), 'tx.closed', { idleMs: 300 })).to.have.length(0);
  });

  it('transactional acquisition: outcome applied at commit, released at rollback', async function () {
    const q = 'tx.acquire';
    await send(url(), q, [{ body: 'm1' }, { body: 'm2' }, { body: 'm3' }]);
    const c = await Controller.open(url());
    try {
      const rcv = await openReceiver(c.conn, { address: q });
      const accept = (m: Received, id: Buffer) => m.delivery.update(false, TransactionalState.create({ txn_id: id, outcome: M.accepted().described() }).described());
      const inbox: Received[] = [];
      rcv.on('message', (ctx: any) => inbox.push({ message: ctx.message, delivery: ctx.delivery }));
      const take = async (n: number) => { rcv.add_credit(n); for (let i = 0; i < 50 && inbox.length < n; i++) await sleep(20); return inbox.splice(0, inbox.length); };
      // Rollback: the three come back.
      let id = await c.declare();
      let got = await take(3);
      expect(got).to.have.length(3);
      for (const m of got) accept(m, id);
      await sleep(100);
      expect(await c.discharge(id, true)).to.deep.include({ state: 'accepted' });
      for (const m of got) m.delivery.update(true, M.released().described()); // as Proton does after an abort
      got = await take(3);
      expect(got.map((m) => m.message.body)).to.deep.equal(['m1', 'm2', 'm3']);
      // Commit: accept two of them in the transaction; they are gone, the third stays.
      id = await c.declare();
      accept(got[0], id); accept(got[1], id);
      await sleep(100);
      // Settling before the discharge does not apply the outcome early.
      got[0].delivery.update(true); got[1].delivery.update(true);
      got[2].delivery.update(true, M.released().described());
      await sleep(100);
      expect(await c.discharge(id, false)).to.deep.include({ state: 'accepted' });
    } finally { await c.close(); }
    await sleep(100);
    expect((await receive(url(), q, { idleMs: 400 })).map((m) => m.message.body)).to.deep.equal(['m3']);
  });

  it('Proton tx_send.py and tx_recv.py run unchanged (interop)', async function () {
    if (!protonAvailable()) throw new Error('python3-qpid-proton is missing: apt-get install -y python3-qpid-proton');
    const addr = `${url()}/tx.proton`;
    const s = await runProton('tx_send.py', ['-a', addr, '-m', '30', '-b', '7']);
    expect(s.code, s.stderr + s.stdout).to.equal(0);
    expect(s.stdout).to.contain('all messages committed');
    const r2 = await runProton('tx_recv.py', ['-a', addr, '-m', '30', '-b', '10']);
    expect(r2.code, r2.stderr + r2.stdout).to.equal(0);
    expect(r2.stdout.split('\n').filter((l) => l.includes('sequence'))).to.have.length(30);
    expect(await receive(url(), 'tx.proton', { idleMs: 400 })).to.have.length(0);
  });
});

describe('AMQP local transactions: broker crash between declare and discharge', function () {
  this.timeout(60000);

  it('leaves nothing after kill -9 and restart on the same data', async function () {
    const dataDir = tempDir('tidemark-tx-crash-');
    try {
      let child = await spawnBroker(['--data', dataDir, '--port', '0']);
      try {
        await send(child.url, sowTarget('tx.crash'), [rec('kept')]);
        const c = await Controller.open(child.url);
        const s = await openSender(c.conn, sowTarget('tx.crash'));
        const id = await c.declare();
        void c.sendTx(s, id, Array.from({ length: 10 }, (_, i) => rec(`lost${i}`)));
        // A plain publish on the same session after the transfers: once it is accepted, the
        // broker has buffered them.
        const plain = await sendAll(await openSender(c.conn, { address: 'tx.crash.marker' }), [{ body: 'marker' }]);
        expect(plain[0].state).to.equal('accepted');
      } finally { await child.kill('SIGKILL'); }
      child = await spawnBroker(['--data', dataDir, '--port', '0']);
      try {
        const after = await sowQuery(child.url, 'tx.crash');
        expect(after.records.map((m) => bodyJson(m).id)).to.deep.equal(['kept']);
        expect(after.groupEnd).to.equal(1);
        expect((await receive(child.url, 'tx.crash.marker', { count: 1 })).map((m) => m.message.body)).to.deep.equal(['marker']);
      } finally { await child.kill('SIGKILL'); }
    } finally { rmSync(dataDir, { recursive: true, force: true }); }
  });
});
