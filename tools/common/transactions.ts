/**
 * The client side of AMQP local transactions [AMQP 1.0 part 4] for our tools and tests. rhea
 * has no API for a coordinator link or for the transactional state a transfer carries, so
 * both are put on rhea's own frames here (rhea-patches.ts teaches rhea the types).
 */
import rhea from 'rhea';
import { Coordinator, TransactionalState } from '../../lib/core/protocol/rhea-patches.js';

const T = (rhea as any).types;

/** A sender attached to the transaction coordinator [4.5.1]. */
export function openCoordinator(connection: any, name: string): any {
  const s = connection.open_sender({ name });
  // open_sender writes the attach on the next tick: replace rhea's target with a coordinator.
  s.local.attach.target = Coordinator.create({ capabilities: ['amqp:local-transactions'] }).described();
  return s;
}

/**
 * From now on, a transfer on `session` whose delivery id is in `txnOf` leaves with
 * transactional-state{txn-id} [4.5.5]. Call once per session; `txnOf` is read at each transfer.
 */
export function markTransactionalTransfers(session: any, txnOf: Map<number, Buffer>): void {
  const output = session.output;
  session.output = (frame: any, payload?: unknown) => {
    const txn = frame?.constructor?.descriptor?.numeric === 0x14 ? txnOf.get(frame.delivery_id) : undefined;
    if (txn) {
      // (rhea's composite: a hand-encoded transfer becomes one here, and rhea writes it)
      for (let i = 0; i < 7; i++) if (frame.value[i] === undefined) frame.value[i] = T.Null();
      frame.value[7] = TransactionalState.create({ txn_id: txn }).described();
    }
    return output.call(session, frame, payload);
  };
}
