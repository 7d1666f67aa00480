/**
 * AMQP 1.0 local transactions [AMQP 4] (docs/transactions.md).
 *
 * A client attaches a sender to a `coordinator` target; we echo a coordinator with the
 * capability `amqp:local-transactions`. On that link it sends `declare` (answered with
 * `declared{txn-id}`) and `discharge{txn-id, fail}` (answered with `accepted`, or `rejected`
 * carrying a transaction error).
 *
 * - Transactional transfers (delivery state `transactional-state{txn-id}` on any ordinary
 *   link of the same connection) are buffered in their transaction, not published. At a
 *   commit every queue's buffered messages become one window (Queue.prepareWindow:
 *   contiguous SCNs), and the ops of all queues go to ONE committer.add, so they land in one
 *   LevelDB batch: all visible or none (wire.md 3, semantics.md 8). Once durable, each
 *   transfer is settled with `transactional-state{txn-id, accepted}` and the discharge is
 *   accepted. A rollback (fail = true, a failed prepare or write, the coordinator link or
 *   the connection going away) writes nothing and settles the transfers with
 *   `transactional-state{txn-id, rejected(amqp:transaction:rollback)}`.
 * - Transactional acquisition: a disposition `transactional-state{txn-id, outcome}` on one
 *   of our deliveries holds that outcome in the transaction; it is applied at commit
 *   (after the publishes are durable) and the delivery is released at rollback. A consumer
 *   link closing while its transaction is discharged closes after it (whenSettled).
 * - Bounds: messages and bytes per transaction, bytes per connection (rollback-only past
 *   them), and the session's incoming window, kept open by settling the oldest transactional
 *   transfers provisionally when rhea's buffer nears full (relieve).
 *
 * The protocol server routes to this module (server.ts, marked "transactions"); the rhea
 * decoders for the coordinator terminus and the transactional delivery states are added by
 * rhea-patches.ts (patch 3).
 */
import { randomBytes } from 'node:crypto';
import rhea from 'rhea';
import type { Queue } from '../queue/queue.js';
import type { InboundMessage } from '../queue/inbound.js';
import type { BatchOp } from '../storage/store.js';
import { Conditions } from '../errors.js';
import { logger } from '../log.js';
import { deliverOutcome } from './sink.js';
import { rawBytes } from './raw-message.js';
import { Coordinator, Declared, TransactionalState, TX_TYPES, isTxDescriptor } from './rhea-patches.js';

const log = logger('protocol');
const T: any = (rhea as any).types;
const M: any = (rhea as any).message;

/**
 * Most transactional transfers plus transactional acquisitions one transaction may hold.
 * A transactional transfer stays unsettled until the discharge, and rhea keeps a session's
 * unsettled incoming deliveries in a fixed buffer of 2048 (it advertises what is left as the
 * session's incoming window), so a larger transaction could close the window before the
 * client gets to send its discharge. Going over marks the transaction rollback-only: the
 * transfer is rejected (amqp:resource-limit-exceeded) and the commit fails.
 */
export const MAX_TRANSACTION_MESSAGES = 1000;
/**
 * Most message bytes one transaction may buffer (like server.ts MAX_PENDING_BYTES). Its
 * transfers are held in memory until the discharge and their credit is returned at once, so
 * without it one transaction could hold any amount. Going over marks it rollback-only.
 */
export const MAX_TRANSACTION_BYTES = 64 * 1024 * 1024;
/** Most message bytes the open transactions of one connection may buffer together. */
export const MAX_CONNECTION_TRANSACTION_BYTES = 128 * 1024 * 1024;
/**
 * rhea keeps a session's incoming deliveries in a fixed buffer (2048 by default) and frees
 * them only from its oldest end: one unsettled delivery keeps every later one in the buffer,
 * settled or not, and what is left is advertised as the session's incoming window. When the
 * buffer has less than this left, the oldest transactional transfers of the session are
 * settled provisionally (see #relieve), so the window can never close on a discharge.
 */
export const SESSION_BUFFER_RESERVE = 256;
/** Most open (declared, not yet discharged) transactions per coordinator link. */
export const MAX_OPEN_TRANSACTIONS = 64;
/** Credit the coordinator link keeps granted (declare/discharge are small and answered at once). */
const COORDINATOR_CREDIT = 100;

/** Transaction errors [AMQP 4.5.8]. */
export const TxConditions = {
  unknownId: 'amqp:transaction:unknown-id',
  rollback: 'amqp:transaction:rollback',
} as const;

interface AmqpError { condition: string; description: string }

interface Posted { queue: Queue; msg: InboundMessage; delivery: any; size: number }
interface Acquired { delivery: any; kind: 'accepted' | 'rejected' | 'released' | 'modified'; outcome: unknown }
interface Txn {
  id: Buffer;
  key: string;
  coordinator: any;
  connection: any;
  posted: Posted[];
  acquired: Map<any, Acquired>;
  state: 'open' | 'discharging' | 'done';
  /** Message bytes buffered in `posted`. */
  bytes: number;
  /** Run once the transaction is done (committed or rolled back): deferred consumer closes (whenSettled). */
  waiters: Array<() => void>;
  /** The discharge is being carried out: the set of acquisitions is final. */
  committing?: boolean;
  /** Set when the transaction can only roll back (limit exceeded); the reason. */
  rollbackOnly?: string;
}

const COORDINATOR = Symbol('tidemark.tx.coordinator');
/** On one of our outgoing deliveries: the transaction holding its outcome, or 'refused'. */
const HELD = Symbol('tidemark.tx.held');
/** On one of our outgoing deliveries: a transaction already applied or dropped its outcome. */
const DONE = Symbol('tidemark.tx.done');
/** On a transactional transfer we buffer: its transaction. */
const POSTED = Symbol('tidemark.tx.posted');
/** On a connection: message bytes buffered by its open transactions. */
const CONN_BYTES = Symbol('tidemark.tx.bytes');

type Control = { kind: 'declare'; globalId: unknown } | { kind: 'discharge'; txnId: Buffer | undefined; fail: boolean } | { kind: 'invalid'; reason: string };

export class Transactions {
  readonly #txns = new Map<string, Txn>();

  /** True for the target of a coordinator link (decoded by rhea-patches.ts patch 3). */
  static isCoordinatorTarget(target: unknown): boolean {
    return target instanceof Coordinator;
  }

  /** Accepts a coordinator link [AMQP 4.2]: echo the coordinator, grant credit, roll back on close. */
  attachCoordinator(receiver: any, onClose: (fn: () => void) => void): void {
    const open = new Set<Txn>();
    receiver[COORDINATOR] = open;
    receiver.local.attach.target = Coordinator.create({ capabilities: ['amqp:local-transactions'] }).described();
    onClose(() => {
      // A coordinator that goes away (detach, session end, connection loss) rolls back
      // every transaction it declared and has not discharged [AMQP 4.2].
      for (const txn of [...open]) if (txn.state === 'open') this.#rollback(txn, 'coordinator link closed');
      open.clear();
    });
    receiver.flow(COORDINATOR_CREDIT);
    log.info('transaction coordinator attached', { link: receiver.name });
  }

  isCoordinatorLink(receiver: any): boolean {
    return receiver?.[COORDINATOR] !== undefined;
  }

  /** A message on a coordinator link: declare or discharge. */
  onControl(receiver: any, delivery: any, message: any): void {
    if (receiver.credit < COORDINATOR_CREDIT / 2 && receiver.is_open()) receiver.flow(COORDINATOR_CREDIT - receiver.credit);
    const open: Set<Txn> = receiver[COORDINATOR];
    const bytes = rawBytes(message);
    const ctl: Control = bytes ? parseControl(bytes) : { kind: 'invalid', reason: 'message could not be decoded' };
    const answer = (state: unknown) => settle(delivery, state);
    if (ctl.kind === 'invalid') {
      answer(rejected({ condition: Conditions.decodeError, description: ctl.reason }));
      return;
    }
    if (ctl.kind === 'declare') {
      if (ctl.globalId !== null && ctl.globalId !== undefined) {
        answer(rejected({ condition: Conditions.notImplemented, description: 'distributed transactions (declare with a global-id) are not supported' }));
        return;
      }
      if (open.size >= MAX_OPEN_TRANSACTIONS) {
        answer(rejected({ condition: Conditions.resourceLimit, description: `too many open transactions on this coordinator (max ${MAX_OPEN_TRANSACTIONS})` }));
        return;
      }
      const id = randomBytes(16);
      const txn: Txn = { id, key: id.toString('hex'), coordinator: receiver, connection: receiver.connection, posted: [], acquired: new Map(), state: 'open', bytes: 0, waiters: [] };
      this.#txns.set(txn.key, txn);
      open.add(txn);
      answer(Declared.create({ txn_id: id }).described());
      log.debug('transaction declared', { txn: txn.key });
      return;
    }
    // discharge [AMQP 4.3]
    const txn = ctl.txnId ? this.#find(ctl.txnId, receiver.connection) : undefined;
    if (!txn || txn.state !== 'open' || txn.coordinator !== receiver) {
      answer(rejected({ condition: TxConditions.unknownId, description: `unknown transaction ${ctl.txnId ? ctl.txnId.toString('hex') : '(no txn-id)'}` }));
      return;
    }
    open.delete(txn);
    // From here no transfer joins the transaction (rhea dispatches transfers as they are
    // read, so that cut is exact). Dispositions are different: rhea dispatches them from its
    // next processing tick (process.nextTick), so a transactional accept read just before
    // this discharge may not have reached onOutgoingState yet. Run the discharge after that
    // tick (setImmediate) and keep taking acquisitions until then.
    txn.state = 'discharging';
    setImmediate(() => {
      if (txn.state === 'done') return;
      if (ctl.fail) {
        this.#rollback(txn, 'rolled back by the client');
        answer(M.accepted().described());
        return;
      }
      this.#commit(txn, (err) => answer(err ? rejected(err) : M.accepted().described()));
    });
  }

  /** The txn-id of a transactional transfer (state transactional-state), else undefined. */
  transactional(delivery: any): Buffer | undefined {
    return txnStateOf(delivery?.remote_state)?.txnId;
  }

  /**
   * Buffers a transactional transfer in its transaction [AMQP 4.4.1]. Settles the delivery
   * itself: now with an error (unknown txn-id, limit), or at discharge.
   */
  enlist(delivery: any, queue: Queue, msg: InboundMessage): void {
    const txnId = this.transactional(delivery)!;
    const txn = this.#find(txnId, delivery.link?.connection);
    if (!txn || txn.state !== 'open') {
      settle(delivery, rejected({ condition: TxConditions.unknownId, description: `unknown transaction ${txnId.toString('hex')}` }));
      return;
    }
    const size = msg.bytes.length;
    if (this.#full(txn, size)) {
      settle(delivery, rejected({ condition: Conditions.resourceLimit, description: txn.rollbackOnly! }));
      return;
    }
    txn.posted.push({ queue, msg, delivery, size });
    txn.bytes += size;
    txn.connection[CONN_BYTES] = (txn.connection[CONN_BYTES] ?? 0) + size;
    delivery[POSTED] = txn;
  }

  /**
   * Keeps `session`'s incoming window open [AMQP 2.5.6] while transactions hold transfers on
   * it. Called for every transfer the session receives. rhea frees its incoming buffer only
   * from the oldest end, so an unsettled transactional transfer keeps every later transfer in
   * it; enough of them (several transactions, or one and plain traffic behind it) would close
   * the window, and the discharge that would settle them could never arrive. When less than
   * SESSION_BUFFER_RESERVE entries are left, the transactional transfers in the older half of
   * the buffer are settled now with the outcome they will have: `transactional-state{txn-id,
   * accepted}`, provisional until the discharge [AMQP 4.4.1] (or rejected(rollback) for a
   * rollback-only transaction). Everything else there settles without the client.
   */
  relieve(session: any): void {
    const buf = session?.incoming?.deliveries;
    if (!buf || typeof buf.capacity !== 'number' || buf.size < buf.capacity - SESSION_BUFFER_RESERVE) return;
    const half = Math.min(buf.size, Math.ceil(buf.capacity / 2));
    let n = 0;
    for (let i = 0; i < half; i++) {
      const d = buf.entries[(buf.head + i) % buf.capacity];
      const txn: Txn | undefined = d?.[POSTED];
      if (!txn || d.settled || d.remote_settled || txn.state === 'done') continue;
      settle(d, txn.rollbackOnly ? this.#rollbackState(txn, txn.rollbackOnly) : this.#acceptedState(txn));
      n++;
    }
    if (n > 0) log.debug('session incoming buffer nearly full: transactional transfers settled provisionally', { settled: n, size: buf.size, capacity: buf.capacity });
  }

  /**
   * Runs `fn` once no transaction being discharged holds an outcome for a delivery of
   * `link`, at once if none does. server.ts defers a consumer's close with it: a commit
   * whose batch is being written applies its held acquisitions afterwards, and a close in
   * between would release them (the publishes stored, the consumed messages back).
   */
  whenSettled(link: any, fn: () => void): void {
    const pending: Txn[] = [];
    for (const txn of this.#txns.values()) {
      if (txn.state !== 'discharging' || txn.connection !== (link?.connection ?? link?.session?.connection)) continue;
      for (const d of txn.acquired.keys()) if (d.link === link) { pending.push(txn); break; }
    }
    if (pending.length === 0) { fn(); return; }
    let left = pending.length;
    for (const txn of pending) txn.waiters.push(() => { if (--left === 0) fn(); });
  }

  /**
   * A disposition with transactional-state on one of our deliveries (rhea event
   * `transactional_state`): hold its outcome in the transaction [AMQP 4.4.2].
   */
  onOutgoingState(sender: any, delivery: any): void {
    if (delivery[DONE]) return; // the client settling after the discharge: already applied
    const st = txnStateOf(delivery.remote_state);
    if (!st) return;
    const txn = this.#find(st.txnId, delivery.link?.connection ?? sender?.connection);
    if (!txn || (txn.state !== 'open' && !(txn.state === 'discharging' && !txn.committing))) {
      // No outcome to hold and none to apply: refuse the link; its unsettled deliveries are
      // released when it closes.
      delivery[HELD] = 'refused';
      try { sender.close({ condition: TxConditions.unknownId, description: `unknown transaction ${st.txnId.toString('hex')}` }); } catch { /* gone */ }
      return;
    }
    if (st.outcome === undefined || st.outcome === null) return; // no outcome named: nothing to hold
    const outcome = M.unwrap_outcome(st.outcome);
    const kind = outcome?.constructor?.composite_type;
    if (kind !== 'accepted' && kind !== 'rejected' && kind !== 'released' && kind !== 'modified') return;
    const prev = delivery[HELD];
    if (prev && prev !== txn && prev !== 'refused') (prev as Txn).acquired.delete(delivery);
    if (prev !== txn && this.#full(txn, 0)) {
      delivery[HELD] = 'refused';
      try { sender.close({ condition: Conditions.resourceLimit, description: txn.rollbackOnly! }); } catch { /* gone */ }
      return;
    }
    delivery[HELD] = txn;
    txn.acquired.set(delivery, { delivery, kind, outcome });
  }

  /** True while a transaction decides the outcome of this outgoing delivery (server skips rhea's outcome events). */
  holds(delivery: any): boolean {
    return delivery?.[HELD] !== undefined;
  }

  /** Open transactions (tests, metrics). */
  get open(): number { return this.#txns.size; }

  #find(id: Buffer, connection: any): Txn | undefined {
    const txn = this.#txns.get(id.toString('hex'));
    // txn-ids are scoped to the connection that declared them.
    return txn && txn.connection === connection ? txn : undefined;
  }

  /** True if the transaction cannot take one more transfer of `size` bytes (or acquisition): it becomes rollback-only. */
  #full(txn: Txn, size: number): boolean {
    if (txn.rollbackOnly) return true;
    let why: string | undefined;
    if (txn.posted.length + txn.acquired.size >= MAX_TRANSACTION_MESSAGES) why = `transaction exceeds ${MAX_TRANSACTION_MESSAGES} transfers and acquisitions`;
    else if (txn.bytes + size > MAX_TRANSACTION_BYTES) why = `transaction exceeds ${MAX_TRANSACTION_BYTES} bytes of messages`;
    else if ((txn.connection[CONN_BYTES] ?? 0) + size > MAX_CONNECTION_TRANSACTION_BYTES) why = `the open transactions of this connection exceed ${MAX_CONNECTION_TRANSACTION_BYTES} bytes of messages`;
    if (!why) return false;
    txn.rollbackOnly = `${why}; it can only roll back`;
    // It cannot commit: what it buffered is answered and freed now, not at the discharge.
    const state = this.#rollbackState(txn, txn.rollbackOnly);
    for (const p of txn.posted) settle(p.delivery, state);
    this.#dropPosted(txn);
    return true;
  }

  #acceptedState(txn: Txn): unknown {
    return TransactionalState.create({ txn_id: txn.id, outcome: M.accepted().described() }).described();
  }

  #rollbackState(txn: Txn, reason: string): unknown {
    return TransactionalState.create({ txn_id: txn.id, outcome: rejected({ condition: TxConditions.rollback, description: reason }) }).described();
  }

  /** Forgets the buffered transfers and their bytes. */
  #dropPosted(txn: Txn): void {
    for (const p of txn.posted) delete p.delivery[POSTED];
    if (txn.bytes) txn.connection[CONN_BYTES] = Math.max(0, (txn.connection[CONN_BYTES] ?? 0) - txn.bytes);
    txn.bytes = 0;
    txn.posted = [];
  }

  /** The transaction is done: run what waited for it (whenSettled). */
  #release(txn: Txn): void {
    const waiters = txn.waiters;
    txn.waiters = [];
    for (const fn of waiters) { try { fn(); } catch (err) { log.error('transaction waiter failed', { err }); } }
  }

  #commit(txn: Txn, done: (err?: AmqpError) => void): void {
    txn.state = 'discharging';
    txn.committing = true;
    if (txn.rollbackOnly) {
      const reason = txn.rollbackOnly;
      this.#rollback(txn, reason);
      done({ condition: TxConditions.rollback, description: reason });
      return;
    }
    // One window per queue, in arrival order; every queue's ops in one batch.
    const byQueue = new Map<Queue, InboundMessage[]>();
    for (const p of txn.posted) {
      let list = byQueue.get(p.queue);
      if (!list) byQueue.set(p.queue, (list = []));
      p.msg.receivedAt = p.queue.ctx.clock.now();
      list.push(p.msg);
    }
    const windows: Array<{ queue: Queue; w: ReturnType<Queue['prepareWindow']> }> = [];
    try {
      for (const [queue, msgs] of byQueue) windows.push({ queue, w: queue.prepareWindow(msgs) });
    } catch (e) {
      // Synchronous: nothing else was prepared meanwhile, so the SCNs can be given back.
      for (const { queue, w } of windows.reverse()) {
        w.failed();
        if (queue.headScn === w.lastScn) queue.headScn = w.firstScn - 1;
      }
      const reason = `transaction rolled back: ${(e as Error)?.message ?? String(e)}`;
      this.#rollback(txn, reason);
      done({ condition: TxConditions.rollback, description: reason });
      return;
    }
    const finish = (err?: Error) => {
      if (err) {
        for (const { w } of [...windows].reverse()) w.failed();
        const reason = `transaction rolled back: storage write failed: ${err.message}`;
        log.error('transaction commit failed', { txn: txn.key, err });
        this.#rollback(txn, reason);
        done({ condition: TxConditions.rollback, description: reason });
        return;
      }
      for (const { w } of windows) w.committed();
      txn.state = 'done';
      this.#txns.delete(txn.key);
      const accepted = this.#acceptedState(txn);
      for (const p of txn.posted) settle(p.delivery, accepted);
      for (const a of txn.acquired.values()) applyOutcome(a.delivery, a.kind, a.outcome);
      log.debug('transaction committed', { txn: txn.key, messages: txn.posted.length, queues: windows.map(({ queue, w }) => `${queue.name}:${w.firstScn}-${w.lastScn}`), acquired: txn.acquired.size });
      this.#dropPosted(txn);
      txn.acquired.clear();
      done();
      this.#release(txn);
    };
    if (windows.length === 0) { finish(); return; }
    const ops: BatchOp[] = [];
    for (const { w } of windows) for (const op of w.ops) ops.push(op);
    // All queues share the engine's committer: one add = one LevelDB batch (atomic).
    windows[0].queue.ctx.committer.add(ops, finish);
  }

  #rollback(txn: Txn, reason: string): void {
    if (txn.state === 'done') return;
    txn.state = 'done';
    txn.committing = true;
    this.#txns.delete(txn.key);
    (txn.coordinator[COORDINATOR] as Set<Txn> | undefined)?.delete(txn);
    const state = this.#rollbackState(txn, reason);
    for (const p of txn.posted) settle(p.delivery, state);
    // Settled with released, not with the transactional accept the receiver sent (sink.ts
    // settles with remote_state): the receiver is not told "accepted" for a released delivery.
    for (const a of txn.acquired.values()) applyOutcome(a.delivery, 'released', M.released());
    this.#dropPosted(txn);
    txn.acquired.clear();
    log.debug('transaction rolled back', { txn: txn.key, reason });
    this.#release(txn);
  }
}

/** Applies a transaction's outcome to one of our deliveries through the consumer's callback. */
function applyOutcome(delivery: any, kind: Acquired['kind'], outcome: unknown): void {
  delete delivery[HELD];
  delivery[DONE] = true;
  if (outcome !== undefined) delivery.remote_state = outcome; // deliverOutcome reads error / modified fields here
  try { deliverOutcome(delivery, kind); } catch (err) { log.error('transactional outcome failed', { err }); }
}

/** Settles an incoming delivery with a state, unless it was pre-settled, already settled (#relieve) or its link is gone. */
function settle(delivery: any, state: unknown): void {
  if (delivery.remote_settled || delivery.settled) return;
  try { delivery.update(true, state); } catch (err) { log.debug('could not settle transactional delivery', { err: String(err) }); }
}

function rejected(err: AmqpError): unknown {
  return M.rejected({ error: err }).described();
}

/** transactional-state from a raw transfer state (rhea leaves it undecoded) or a patched composite. */
function txnStateOf(state: any): { txnId: Buffer; outcome: unknown } | undefined {
  if (!state) return undefined;
  let ts: any;
  if (state instanceof TransactionalState) ts = state;
  else if (state.descriptor && isTxDescriptor(state.descriptor.value, TX_TYPES.transactionalState)) ts = new TransactionalState(state.value ?? []);
  else return undefined;
  const id = ts.txn_id;
  const txnId = Buffer.isBuffer(id) ? id : typeof id === 'string' ? Buffer.from(id, 'utf8') : undefined;
  if (!txnId) return undefined;
  const outcome = ts.outcome;
  return { txnId, outcome: outcome && !(outcome.type?.name === 'Null') ? outcome : undefined };
}

/* ---------- declare / discharge bodies [AMQP 4.5.2, 4.5.3] ---------- */

const AMQP_VALUE = { code: 0x77, symbol: 'amqp:amqp-value:*' };

/** Reads a descriptor at `pos` (after the 0x00 constructor byte). */
function readDescriptor(buf: Buffer, pos: number): { value: number | string; next: number } {
  const code = buf[pos];
  switch (code) {
    case 0x53: return { value: buf[pos + 1], next: pos + 2 };
    case 0x44: return { value: 0, next: pos + 1 };
    case 0x80: return { value: Number(buf.readBigUInt64BE(pos + 1)), next: pos + 9 };
    case 0xa3: { const n = buf[pos + 1]; return { value: buf.toString('latin1', pos + 2, pos + 2 + n), next: pos + 2 + n }; }
    case 0xb3: { const n = buf.readUInt32BE(pos + 1); return { value: buf.toString('latin1', pos + 5, pos + 5 + n), next: pos + 5 + n }; }
    default: throw new Error(`unexpected descriptor constructor 0x${code?.toString(16)}`);
  }
}

/**
 * Finds the amqp-value body and reads the described declare/discharge in it. rhea's own
 * decoder drops the descriptor of a described body value, so declare [global-id] and
 * discharge [txn-id] could not be told apart from its view; the raw bytes can.
 */
export function parseControl(buf: Buffer): Control {
  try {
    const reader = new T.Reader(buf);
    let pos = 0;
    while (pos < buf.length) {
      if (buf[pos] !== 0x00) return { kind: 'invalid', reason: 'message section is not a described type' };
      const section = readDescriptor(buf, pos + 1);
      if (!isTxDescriptor(section.value, AMQP_VALUE)) {
        reader.position = pos;
        reader.read(); // skip header, annotations, properties...
        pos = reader.position;
        continue;
      }
      let p = section.next;
      if (buf[p] !== 0x00) return { kind: 'invalid', reason: 'coordinator message body is not a declare or discharge' };
      const d = readDescriptor(buf, p + 1);
      p = d.next;
      reader.position = p;
      const list = reader.read();
      const items: any[] = Array.isArray(list?.value) ? list.value : [];
      const field = (i: number) => (items[i] === undefined || items[i]?.type?.name === 'Null' ? undefined : items[i].value);
      if (isTxDescriptor(d.value, TX_TYPES.declare)) return { kind: 'declare', globalId: field(0) };
      if (isTxDescriptor(d.value, TX_TYPES.discharge)) {
        const id = field(0);
        if (id !== undefined && !Buffer.isBuffer(id)) return { kind: 'invalid', reason: 'discharge txn-id is not binary' };
        return { kind: 'discharge', txnId: id, fail: field(1) === true };
      }
      return { kind: 'invalid', reason: `coordinator message body ${String(d.value)} is not a declare or discharge` };
    }
    return { kind: 'invalid', reason: 'coordinator message has no amqp-value body' };
  } catch (err) {
    return { kind: 'invalid', reason: `coordinator message could not be decoded: ${(err as Error).message}` };
  }
}
