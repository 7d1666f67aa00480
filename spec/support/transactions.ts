/** Pieces of an AMQP transaction controller the transaction specs share. */
import { r } from './client.js';
import { TransactionalState } from '../../lib/core/protocol/rhea-patches.js';

const T = r.types;
const M = r.message;

/** An amqp-value section holding a described declare (0x31) or discharge (0x32) list. */
export function controlBody(code: number, fields: unknown[]): Buffer {
  const w = new T.Writer();
  w.write(T.described_nc(T.wrap_ulong(code), T.wrap_list(fields)));
  return Buffer.concat([Buffer.from([0x00, 0x53, 0x77]), w.toBuffer()]);
}

export interface TxOutcome { state: string; txn?: string; inner?: string; condition?: string; description?: string }

/** What the broker said about a delivery: plain outcome or transactional-state{txn, outcome}. */
export function outcomeOf(d: any): TxOutcome {
  const s = d.remote_state;
  if (s instanceof TransactionalState) {
    const inner = s.outcome ? M.unwrap_outcome(s.outcome) : undefined;
    return { state: 'transactional', txn: (s.txn_id as Buffer).toString('hex'), inner: inner?.constructor?.composite_type, condition: inner?.error?.condition, description: inner?.error?.description };
  }
  const type = s?.constructor?.composite_type ?? 'none';
  return { state: type, condition: s?.error?.condition, description: s?.error?.description };
}
