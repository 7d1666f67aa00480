/**
 * Durable subscriptions (wire.md 6): a receiver with source durable = 2 and expiry-policy
 * never, on a browse-only or SOW queue or with a tidemark: command, has its position kept by
 * the broker under (container-id, link name). The position advances as deliveries are
 * accepted, in order, and is stored durably; re-attaching resumes after it; a detach with
 * closed=true ends the subscription.
 *   subs [0x03][container-id][0x00][link name] -> JSON { queue, position (SCN | null), created }
 */
import type { DeliverySink, Outcome, SendOptions } from '../../core/queue/delivery.js';
import type { Store } from '../../core/storage/store.js';
import type { Committer } from '../../core/storage/committer.js';
import { registerTable, prefixEnd } from '../../core/storage/keyspace.js';
import { TidemarkError, Conditions } from '../../core/errors.js';

export const SUBS = registerTable('subs', 0x03);

export interface Subscription {
  /** Queue the subscription reads. */
  queue: string;
  /** Last SCN whose delivery (and every earlier one) was accepted; null = none yet. */
  position: number | null;
  /** Created at, ms. */
  created: number;
  /** The authenticated user who created it: only that user resumes it (absent in records from before owners were kept). */
  user?: string;
  /**
   * When its queue was created: a queue of that name created again (after a restart took a
   * non-durable one, or a delete) is another queue, whose SCNs start again (absent in
   * records from before it was kept).
   */
  queueCreated?: number;
  /**
   * The filters it was made with (filter symbol = value text; bookmark and checkpoint left
   * out: they only say where a new subscription starts). A re-attach must ask for the same
   * (absent in records from before they were kept: the next attach's are taken).
   */
  filters?: string;
  /**
   * The values of its message-selecting filters (selector, bindings, content filter), by
   * symbol, so that after a restart the broker can tell, before the link is back, which
   * events it would skip (absent: not known, and nothing is skipped for it).
   */
  selectors?: Record<string, string>;
}

/** Positions moved without a delivery are written at most this often per subscription. */
const TOUCH_FLUSH_MS = 1000;

export function subscriptionKey(containerId: string, linkName: string): Buffer {
  return Buffer.concat([Buffer.from([SUBS]), Buffer.from(containerId, 'utf8'), Buffer.from([0]), Buffer.from(linkName, 'utf8')]);
}

export class DurableSubscriptions {
  readonly #subs = new Map<string, Subscription>();
  /** Subscription ids (key as latin1) by queue name. */
  readonly #byQueue = new Map<string, Set<string>>();
  /** Ids whose position moved in memory and is not written yet (touch). */
  readonly #dirty = new Set<string>();
  #flushTimer?: NodeJS.Timeout;
  #store?: Store;
  #committer?: Committer;

  async load(store: Store, committer: Committer): Promise<void> {
    this.#store = store; this.#committer = committer;
    const p = Buffer.from([SUBS]);
    for (const [k, v] of await store.all({ gte: p, lt: prefixEnd(p) })) this.#set(k.toString('latin1'), JSON.parse(v.toString('utf8')));
  }

  #set(id: string, sub: Subscription): void {
    const old = this.#subs.get(id);
    if (old && old.queue !== sub.queue) this.#byQueue.get(old.queue)?.delete(id);
    this.#subs.set(id, sub);
    let ids = this.#byQueue.get(sub.queue);
    if (!ids) this.#byQueue.set(sub.queue, ids = new Set());
    ids.add(id);
  }

  get(key: Buffer): Subscription | undefined { return this.#subs.get(key.toString('latin1')); }
  getById(id: string): Subscription | undefined { return this.#subs.get(id); }
  /** The ids of a queue's subscriptions (live view: do not delete while iterating). */
  idsOf(queue: string): ReadonlySet<string> | undefined { return this.#byQueue.get(queue); }

  list(): Array<{ container: string; link: string } & Subscription> {
    return [...this.#subs.entries()].map(([k, s]) => {
      const b = Buffer.from(k, 'latin1');
      const z = b.indexOf(0, 1);
      return { container: b.toString('utf8', 1, z), link: b.toString('utf8', z + 1), ...s };
    });
  }

  save(key: Buffer, sub: Subscription): void {
    const id = key.toString('latin1');
    this.#set(id, sub);
    this.#dirty.delete(id);
    this.#committer?.addQuiet([{ type: 'put', key, value: Buffer.from(JSON.stringify(sub)) }]);
  }

  /**
   * The position of `sub` moved over events it skips (no delivery): written with the next
   * save, or within TOUCH_FLUSH_MS, not once per event (a filter that matches little would
   * write a row per message). A crash may lose the last second of such moves: the position is
   * then older, never past anything not done.
   */
  touch(id: string, sub: Subscription): void {
    if (this.#subs.get(id) !== sub) return; // ended meanwhile
    this.#dirty.add(id);
    if (!this.#flushTimer) {
      this.#flushTimer = setTimeout(() => { this.#flushTimer = undefined; this.flush(); }, TOUCH_FLUSH_MS);
      this.#flushTimer.unref?.();
    }
  }

  /** Writes the touched positions (`id`: that one only). */
  flush(id?: string): void {
    for (const d of id === undefined ? [...this.#dirty] : this.#dirty.has(id) ? [id] : []) {
      const sub = this.#subs.get(d);
      if (sub) this.save(Buffer.from(d, 'latin1'), sub); else this.#dirty.delete(d);
    }
  }

  stop(): void {
    if (this.#flushTimer) { clearTimeout(this.#flushTimer); this.#flushTimer = undefined; }
    this.flush();
  }

  delete(key: Buffer): boolean {
    const id = key.toString('latin1');
    const sub = this.#subs.get(id);
    const had = this.#subs.delete(id);
    this.#dirty.delete(id);
    if (sub) { const ids = this.#byQueue.get(sub.queue); ids?.delete(id); if (ids?.size === 0) this.#byQueue.delete(sub.queue); }
    if (had) this.#committer?.addQuiet([{ type: 'del', key }]);
    return had;
  }

  /** Forgets every subscription of a deleted queue. */
  deleteForQueue(queue: string): void {
    for (const [k, s] of [...this.#subs]) if (s.queue === queue) this.delete(Buffer.from(k, 'latin1'));
  }
}

/**
 * Wraps a link's sink: deliveries are sent unsettled so their acceptance can be seen, and the
 * subscription's position moves to the SCN of the newest delivery whose predecessors were all
 * accepted (a released one, or one modified without undeliverable-here, holds it back; snapshot records move nothing; group_end moves it to
 * the snapshot SCN). A released delivery is not sent again on this link (the outcome is final),
 * so once it reaches the front the position stays there for the rest of the link, and the next
 * attach resumes from it: from then on nothing is tracked (it was one entry per delivery, kept
 * for the life of the link).
 *
 * Events the link's reader passes without a delivery (its filter skips them) move the position
 * too, once everything sent before them is settled (`passed`): the position means "everything
 * up to here is done", and one that moved only on deliveries stayed behind a run of skipped
 * events until the log dropped them, and the next attach was refused though nothing was
 * missed. Those moves are written coalesced (DurableSubscriptions.touch).
 */
export class DurableSink implements DeliverySink {
  readonly inner: DeliverySink;
  readonly #subs: DurableSubscriptions;
  readonly #key: Buffer;
  readonly #sub: Subscription;
  #outstanding: Array<{ position: number; done: boolean; released?: boolean; passed?: boolean }> = [];
  /** A released delivery holds the position for the rest of this link. */
  #held = false;
  /** The newest position this link has sent or passed. */
  #reached = -1;
  /**
   * The position may not pass this: an event this link would have delivered was dropped by the
   * log bound before the reader reached it (the reader skips what is gone, and its later
   * deliveries and passes would have moved the position over the gap).
   */
  #limit = Infinity;

  constructor(inner: DeliverySink, subs: DurableSubscriptions, key: Buffer, sub: Subscription) {
    this.inner = inner; this.#subs = subs; this.#key = key; this.#sub = sub;
    this.#reached = sub.position ?? -1; // a resumed link reads after its position
  }
  /** Deliveries whose outcome the position still waits for (statistics, tests). */
  get tracked(): number { return this.#outstanding.length; }
  get id() { return this.inner.id; }
  get presettled() { return this.inner.presettled; }
  credit(): number { return this.inner.credit(); }
  drained(): void { this.inner.drained(); }
  /** The broker detached the link with an error (the peer's answering detach does not end the subscription). */
  closedWithError = false;
  close(error?: TidemarkError): void { if (error) this.closedWithError = true; this.inner.close(error); }

  send(bytes: Buffer, onOutcome?: (o: Outcome) => void, opts?: SendOptions): void {
    if (opts?.position !== undefined && opts.position > this.#reached) this.#reached = opts.position;
    if (opts?.position === undefined || this.#held) { this.inner.send(bytes, onOutcome, opts); return; }
    const item: { position: number; done: boolean; released?: boolean } = { position: opts.position, done: false };
    this.#outstanding.push(item);
    if (opts.settled || this.inner.presettled) {
      // Markers (pre-settled) and pre-settled links count as consumed when sent.
      item.done = true;
      this.inner.send(bytes, onOutcome, opts);
      this.#advance();
      return;
    }
    this.inner.send(bytes, (o) => {
      // modified without undeliverable-here asks for redelivery as released does [AMQP 3.4.5]:
      // it holds the position too (moving past it lost the message for the subscription).
      if (o.type === 'released' || (o.type === 'modified' && !o.undeliverableHere)) item.released = true;
      else item.done = true;
      onOutcome?.(o);
      this.#advance();
    }, opts);
  }

  /** A position reached without a delivery (the snapshot end on a link without markers). */
  advanceTo(position: number): void {
    if (this.#held) return;
    if (position > this.#reached) this.#reached = position;
    this.#outstanding.push({ position, done: true });
    this.#advance();
  }

  /** The reader passed every event up to `position` (DeliverySink.passed): moved over once what was sent before is settled. */
  passed(position: number): void {
    if (this.#held || position <= this.#reached) return;
    this.#reached = position;
    // One entry for a run of passes (a reader skipping thousands behind an unsettled delivery).
    const last = this.#outstanding[this.#outstanding.length - 1];
    if (last?.passed) last.position = position;
    else this.#outstanding.push({ position, done: true, passed: true });
    this.#advance(false);
  }

  /**
   * The log bound dropped event `scn`; `matches` says whether this link would have delivered
   * it. One the reader had not reached yet is lost to the subscription: its position stays
   * before it, and the next attach is refused (decisions.md).
   */
  dropped(scn: number, matches: () => boolean): void {
    // (a new subscription whose reader has not begun starts after what is gone by then)
    if (this.#reached < 0) return;
    if (scn > this.#reached && scn - 1 < this.#limit && matches()) this.#limit = scn - 1;
  }

  /**
   * DeliverySink.fellOff: the log bound dropped events after `position` before this link's
   * reader read them. One it would have delivered (dropped() set the limit) is a gap: the link
   * is detached with scn-not-found, its position stays before that event, and the next attach
   * is refused (the subscription is kept, decisions.md). Events its filter skips are passed
   * over, as a detached subscription's are (and a new subscription's reader, which has not
   * begun, starts after what is gone by then).
   */
  fellOff(position: number, oldest: number): TidemarkError | undefined {
    if (this.#limit === Infinity) return undefined;
    const k = this.#key, z = k.indexOf(0, 1);
    const name = `${k.toString('utf8', 1, z)}/${k.toString('utf8', z + 1)}`;
    return new TidemarkError(Conditions.scnNotFound, `durable subscription ${name} is at SCN ${position}, and the log bound of ${this.#sub.queue} dropped events after it before its link read them (oldest SCN ${oldest}): the events between are gone, so the link is detached rather than skip them; end the subscription (SUBSCRIPTION-DELETE) to start a new one`, { info: { 'oldest-scn': oldest, 'requested-scn': position } });
  }

  /** `save`: write now (an accept), else with the coalesced writes (positions passed). */
  #advance(save = true): void {
    let moved = false;
    while (this.#outstanding.length && this.#outstanding[0].done) {
      const it = this.#outstanding.shift()!;
      const position = Math.min(it.position, this.#limit);
      if (position >= 0 && (this.#sub.position === null || position > this.#sub.position)) { this.#sub.position = position; moved = true; }
    }
    if (this.#outstanding[0]?.released) { this.#held = true; this.#outstanding = []; }
    // Only while it is still the subscription: an accept arriving after a detach with
    // closed=true (or SUBSCRIPTION-DELETE) wrote the deleted subscription back, for good.
    if (moved && this.#subs.get(this.#key) === this.#sub) {
      if (save) this.#subs.save(this.#key, this.#sub); else this.#subs.touch(this.#key.toString('latin1'), this.#sub);
    }
  }
}
