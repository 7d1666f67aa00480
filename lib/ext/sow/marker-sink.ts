/**
 * A DeliverySink that sends queued marker messages (group_begin, group_end, completed) ahead
 * of whatever the consumer sends next, each using one credit as wire.md 4.2 says.
 */
import type { DeliverySink, Outcome, SendOptions } from '../../core/queue/delivery.js';
import type { TidemarkError } from '../../core/errors.js';
import { joinSplit, type SplitMessage } from '../../codec/message-bytes.js';
import { Fifo } from '../../core/fifo.js';

export class MarkerSink implements DeliverySink {
  readonly inner: DeliverySink;
  readonly #pending = new Fifo<{ bytes: Buffer; position?: number }>();
  #closeAfter: { error?: TidemarkError } | undefined;
  /**
   * DeliverySink.fellOff: the link's own rule when given (a checkpoint or replay reader), else
   * the inner sink's (a durable subscription's); absent with neither (a plain subscriber skips).
   */
  readonly fellOff?: (position: number, oldest: number) => TidemarkError | undefined;
  constructor(inner: DeliverySink, fellOff?: (position: number, oldest: number) => TidemarkError | undefined) {
    this.inner = inner;
    if (fellOff) this.fellOff = fellOff;
    else if (inner.fellOff) this.fellOff = (position, oldest) => inner.fellOff!(position, oldest);
  }
  get id() { return this.inner.id; }
  get presettled() { return this.inner.presettled; }

  /** Queues a pre-settled marker. */
  marker(bytes: Buffer, position?: number): void { this.#pending.push({ bytes, position }); this.flush(); }
  /** Closes the link once every queued marker is sent. */
  closeWhenFlushed(error?: TidemarkError): void { this.#closeAfter = { error }; this.flush(); }

  flush(): void {
    while (this.#pending.length && this.inner.credit() > 0) { const m = this.#pending.shift()!; this.inner.send(m.bytes, undefined, { settled: true, position: m.position }); }
    if (!this.#pending.length && this.#passed >= 0) { const p = this.#passed; this.#passed = -1; this.inner.passed?.(p); }
    if (!this.#pending.length && this.#closeAfter) { const c = this.#closeAfter; this.#closeAfter = undefined; this.inner.close(c.error); }
  }
  /** Passed up to here; handed on once the markers queued before it are sent (a group_end still waiting holds a durable position). */
  #passed = -1;
  passed(position: number): void { if (position > this.#passed) this.#passed = position; this.flush(); }
  credit(): number { this.flush(); return this.#pending.length || this.#closeAfter ? 0 : this.inner.credit(); }
  send(bytes: Buffer, onOutcome?: (o: Outcome) => void, opts?: SendOptions): void { this.inner.send(bytes, onOutcome, opts); }
  sendSplit(m: SplitMessage, onOutcome?: (o: Outcome) => void, opts?: SendOptions): void {
    if (this.inner.sendSplit) this.inner.sendSplit(m, onOutcome, opts);
    else this.inner.send(joinSplit(m), onOutcome, opts);
  }
  drained(): void { if (!this.#pending.length) this.inner.drained(); }
  close(error?: TidemarkError): void { this.inner.close(error); }
}
