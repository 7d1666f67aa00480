/**
 * The contract between the protocol layer and the core for outgoing messages. The core never
 * sees a rhea object: it gets a DeliverySink (offer / credit / close) and returns a Consumer
 * the protocol layer pokes when credit arrives, a drain is requested or the link goes away.
 */
import type { TidemarkError } from '../errors.js';
import type { SplitMessage } from '../../codec/message-bytes.js';

/** What a receiving client said about a delivery [AMQP 3.4]. */
export type Outcome =
  | { type: 'accepted' }
  | { type: 'released' }
  | { type: 'rejected'; condition?: string; description?: string }
  | { type: 'modified'; deliveryFailed: boolean; undeliverableHere: boolean };

export interface SendOptions {
  /** Send pre-settled. */
  settled?: boolean;
  /**
   * The event position this delivery stands for (its SCN; -1 for a snapshot record that moves
   * no position), so durable subscriptions can advance when it is accepted.
   */
  position?: number;
}

export interface DeliverySink {
  /** Link identity for logs: `container/link-name`. */
  readonly id: string;
  /** True when the receiver asked for pre-settled deliveries (snd-settle-mode settled). */
  readonly presettled: boolean;
  /** Credit granted by the receiver and not yet used. */
  credit(): number;
  /** Sends one encoded message. `onOutcome` runs once when the receiver settles (never for pre-settled sends). */
  send(bytes: Buffer, onOutcome?: (o: Outcome) => void, opts?: SendOptions): void;
  /**
   * As send, for a message in two parts (a rewritten head, the stored bytes' rest), taken
   * before returning: the sink may copy the parts straight into its frame buffer. Optional;
   * without it, callers join the parts (joinSplit) and send().
   */
  sendSplit?(m: SplitMessage, onOutcome?: (o: Outcome) => void, opts?: SendOptions): void;
  /** Completes a drain: nothing more is available now. */
  drained(): void;
  /**
   * The link's reader has passed every event up to `position` and has nothing more to send
   * for them (its filter skipped the rest). Optional: a durable subscription's sink moves its
   * position over them once what it sent before is settled (checkpoints/durable.ts).
   */
  passed?(position: number): void;
  /**
   * The queue's log bound dropped a message after `position` (the last SCN the link's reader
   * passed) before the reader read it (ListStructure.logFloor); `oldest` is the oldest SCN the
   * queue still holds. Returns the error to detach the link with: a reader that must never
   * skip (checkpoint, replay, durable subscription) has fallen off, after everything before
   * the gap was sent; undefined when nothing dropped was this link's (its filter skips it)
   * and the reader goes on. Optional: without it the reader skips what is gone, as a ring
   * browser does.
   */
  fellOff?(position: number, oldest: number): TidemarkError | undefined;
  /** Detaches the link (closed), with an error or cleanly. */
  close(error?: TidemarkError): void;
}

export interface Consumer {
  /** Credit arrived (or came back): deliver what is available. */
  onCredit(): void;
  /** The receiver asked to drain: deliver what is available, then call sink.drained(). */
  onDrain(): void;
  /**
   * The link or its connection is gone: release every unsettled delivery. `linkClosed` is
   * true when the peer detached with closed=true (ends a durable subscription).
   */
  close(opts?: { linkClosed: boolean }): void;
}
