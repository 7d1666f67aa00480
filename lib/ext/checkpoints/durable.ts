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
import type { TidemarkError } from '../../core/errors.js';

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
}

export function subscriptionKey(containerId: string, linkName: string): Buffer {
  return Buffer.concat([Buffer.from([SUBS]), Buffer.from(containerId, 'utf8'), Buffer.from([0]), Buffer.from(linkName, 'utf8')]);
}

export class DurableSubscriptions {
  readonly #subs = new Map<string, Subscription>();
  #store?: Store;
  #committer?: Committer;

  async load(store: Store, committer: Committer): Promise<void> {
    this.#store = store; this.#committer = committer;
    const p = Buffer.from([SUBS]);
    for (const [k, v] of await store.all({ gte: p, lt: prefixEnd(p) })) this.#subs.set(k.toString('latin1'), JSON.parse(v.toString('utf8')));
  }

  get(key: Buffer): Subscription | undefined { return this.#subs.get(key.toString('latin1')); }

  list(): Array<{ container: string; link: string } & Subscription> {
    return [...this.#subs.entries()].map(([k, s]) => {
      const b = Buffer.from(k, 'latin1');
      const z = b.indexOf(0, 1);
      return { container: b.toString('utf8', 1, z), link: b.toString('utf8', z + 1), ...s };
    });
  }

  save(key: Buffer, sub: Subscription): void {
    this.#subs.set(key.toString('latin1'), sub);
    this.#committer?.addQuiet([{ type: 'put', key, value: Buffer.from(JSON.stringify(sub)) }]);
  }

  delete(key: Buffer): boolean {
    const had = this.#subs.delete(key.toString('latin1'));
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
 */
export class DurableSink implements DeliverySink {
  readonly inner: DeliverySink;
  readonly #subs: DurableSubscriptions;
  readonly #key: Buffer;
  readonly #sub: Subscription;
  #outstanding: Array<{ position: number; done: boolean; released?: boolean }> = [];
  /** A released delivery holds the position for the rest of this link. */
  #held = false;

  constructor(inner: DeliverySink, subs: DurableSubscriptions, key: Buffer, sub: Subscription) {
    this.inner = inner; this.#subs = subs; this.#key = key; this.#sub = sub;
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
    this.#outstanding.push({ position, done: true });
    this.#advance();
  }

  #advance(): void {
    let moved = false;
    while (this.#outstanding.length && this.#outstanding[0].done) {
      const it = this.#outstanding.shift()!;
      if (it.position >= 0 && (this.#sub.position === null || it.position > this.#sub.position)) { this.#sub.position = it.position; moved = true; }
    }
    if (this.#outstanding[0]?.released) { this.#held = true; this.#outstanding = []; }
    // Only while it is still the subscription: an accept arriving after a detach with
    // closed=true (or SUBSCRIPTION-DELETE) wrote the deleted subscription back, for good.
    if (moved && this.#subs.get(this.#key) === this.#sub) this.#subs.save(this.#key, this.#sub);
  }
}
