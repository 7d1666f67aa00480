/**
 * Transactional publishers for the crash test (tools/crash-test.ts): declare, 2-4
 * transactional transfers to a durable plain queue, discharge(fail = false), repeat. A
 * transaction's messages count as accepted only when the discharge was answered `accepted`.
 * rhea has no transaction API: the coordinator link and the transactional-state on the
 * transfers are built by hand, as in spec/integration/transactions.spec.ts.
 */
import { applyRheaPatches } from '../../lib/core/protocol/rhea-patches.js';
import { openCoordinator, markTransactionalTransfers } from '../common/transactions.js';
import { r, openConnection, attached } from './common.js';

applyRheaPatches(); // decodes `declared` and `transactional-state` on the client side too

const T = r.types;

/** A transaction as the publisher left it when the broker died (or after it committed). */
export interface TxRec {
  pub: number;
  txn: number;
  /** `${pub}:${seq}` of its messages. */
  keys: string[];
  /** open: declared, no discharge sent; discharging: discharge sent, no answer; accepted/rejected: the answer. */
  status: 'open' | 'discharging' | 'accepted' | 'rejected';
  detail?: string;
}

/** An amqp-value section holding a described declare (0x31) or discharge (0x32) list. */
export function controlBody(code: number, fields: unknown[]): Buffer {
  const w = new T.Writer();
  w.write(T.described_nc(T.wrap_ulong(code), T.wrap_list(fields)));
  return Buffer.concat([Buffer.from([0x00, 0x53, 0x77]), w.toBuffer()]);
}

/** Resolves with the settled delivery, or undefined if the connection dies first. */
export function settled(link: any, conn: any, d: any): Promise<any> {
  return new Promise((resolve) => {
    if (d.remote_settled) { resolve(d); return; }
    const on = (ctx: any) => { if (ctx.delivery === d) { cleanup(); resolve(d); } };
    const gone = () => { cleanup(); resolve(undefined); };
    const cleanup = () => { link.removeListener('settled', on); conn.removeListener('disconnected', gone); };
    link.on('settled', on);
    conn.once('disconnected', gone);
  });
}

export function sendable(sender: any, conn: any): Promise<boolean> {
  return new Promise((resolve) => {
    if (sender.sendable()) { resolve(true); return; }
    const ok = () => { cleanup(); resolve(true); };
    const gone = () => { cleanup(); resolve(false); };
    const cleanup = () => { sender.removeListener('sendable', ok); conn.removeListener('disconnected', gone); };
    sender.once('sendable', ok);
    conn.once('disconnected', gone);
  });
}

/**
 * One transactional publisher: transactions of 2-4 messages (application properties pub, seq,
 * round, txn) to `queue` until `n` messages were sent or the broker dies. Returns the next seq.
 */
export async function txPublish(port: number, pub: number, queue: string, firstSeq: number, n: number, round: number, rand: () => number, sent: Set<string>, accepted: Set<string>, txns: TxRec[], stop: { stopped: boolean }, counter: { accepted: number }): Promise<number> {
  let conn: any;
  try { conn = await openConnection(port); } catch { return firstSeq; }
  let next = firstSeq;
  const end = firstSeq + n;
  try {
    const coordinator = openCoordinator(conn, `txn-ctrl-${pub}`);
    await attached(coordinator, conn, 'sendable');
    const sender = conn.open_sender({ target: { address: queue, durable: 2 } });
    await attached(sender, conn, 'sendable');
    const txnOf = new Map<number, Buffer>();
    markTransactionalTransfers(sender.session, txnOf);
    let txn = 0;
    while (!stop.stopped && next < end && conn.is_open()) {
      if (!(await sendable(coordinator, conn))) break;
      const dd = await settled(coordinator, conn, coordinator.send(controlBody(0x31, [null]), undefined, 0));
      const id = dd?.remote_state?.txn_id;
      if (!Buffer.isBuffer(id)) break; // the broker died (or refused: then nothing was sent in it)
      const rec: TxRec = { pub, txn: txn++, keys: [], status: 'open' };
      txns.push(rec);
      const k = Math.min(2 + Math.floor(rand() * 3), end - next);
      let ok = true;
      for (let i = 0; i < k; i++) {
        if (!(await sendable(sender, conn))) { ok = false; break; }
        const seq = next++;
        const key = `${pub}:${seq}`;
        sent.add(key);
        rec.keys.push(key);
        const d = sender.send({ durable: true, application_properties: { pub, seq, round, txn: rec.txn }, body: `p${pub}-s${seq}-t${rec.txn}` });
        txnOf.set(d.id, id);
      }
      if (!ok || stop.stopped || !(await sendable(coordinator, conn))) break;
      rec.status = 'discharging';
      const dis = await settled(coordinator, conn, coordinator.send(controlBody(0x32, [T.wrap_binary(id), false]), undefined, 0));
      if (!dis) break;
      const state = dis.remote_state?.constructor?.composite_type;
      if (state === 'accepted') {
        rec.status = 'accepted';
        for (const key of rec.keys) accepted.add(key);
        counter.accepted += rec.keys.length;
      } else {
        rec.status = 'rejected';
        rec.detail = `${state}: ${dis.remote_state?.error?.condition ?? ''} ${dis.remote_state?.error?.description ?? ''}`;
      }
    }
  } catch { /* the broker died during an attach */ }
  try { conn.close(); } catch { /* gone */ }
  return next;
}
