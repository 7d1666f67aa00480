/** A DeliverySink over a rhea sender: what the core sees of an outgoing link. */
import type { DeliverySink, Outcome, SendOptions } from '../queue/delivery.js';
import { TidemarkError } from '../errors.js';

const OUTCOME = Symbol('tidemark.outcome');

export class RheaSink implements DeliverySink {
  readonly id: string;
  readonly presettled: boolean;
  readonly #sender: any;
  #closed = false;

  constructor(sender: any, id: string) {
    this.#sender = sender;
    this.id = id;
    this.presettled = sender.remote?.attach?.snd_settle_mode === 1;
  }

  /** Link credit is there but the session's outgoing window is full (unsettled deliveries). */
  blocked = false;

  credit(): number {
    if (this.#closed || !this.#sender.is_open?.()) return 0;
    if (this.#sender.sendable()) { this.blocked = false; return this.#sender.credit; }
    // rhea raises no event when settlements free the window again: the server re-pumps
    // blocked links on their next settlement (see server.ts 'settled').
    if (this.#sender.credit > 0) this.blocked = true;
    return 0;
  }

  send(bytes: Buffer, onOutcome?: (o: Outcome) => void, opts?: SendOptions): void {
    if (this.#closed) return;
    const d = this.#sender.send(bytes, undefined, 0);
    if (opts?.settled || this.presettled) { d.settled = true; return; }
    if (onOutcome) d[OUTCOME] = onOutcome;
  }

  drained(): void {
    if (this.#closed) return;
    this.#sender.set_drained(true);
    // set_drained only marks the flow; ask the connection to write it now.
    this.#sender.connection?._register?.();
  }

  close(error?: TidemarkError): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      if (error) this.#sender.close({ condition: error.condition, description: error.message, info: error.info });
      else this.#sender.close();
    } catch { /* connection already gone */ }
  }

  get closed(): boolean { return this.#closed; }
}

/** Routes a receiver's disposition on one of our deliveries to the core [AMQP 3.4]. */
export function deliverOutcome(delivery: any, type: string): void {
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
