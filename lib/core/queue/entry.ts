/** One message held by a list-structured queue (standard, browse-only, ring, LVQ). */
import { indexSections, readHeader, type HeaderFields, type SectionIndex } from '../../codec/message-bytes.js';

export class Entry {
  /** Sequence number: position in the queue's total order. */
  readonly scn: number;
  /** Original AMQP bytes as received. */
  readonly bytes: Buffer;
  /** Broker receive time, ms. */
  readonly ts: number;
  /** Absolute expiry, ms; undefined = never. */
  expiresAt: number | undefined;
  /** Last-value key (LVQ), when the queue has one. */
  lvqKey: string | undefined;
  /** Delivery attempts that failed (modified delivery-failed) [AMQP 3.4.5]. */
  deliveryCount = 0;
  /** The consumer holding it acquired, if any. */
  acquiredBy: object | null = null;
  /** A link has acquired it once: a header first-acquirer=true no longer holds [AMQP 3.2.1]. */
  acquiredBefore = false;
  /** Gone from the queue (consumed, expired, dropped, replaced, purged). */
  removed = false;
  /** Dropped by a prepared event whose batch is not yet durable (it leaves when it is). */
  dropping = false;
  /** Durable in storage: only committed entries are delivered (dispatch after commit). */
  committed = false;
  /** Consumers that answered modified(undeliverable-here). */
  excluded: Set<object> | undefined;
  /** Absolute index in the MessageList. */
  pos = -1;
  #idx: SectionIndex | undefined;
  #header: HeaderFields | undefined;

  constructor(scn: number, bytes: Buffer, ts: number) {
    this.scn = scn;
    this.bytes = bytes;
    this.ts = ts;
  }

  get size(): number { return this.bytes.length; }
  get sections(): SectionIndex { return (this.#idx ??= indexSections(this.bytes)); }
  get header(): HeaderFields { return (this.#header ??= readHeader(this.bytes, this.sections)); }
}
