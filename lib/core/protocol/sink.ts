/** A DeliverySink over a rhea sender: what the core sees of an outgoing link. */
import type { DeliverySink, Outcome, SendOptions } from '../queue/delivery.js';
import { TidemarkError, Conditions, amqpInfo } from '../errors.js';
import { FrameWriter } from './frame-writer.js';
import { joinSplit, type SplitMessage } from '../../codec/message-bytes.js';

const OUTCOME = Symbol('tidemark.outcome');
const TWO32 = 4294967296;
/** How long a drain waits for transfers of other links to be written before it completes anyway. */
const DRAIN_WAIT_FOR_OTHERS_MS = 250;
const SINK = Symbol('tidemark.sink');

/** rhea's tags are the link's counter in decimal (Sender.next_tag); this is the same bytes, in a scratch buffer the frame encoder copies from. */
const TAG = Buffer.alloc(24);
function decimalTag(n: number): Buffer {
  const s = String(n);
  const len = TAG.write(s, 0, 'latin1');
  return TAG.subarray(0, len);
}

/** What the sink reads of a connection's socket (a stand-in when there is none). */
interface SocketLevel { readonly writableLength: number; readonly writableNeedDrain: boolean }
const NO_SOCKET: SocketLevel = { writableLength: 0, writableNeedDrain: false };

export class RheaSink implements DeliverySink {
  readonly id: string;
  readonly presettled: boolean;
  readonly #sender: any;
  #closed = false;
  /** Deliveries sent unsettled and not yet settled by the receiver. */
  #unsettled = 0;
  readonly #maxUnsettled: number;
  /** The connection's socket, whose unwritten bytes bound what the broker sends. */
  readonly #socket: SocketLevel;
  readonly #maxPending: number;
  #waitingDrain = false;

  /**
   * `maxUnsettled`: limits.maxUnsettledPerLink; past it nothing more is sent until some settle.
   * `maxPendingBytes`: limits.maxPendingBytesPerConnection; while the socket holds more than
   * that unwritten (the client stopped reading), nothing more is sent until it drains.
   */
  constructor(sender: any, id: string, maxUnsettled = Infinity, maxPendingBytes = Infinity) {
    this.#sender = sender;
    this.id = id;
    this.presettled = sender.remote?.attach?.snd_settle_mode === 1;
    const mms = Number(sender.remote?.attach?.max_message_size ?? 0);
    this.#receiverMax = Number.isFinite(mms) && mms > 0 ? mms : 0;
    this.#maxUnsettled = maxUnsettled > 0 ? maxUnsettled : Infinity;
    this.#socket = sender.connection?.socket ?? NO_SOCKET;
    this.#maxPending = maxPendingBytes > 0 ? maxPendingBytes : Infinity;
  }

  /** The receiver's max-message-size from its attach; 0 = none. */
  readonly #receiverMax: number;

  /** One of our unsettled deliveries was settled by the receiver. */
  settledOne(): void {
    if (this.#unsettled > 0) this.#unsettled--;
    // A link stopped at maxUnsettledPerLink may send again. (server.ts also resumes a blocked
    // link on the receiver's settlement, which frees rhea's session window as well.)
    if (this.blocked && this.onUnblocked) setImmediate(() => { if (this.blocked && !this.#closed) this.onUnblocked?.(); });
  }

  /** Link credit is there but the session's outgoing window is full (unsettled deliveries). */
  blocked = false;
  /** Called when a blocked link may send again (set by the server to the consumer's onCredit). */
  onUnblocked?: () => void;
  /**
   * Runs `fn` once every write queued so far is durable (set by the server to the committer's
   * whenWritten): a receiver in rcv-settle-mode second is settled then. Default: at once.
   */
  whenStored: (fn: () => void) => void = (fn) => fn();
  #retry: NodeJS.Timeout | undefined;

  /** Transfers handed to rhea but not written yet (rhea takes link credit only when writing). */
  #unwritten(): number {
    const out = this.#sender.session?.outgoing;
    return out ? out.next_delivery_id - out.next_pending_delivery : 0;
  }

  credit(): number {
    if (this.#closed || !this.#sender.is_open?.()) return 0;
    if (this.#unsettled >= this.#maxUnsettled) { this.blocked = true; this.#inTransit = false; return 0; }
    // Back-pressure from the socket: a client that does not read would otherwise have every
    // message it has credit for buffered here (a sow of 80 MB per client). One comparison on
    // the fast path; 'drain' (which Node emits only after a write said to wait) resumes.
    if (this.#socket.writableLength > this.#maxPending && this.#socket.writableNeedDrain) { this.#inTransit = true; return this.#waitForDrain(); }
    // Without this a synchronous loop would send far past the receiver's credit: rhea
    // decrements link credit when it writes a transfer, not when send() queues it.
    if (this.#sender.sendable()) {
      const n = this.#sender.credit - this.#unwritten();
      if (n > 0) { this.blocked = false; this.#inTransit = false; this.#retryMs = 1; return n; }
      // The credit is taken by transfers still in rhea's queue, other links' too (it is the
      // session's). rhea writes them on its next tick and announces nothing to this link:
      // without asking again, a link with little credit waited for good (audit, session 14).
      this.blocked = true;
      this.#inTransit = true;
      this.#retryLater();
      return 0;
    }
    // rhea raises no event when settlements free the window again: the server re-pumps
    // blocked links on their next settlement (see server.ts 'settled'). Pre-settled
    // deliveries free their slot once written, with no settlement to wait for: retry then.
    this.#inTransit = false; // no credit, or rhea's delivery buffer is full of unsettled ones: a hold the peer lifts
    // A drain whose credit the deliveries used up is complete: answer it here, whatever the
    // consumer waits for (a SOW consumer judged its drain only with credit left, so a drain
    // for 2 with 5 records waiting got the 2 and never its answer: audit, session 16).
    if (this.#drainPending && !(this.#sender.credit > 0)) this.drained();
    if (this.#sender.credit > 0) {
      this.blocked = true;
      const head = this.#sender.session?.outgoing?.deliveries?.get_head?.();
      if (head?.settled && head.remote_settled) this.#retryLater();
    }
    return 0;
  }

  /** Milliseconds before the next retry: doubles (to 100) while the wait lasts, as when a peer keeps its session window shut. */
  #retryMs = 1;
  /** Asks the consumer to send again shortly (once at a time). */
  #retryLater(): void {
    if (this.#retry || !this.onUnblocked) return;
    const ms = this.#retryMs;
    this.#retryMs = Math.min(ms * 2, 100);
    this.#retry = setTimeout(() => { this.#retry = undefined; if (!this.#closed) this.onUnblocked?.(); }, ms);
  }

  /** No credit until the socket drains; then the consumer is asked to send again. */
  #waitForDrain(): number {
    this.blocked = true;
    if (!this.#waitingDrain) {
      const writer = FrameWriter.of(this.#sender.connection);
      if (writer) {
        this.#waitingDrain = true;
        writer.whenDrained(() => {
          this.#waitingDrain = false;
          if (!this.#closed) this.onUnblocked?.();
        });
      }
    }
    return 0;
  }

  send(bytes: Buffer, onOutcome?: (o: Outcome) => void, opts?: SendOptions): void { this.#send(bytes, onOutcome, opts); }

  /** A message in two parts: written straight from them into the frame buffer when sent directly. */
  sendSplit(m: SplitMessage, onOutcome?: (o: Outcome) => void, opts?: SendOptions): void { this.#send(m, onOutcome, opts); }

  #send(payload: Buffer | SplitMessage, onOutcome?: (o: Outcome) => void, opts?: SendOptions): void {
    if (this.#closed) return;
    // A message larger than the receiver's max-message-size is "a message-size-exceeded link
    // error" [AMQP 2.7.3]: not sent, the link ends saying why (it was sent, and a strict
    // client detached on it). What the link had acquired goes back with it.
    const max = this.#receiverMax;
    if (max > 0) {
      const size = Buffer.isBuffer(payload) ? payload.length : payload.headEnd + payload.tail.length - payload.tailStart;
      if (size > max) {
        this.close(new TidemarkError(Conditions.messageSizeExceeded, `a message of ${size} bytes is larger than this receiver's max-message-size (${max}): not sent, and the link is detached; attach with a larger max-message-size (or none) to receive it`));
        return;
      }
    }
    if (opts?.settled || this.presettled) {
      if (this.#sendDirect(payload, true)) return;
    } else {
      const d = this.#sendDirect(payload, false);
      if (d) {
        this.#unsettled++;
        d[SINK] = this;
        if (onOutcome) d[OUTCOME] = onOutcome;
        return;
      }
    }
    const d = this.#sender.send(Buffer.isBuffer(payload) ? payload : joinSplit(payload), undefined, 0);
    if (opts?.settled || this.presettled) { d.settled = true; return; }
    this.#unsettled++;
    d[SINK] = this;
    if (onOutcome) d[OUTCOME] = onOutcome;
  }

  /**
   * A delivery written straight into the connection's frame buffer, with the session and
   * link state moved exactly as rhea's Outgoing.process moves it for one single-frame
   * delivery (ids, credit, delivery count, tag; the outgoing window is constant, rhea-guards.ts
   * 13). rhea's way costs a delivery
   * object with a closure, a queue slot and a pass of process() per message: most of the
   * send path of a snapshot. Only when nothing of this session waits in rhea's outgoing
   * queue (so ids and frames stay in order) and the message fits one frame; otherwise
   * nothing is done, and rhea sends it.
   * Pre-settled: nothing to track, and only while the session tracks no delivery at all
   * (its delivery buffer finds deliveries by id offset from the head, so no id may be
   * missing from it). Unsettled: an OutgoingDelivery goes into rhea's delivery buffer, as
   * rhea's own would, for the peer's disposition to find. Returns true, or that delivery.
   */
  #sendDirect(payload: Buffer | SplitMessage, settled: true): boolean;
  #sendDirect(payload: Buffer | SplitMessage, settled: false): any;
  #sendDirect(payload: Buffer | SplitMessage, settled: boolean): any {
    const s = this.#sender;
    const session = s.session;
    const out = session?.outgoing;
    if (!out || out.next_pending_delivery !== out.next_delivery_id || !(s.credit > 0) || !(out.transfer_window() > 0)) return undefined;
    if (settled ? out.deliveries.size !== 0 : out.deliveries.available() <= 0) return undefined;
    const writer = FrameWriter.of(s.connection);
    if (!writer || !s.connection.socket_ready) return undefined;
    const tag = decimalTag(s.tag);
    const max = out.compute_max_payload(tag);
    const whole = Buffer.isBuffer(payload);
    const size = whole ? payload.length : payload.headEnd + payload.tail.length - payload.tailStart;
    if (max !== undefined && size > max) return undefined;
    s.tag++;
    const id = out.next_delivery_id++;
    out.next_pending_delivery++;
    out.next_transfer_id++;
    s.credit--;
    s.delivery_count++;
    // rhea's counter goes past 2^32; the frame carries it as the serial number it is.
    const wireId = id < TWO32 ? id : id % TWO32;
    if (whole) writer.transfer(session.local.channel, s.local.handle, wireId, tag, 0, settled, false, payload);
    else writer.transferSplit(session.local.channel, s.local.handle, wireId, tag, 0, settled, false, payload);
    if (settled) return true;
    const d = new OutgoingDelivery(out, id, Buffer.from(tag), s);
    out.deliveries.push(d);
    return d;
  }

  /**
   * The last credit() was 0 only because what is on its way out (rhea's queue, the socket)
   * has not been written yet: not a hold the peer must lift (settlements), which a drain
   * must not wait for (a client that settles after its drained fetch would wait for good).
   */
  #inTransit = false;
  /** When a drain first had to wait for this link's transfers to be written (Date.now()). */
  #drainWaitSince = 0;
  #drainTimer: NodeJS.Timeout | undefined;

  /**
   * The consumer has nothing more to send: the drain completes, rhea advancing the
   * delivery-count over the credit left [AMQP 2.6.7]. Not while a delivery of this link is
   * still in rhea's queue: rhea takes a delivery's credit only once its last frame is
   * written, so a multi-frame delivery half-sent against the peer's session window (and those
   * behind it) lost its credit to the drain and was never finished, its message held by the
   * link (audit, session 14). Nor, for a short while, when the credit could not be used only
   * because transfers of other links were on their way: the messages are there, the drain
   * waits for them rather than reporting none.
   */
  /** The peer asked to drain: what credit() says from now on tells whether messages wait. */
  drainRequested(): void { this.#inTransit = false; this.#drainPending = true; }
  /** A drain asked for and not answered yet: answered once, by the consumer or by credit(). */
  #drainPending = false;

  drained(): void {
    if (this.#closed || !this.#drainPending) return;
    const own = this.#ownUnwritten();
    const now = Date.now();
    if (own > 0 || this.#inTransit) {
      if (!this.#drainWaitSince) this.#drainWaitSince = now;
      if (own > 0 || now - this.#drainWaitSince < DRAIN_WAIT_FOR_OTHERS_MS) {
        if (!this.#drainTimer) {
          this.#drainTimer = setTimeout(() => {
            this.#drainTimer = undefined;
            if (this.#closed) return;
            this.onUnblocked?.(); // send what can go now, then judge the drain again
            this.drained();
          }, Math.min(100, Math.max(1, (now - this.#drainWaitSince) >> 2)));
        }
        return;
      }
    }
    this.#drainWaitSince = 0;
    this.#drainPending = false;
    this.#sender.set_drained(true);
    // set_drained only marks the flow; ask the connection to write it now.
    this.#sender.connection?._register?.();
  }

  /** This link's deliveries handed to rhea and not fully written (each still holds its credit). */
  #ownUnwritten(): number {
    const out = this.#sender.session?.outgoing;
    if (!out) return 0;
    let n = 0;
    for (let id = out.next_pending_delivery; id < out.next_delivery_id; id++) if (out.deliveries.by_id(id)?.link === this.#sender) n++;
    return n;
  }

  close(error?: TidemarkError): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#retry) { clearTimeout(this.#retry); this.#retry = undefined; }
    if (this.#drainTimer) { clearTimeout(this.#drainTimer); this.#drainTimer = undefined; }
    this.#closeWhenWritten(error, Date.now());
  }

  /** A detach must follow every transfer of the link, so wait until rhea has written them (bounded). */
  #closeWhenWritten(error: TidemarkError | undefined, since: number): void {
    if (this.#unwritten() > 0 && this.#sender.is_open?.() && Date.now() - since < 10_000) {
      setTimeout(() => this.#closeWhenWritten(error, since), 5).unref?.();
      return;
    }
    try {
      if (error) this.#sender.close({ condition: error.condition, description: error.message, info: amqpInfo(error.info) });
      else this.#sender.close();
    } catch { /* connection already gone */ }
  }

  get closed(): boolean { return this.#closed; }
}

const OUTGOING = Symbol('tidemark.outgoing');

/**
 * An unsettled delivery sent by #sendDirect: the fields rhea's Outgoing.send gives its
 * deliveries (the data is not kept: it was written, and only Outgoing.process, which this
 * delivery never enters, reads it), with `update` on the prototype instead of a closure.
 */
class OutgoingDelivery {
  readonly data: Buffer[] = [];
  readonly format = 0;
  readonly next_to_send = 0;
  readonly sent = true;
  settled = false;
  state: unknown = undefined;
  remote_settled = false;
  remote_state: unknown = undefined;
  [OUTGOING]: { update(d: unknown, settled: unknown, state: unknown): void };
  [key: symbol]: unknown;

  constructor(outgoing: { update(d: unknown, settled: unknown, state: unknown): void }, readonly id: number, readonly tag: Buffer, readonly link: unknown) {
    this[OUTGOING] = outgoing;
  }

  update(settled: unknown, state?: unknown): void { this[OUTGOING].update(this, settled, state); }
}

/** Routes a receiver's disposition on one of our deliveries to the core [AMQP 3.4]. */
export function deliverOutcome(delivery: any, type: string): void {
  if (type === 'settled' || delivery?.remote_settled) {
    const sink: RheaSink | undefined = delivery?.[SINK];
    if (sink) { delete delivery[SINK]; sink.settledOne(); }
  } else if (delivery && !delivery.settled) {
    // An outcome the receiver has not settled: its rcv-settle-mode is `second` [AMQP 2.8.3],
    // it settles once we have, and takes our settlement as its outcome being final. So we
    // settle once what the outcome did (an accepted message's removal) is on disk: settled
    // before, a kill -9 brought back messages the receiver had been told were gone (audit,
    // session 18). Settled at all, so it counts against no limit (a link in that mode stopped
    // at maxUnsettledPerLink, the deliveries never settled on either side).
    const sink: RheaSink | undefined = delivery[SINK];
    if (sink) delete delivery[SINK];
    applyOutcome(delivery, type); // the core queues what the outcome changes
    const settle = () => {
      // (with the receiver's outcome as the state: rhea warns of a settlement without one)
      if (!delivery.settled && delivery.link?.is_open?.() !== false) delivery.update(true, delivery.remote_state?.described?.());
      sink?.settledOne();
    };
    if (sink) sink.whenStored(settle); else settle();
    return;
  }
  applyOutcome(delivery, type);
}

/** Hands the receiver's outcome of one of our deliveries to the core (once). */
function applyOutcome(delivery: any, type: string): void {
  const cb: ((o: Outcome) => void) | undefined = delivery?.[OUTCOME];
  if (!cb) return;
  delete delivery[OUTCOME];
  const st = delivery.remote_state ?? {};
  switch (type) {
    case 'accepted': cb({ type: 'accepted' }); break;
    case 'released': cb({ type: 'released' }); break;
    case 'rejected': cb({ type: 'rejected', condition: st.error?.condition, description: st.error?.description }); break;
    case 'modified': cb({ type: 'modified', deliveryFailed: !!st.delivery_failed, undeliverableHere: !!st.undeliverable_here }); break;
    default:
      // settled with no outcome: treated as accepted, as qpidd does
      cb({ type: 'accepted' });
  }
}
