/**
 * AMQP local transactions: defects found by the transactions audit (docs/transactions.md,
 * docs/robustness.md 14 "Transactions").
 *
 * 1. A commit whose batch is being written applies its held acquisitions afterwards: a
 *    receiver link or connection closed right after the discharge released them (publishes
 *    stored, consumed messages redelivered).
 * 2. Concurrent transactions on one session closed rhea's session incoming window (a fixed
 *    buffer of 2048 unsettled deliveries) before the discharges could arrive: deadlock.
 * 3. The bytes buffered by open transactions were unbounded.
 * 4. A delivery acquired in a transaction that rolls back was settled with the transactional
 *    accept the receiver sent, not with released.
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { r, connect, openSender, openReceiver, receive, send, sleep, type Conn } from '../support/client.js';
import { TransactionalState } from '../../lib/core/protocol/rhea-patches.js';
import { MAX_TRANSACTION_BYTES, MAX_CONNECTION_TRANSACTION_BYTES } from '../../lib/core/protocol/transactions.js';
import { openCoordinator, markTransactionalTransfers } from '../../tools/common/transactions.js';
import { controlBody, outcomeOf, type TxOutcome } from '../support/transactions.js';

const T = r.types;
const M = r.message;


class Controller {
  readonly conn: Conn;
  readonly coordinator: any;
  readonly txnOf = new Map<number, Buffer>();
  readonly #hooked = new Set<any>();
  private constructor(conn: Conn, coordinator: any) { this.conn = conn; this.coordinator = coordinator; }

  static async open(url: string, conn?: Conn): Promise<Controller> {
    const c = conn ?? await connect(url);
    const coordinator = await new Promise<any>((resolve, reject) => {
      const s = openCoordinator(c.connection, 'txn-ctrl-' + Math.random());
      s.once('sendable', () => resolve(s));
      s.once('sender_close', () => reject(new Error('coordinator refused')));
    });
    return new Controller(c, coordinator);
  }

  control(body: Buffer): Promise<any> {
    return new Promise((resolve) => {
      const d = this.coordinator.send(body, undefined, 0);
      const onSettled = (ctx: any) => { if (ctx.delivery === d) { this.coordinator.removeListener('settled', onSettled); resolve(d); } };
      this.coordinator.on('settled', onSettled);
    });
  }

  async declare(): Promise<Buffer> {
    const d = await this.control(controlBody(0x31, [null]));
    const id = d.remote_state?.txn_id;
    if (!Buffer.isBuffer(id)) throw Object.assign(new Error('declare failed'), outcomeOf(d));
    return id;
  }

  async discharge(txnId: Buffer, fail: boolean): Promise<TxOutcome> {
    return outcomeOf(await this.control(controlBody(0x32, [T.wrap_binary(txnId), fail])));
  }

  hook(sender: any): void {
    if (this.#hooked.has(sender.session)) return;
    this.#hooked.add(sender.session);
    markTransactionalTransfers(sender.session, this.txnOf);
  }

  sendTx(sender: any, txnId: Buffer, messages: any[]): Promise<TxOutcome[]> {
    this.hook(sender);
    const deliveries = messages.map((m) => { const d = sender.send(m); this.txnOf.set(d.id, txnId); return d; });
    return new Promise((resolve) => {
      const check = () => { if (deliveries.every((d) => d.remote_settled)) { sender.removeListener('settled', check); resolve(deliveries.map(outcomeOf)); } };
      sender.on('settled', check);
      check();
    });
  }

  close(): Promise<void> { return this.conn.close(); }
}

const txAccept = (d: any, id: Buffer) => d.update(false, TransactionalState.create({ txn_id: id, outcome: M.accepted().described() }).described());
const withTimeout = <X>(p: Promise<X>, ms: number, what: string): Promise<X | string> =>
  Promise.race([p, new Promise<string>((res) => setTimeout(() => res(`TIMEOUT(${what})`), ms))]);

describe('AMQP local transactions: audit fixes', function () {
  this.timeout(60000);
  const b = useBroker({ autoCreateQueues: true });
  const url = () => b.get().url;
  const browse = (address: string) => receive(url(), { address, distribution_mode: 'copy' }, { idleMs: 300 });

  /** A message taken unsettled by a receiver on the controller's connection, accepted in a new transaction. */
  async function consumeInTx(c: Controller, inQ: string): Promise<{ rcv: any; id: Buffer }> {
    const rcv = await openReceiver(c.conn, { address: inQ });
    const m = await new Promise<any>((res) => { rcv.once('message', (ctx: any) => res(ctx)); rcv.add_credit(1); });
    const id = await c.declare();
    txAccept(m.delivery, id);
    return { rcv, id };
  }

  for (const withPublish of [false, true]) {
    it(`a receiver closed right after the discharge keeps its committed consume (${withPublish ? 'with' : 'without'} a publish)`, async function () {
      const inQ = `audit.close.in.${withPublish}`, outQ = `audit.close.out.${withPublish}`;
      await send(url(), inQ, [{ body: 'input-1' }]);
      const c = await Controller.open(url());
      try {
        const snd = await openSender(c.conn, { address: outQ });
        const { rcv, id } = await consumeInTx(c, inQ);
        if (withPublish) void c.sendTx(snd, id, [{ body: 'output-1' }]);
        await sleep(100);
        const dis = c.discharge(id, false);
        rcv.close(); // the detach leaves right after the discharge
        expect(await withTimeout(dis, 5000, 'discharge')).to.deep.include({ state: 'accepted' });
        await sleep(300);
        expect((await browse(inQ)).map((x) => x.message.body), 'consumed in a committed transaction').to.deep.equal([]);
        expect((await browse(outQ)).map((x) => x.message.body)).to.deep.equal(withPublish ? ['output-1'] : []);
      } finally { await c.close(); }
    });
  }

  it('a connection dropped right after the discharge: the consume goes with the publish', async function () {
    await send(url(), 'audit.conn.in', [{ body: 'input-1' }]);
    const c = await Controller.open(url());
    const snd = await openSender(c.conn, { address: 'audit.conn.out' });
    const { id } = await consumeInTx(c, 'audit.conn.in');
    void c.sendTx(snd, id, [{ body: 'output-1' }]);
    await sleep(100);
    void c.discharge(id, false);
    setImmediate(() => c.conn.connection.socket?.destroy?.()); // after the discharge frame is written
    await sleep(500);
    const input = await browse('audit.conn.in');
    const output = await browse('audit.conn.out');
    const committed = output.length === 1;
    expect(input.length, `publish ${committed ? 'committed' : 'rolled back'}; the consume must match`).to.equal(committed ? 0 : 1);
  });

  it('three transactions of 700 transfers on one session do not close its window (no deadlock)', async function () {
    const N = 700, K = 3;
    const c = await Controller.open(url(), await connect(url(), { session_buffer_size: 20000 }));
    try {
      const s = await openSender(c.conn, { address: 'audit.window' });
      const ids: Buffer[] = [];
      for (let k = 0; k < K; k++) ids.push(await c.declare());
      const outs = ids.map((id, k) => c.sendTx(s, id, Array.from({ length: N }, (_, i) => ({ body: `t${k}-${i}` }))));
      await sleep(1000);
      for (const id of ids) expect(await withTimeout(c.discharge(id, false), 10000, 'discharge')).to.deep.include({ state: 'accepted' });
      const per = await withTimeout(Promise.all(outs), 5000, 'transfer outcomes');
      expect(per).to.be.an('array');
      for (const o of (per as TxOutcome[][]).flat()) expect(o).to.deep.include({ state: 'transactional', inner: 'accepted' });
      const got = await receive(url(), 'audit.window', { idleMs: 500, credit: 1000 });
      expect(got).to.have.length(N * K);
    } finally { await c.close(); }
  });

  it('an open transaction and plain transfers behind it on one session do not close its window', async function () {
    const c = await Controller.open(url(), await connect(url(), { session_buffer_size: 20000 }));
    try {
      const s = await openSender(c.conn, { address: 'audit.window2' });
      const id = await c.declare();
      const tx = c.sendTx(s, id, [{ body: 'tx-0' }]);
      const plain = Array.from({ length: 2500 }, (_, i) => s.send({ body: `p${i}` }));
      await sleep(1500);
      expect(await withTimeout(c.discharge(id, false), 10000, 'discharge')).to.deep.include({ state: 'accepted' });
      expect(await withTimeout(tx, 5000, 'tx outcome')).to.deep.equal([{ state: 'transactional', txn: id.toString('hex'), inner: 'accepted', condition: undefined, description: undefined }]);
      for (let i = 0; i < 100 && !plain.every((d) => d.remote_settled); i++) await sleep(50);
      expect(plain.every((d) => d.remote_settled)).to.equal(true);
      const got = await receive(url(), 'audit.window2', { idleMs: 500, credit: 1000 });
      expect(got).to.have.length(2501);
    } finally { await c.close(); }
  });

  it(`a transaction over ${MAX_TRANSACTION_BYTES} bytes is refused and can only roll back`, async function () {
    const c = await Controller.open(url());
    try {
      const s = await openSender(c.conn, { address: 'audit.bytes' });
      const id = await c.declare();
      const body = Buffer.alloc(1_000_000, 7);
      const n = Math.ceil(MAX_TRANSACTION_BYTES / 1_000_000) + 2;
      const outcomes = c.sendTx(s, id, Array.from({ length: n }, () => ({ body })));
      const per = await withTimeout(outcomes, 30000, 'transfer outcomes');
      expect(per).to.be.an('array');
      const refused = (per as TxOutcome[]).filter((o) => o.state === 'rejected' && o.condition === 'amqp:resource-limit-exceeded');
      expect(refused.length).to.be.greaterThan(0);
      expect((per as TxOutcome[]).every((o) => o.state === 'rejected' || (o.inner === 'rejected' && o.condition === 'amqp:transaction:rollback'))).to.equal(true);
      expect(await c.discharge(id, false)).to.deep.include({ state: 'rejected', condition: 'amqp:transaction:rollback' });
      expect(await receive(url(), 'audit.bytes', { idleMs: 300 })).to.have.length(0);
    } finally { await c.close(); }
  });

  it(`the open transactions of one connection are refused past ${MAX_CONNECTION_TRANSACTION_BYTES} bytes together`, async function () {
    const c = await Controller.open(url());
    try {
      const s = await openSender(c.conn, { address: 'audit.connbytes' });
      const body = Buffer.alloc(1_000_000, 7);
      const per = Math.floor(MAX_TRANSACTION_BYTES / 1_000_000) - 4; // each under the per-transaction bound
      const k = Math.ceil(MAX_CONNECTION_TRANSACTION_BYTES / (per * 1_000_000));
      const ids: Buffer[] = [];
      const outs: Array<Promise<TxOutcome[]>> = [];
      for (let i = 0; i < k; i++) {
        const id = await c.declare();
        ids.push(id);
        outs.push(c.sendTx(s, id, Array.from({ length: per }, () => ({ body }))));
        await sleep(300);
      }
      const last = await withTimeout(outs[k - 1], 30000, 'outcomes');
      expect(last).to.be.an('array');
      expect((last as TxOutcome[]).some((o) => o.state === 'rejected' && o.condition === 'amqp:resource-limit-exceeded')).to.equal(true);
      expect(await c.discharge(ids[k - 1], false)).to.deep.include({ state: 'rejected', condition: 'amqp:transaction:rollback' });
      // The others are within the bound and commit; their bytes are then free again.
      for (let i = 0; i < k - 1; i++) expect(await c.discharge(ids[i], false)).to.deep.include({ state: 'accepted' });
      const again = await c.declare();
      const o = c.sendTx(s, again, [{ body }]);
      expect(await c.discharge(again, false)).to.deep.include({ state: 'accepted' });
      expect((await o)[0]).to.deep.include({ state: 'transactional', inner: 'accepted' });
    } finally { await c.close(); }
  });

  it('a delivery acquired in a transaction that rolls back is settled with released', async function () {
    await send(url(), 'audit.release', [{ body: 'm1' }]);
    const c = await Controller.open(url());
    try {
      const rcv = await openReceiver(c.conn, { address: 'audit.release' });
      const m = await new Promise<any>((res) => { rcv.once('message', (ctx: any) => res(ctx)); rcv.add_credit(1); });
      const id = await c.declare();
      txAccept(m.delivery, id);
      await sleep(100);
      expect(await c.discharge(id, true)).to.deep.include({ state: 'accepted' });
      for (let i = 0; i < 50 && !m.delivery.remote_settled; i++) await sleep(20);
      expect(m.delivery.remote_settled).to.equal(true);
      expect(outcomeOf(m.delivery)).to.deep.include({ state: 'released' });
    } finally { await c.close(); }
    expect((await browse('audit.release')).map((x) => x.message.body)).to.deep.equal(['m1']);
  });
});
