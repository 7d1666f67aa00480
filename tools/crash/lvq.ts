/**
 * LVQ part of the crash test (tools/crash-test.ts, role `lvq`): publishers sending durable
 * messages with a key (application property `k`, a few keys of their own) to two last-value
 * queues (`qpid.last_value_queue_key=k`), one with `qpid.policy_type=ring` and one with the
 * reject policy, both `qpid.max_count=M` (M below the number of keys, so both policies act).
 * Nobody consumes: after the restart each queue is browsed (distribution-mode copy: the
 * messages stay, so the next round's publishes must replace entries the LVQ index recovered)
 * and checked against this round's ops and what the previous round's browse showed:
 *   - lvq-one-per-key: at most one message per key;
 *   - lvq-limit: at most M messages;
 *   - lvq-newest: a key's message is its publisher's last accepted one for the key, or a later
 *     one (sent, unconfirmed), never an earlier one, never one not sent; a key with no
 *     accepted op this round may still hold what the previous browse showed;
 *   - lvq-accepted-kept: a key with an accepted message this round (or held before) is present (a later one,
 *     unconfirmed, replaces it or not; a refused one leaves it)
 *     (reject queue: always, the reject policy drops nothing; ring queue: unless the ring
 *     dropped something, which it does only when the queue is full: fewer than M messages
 *     left means nothing was dropped);
 *   - lvq-order: per publisher, increasing seq in queue order (a replacement goes to the tail).
 */
import { openConnection, closeConnection, attached, finishWhenSettled } from './common.js';

export interface LvqQueue { name: string; policy: 'ring' | 'reject'; max: number }
export interface LvqOp { pub: number; seq: number; key: string; outcome?: string }
export interface LvqSeen { pub: number; seq: number; key: string }
export interface LvqRound { queues: LvqQueue[]; ops: Map<number, LvqOp[]>; queueOf: Map<number, string>; drained: Map<string, LvqSeen[]>; /** What the previous round's browse showed, per queue and key (updated by the caller after the checks). */ prev: Map<string, Map<string, LvqSeen>> }

/** Browses `queue` (distribution-mode copy) until idle. */
export async function browseLvq(port: number, queue: string): Promise<LvqSeen[]> {
  const conn = await openConnection(port);
  const out: LvqSeen[] = [];
  try {
    await new Promise<void>((resolve) => {
      const rcv = conn.open_receiver({ source: { address: queue, distribution_mode: 'copy' }, credit_window: 500 });
      let timer = setTimeout(resolve, 1500);
      rcv.on('message', (ctx: any) => {
        const ap = ctx.message.application_properties ?? {};
        out.push({ pub: Number(ap.pub), seq: Number(ap.seq), key: String(ap.k) });
        clearTimeout(timer);
        timer = setTimeout(resolve, 500);
      });
    });
  } finally { await closeConnection(conn); }
  return out;
}
export interface LvqViolation { check: string; kind: string; detail: string }

export function lvqQueues(max: number): LvqQueue[] {
  return [{ name: 'crash.lvq.ring', policy: 'ring', max }, { name: 'crash.lvq.reject', policy: 'reject', max }];
}

const target = (q: LvqQueue) => ({
  address: q.name, durable: 2, capabilities: ['create-on-demand'],
  dynamic_node_properties: { 'qpid.last_value_queue_key': 'k', 'qpid.max_count': q.max, ...(q.policy === 'ring' ? { 'qpid.policy_type': 'ring' } : {}) },
});

export async function ensureLvqQueues(port: number, queues: LvqQueue[]): Promise<void> {
  const conn = await openConnection(port);
  try {
    for (const q of queues) { const s = conn.open_sender({ target: target(q) }); await attached(s, conn, 'sendable'); s.close(); }
  } finally { await closeConnection(conn); }
}

/** One LVQ publisher: up to `n` messages on random keys of its own; records each and its outcome. Returns the next seq. */
export async function lvqPublish(port: number, pub: number, q: LvqQueue, keys: number, firstSeq: number, n: number, round: number, rand: () => number, ops: LvqOp[], stop: { stopped: boolean }, counter: { accepted: number }): Promise<number> {
  let conn: any;
  try { conn = await openConnection(port); } catch { return firstSeq; }
  let next = firstSeq;
  const end = firstSeq + n;
  await new Promise<void>((resolve) => {
    let finished = false;
    const finish = () => { if (finished) return; finished = true; try { conn.close(); } catch { /* gone */ } resolve(); };
    const sender = conn.open_sender({ target: target(q), autosettle: true });
    const pump = () => {
      while (!stop.stopped && next < end && sender.sendable()) {
        const seq = next++;
        const key = `p${pub}.k${Math.floor(rand() * keys)}`;
        const op: LvqOp = { pub, seq, key };
        ops.push(op);
        const d = sender.send({ durable: true, application_properties: { pub, seq, round, k: key }, body: `p${pub}-s${seq}` });
        d.__op = op;
      }
    };
    sender.on('accepted', (ctx: any) => { ctx.delivery.__op.outcome = 'accepted'; counter.accepted++; });
    for (const o of ['rejected', 'released', 'modified']) sender.on(o, (ctx: any) => { ctx.delivery.__op.outcome = o; });
    sender.on('sendable', pump);
    conn.on('disconnected', finish);
    conn.on('connection_close', finish);
    sender.on('sender_error', finish);
    finishWhenSettled(conn, sender, () => next >= end || stop.stopped, () => finished, finish);
  });
  return next;
}

export const LVQ_CHECKS: Array<{ name: string; run(d: LvqRound): LvqViolation[] }> = [
  {
    name: 'lvq-queue',
    run(d) {
      const out: LvqViolation[] = [];
      for (const q of d.queues) {
        const msgs = d.drained.get(q.name);
        if (!msgs) continue;
        if (msgs.length > q.max) out.push({ check: 'lvq-limit', kind: 'mismatched', detail: `${q.name}: ${msgs.length} messages after the restart, qpid.max_count=${q.max}` });
        const byKey = new Map<string, LvqSeen[]>();
        for (const m of msgs) { let l = byKey.get(m.key); if (!l) byKey.set(m.key, l = []); l.push(m); }
        for (const [k, l] of byKey) if (l.length > 1) out.push({ check: 'lvq-one-per-key', kind: 'duplicated', detail: `${q.name}: key ${k} has ${l.length} messages (seq ${l.map((m) => `${m.pub}:${m.seq}`).join(' ')})` });
        const last = new Map<number, number>();
        for (const m of msgs) {
          const p = last.get(m.pub);
          if (p !== undefined && m.seq <= p) out.push({ check: 'lvq-order', kind: 'order', detail: `${q.name}: publisher ${m.pub} seq ${m.seq} after ${p}` });
          last.set(m.pub, m.seq);
        }
        // Per key: this round's ops (every publisher of this queue).
        const opsByKey = new Map<string, LvqOp[]>();
        for (const [pub, ops] of d.ops) if (d.queueOf.get(pub) === q.name) for (const o of ops) { let l = opsByKey.get(o.key); if (!l) opsByKey.set(o.key, l = []); l.push(o); }
        const dropped = q.policy === 'ring' && msgs.length >= q.max;
        const prev = d.prev.get(q.name) ?? new Map<string, LvqSeen>();
        for (const k of new Set([...opsByKey.keys(), ...prev.keys()])) {
          const ops = opsByKey.get(k) ?? [];
          const before = prev.get(k);
          let la = -1;
          ops.forEach((o, i) => { if (o.outcome === 'accepted') la = i; });
          const seen = byKey.get(k)?.[0];
          const was = before ? `${before.pub}:${before.seq}` : 'none';
          if (seen) {
            const i = ops.findIndex((o) => o.seq === seen.seq && o.pub === seen.pub);
            if (i < 0) {
              if (!before || before.pub !== seen.pub || before.seq !== seen.seq) out.push({ check: 'lvq-newest', kind: 'phantom', detail: `${q.name}: key ${k} holds ${seen.pub}:${seen.seq}, not sent on it this round nor held before (${was})` });
              else if (la >= 0) out.push({ check: 'lvq-newest', kind: 'lost', detail: `${q.name}: key ${k} still holds ${seen.pub}:${seen.seq} from an earlier round, but ${ops[la].pub}:${ops[la].seq} was accepted this round` });
            }
            else if (i < la) out.push({ check: 'lvq-newest', kind: 'lost', detail: `${q.name}: key ${k} holds ${seen.pub}:${seen.seq}, but ${ops[la].pub}:${ops[la].seq} was accepted after it` });
            else if (ops[i].outcome && ops[i].outcome !== 'accepted') out.push({ check: 'lvq-newest', kind: 'phantom', detail: `${q.name}: key ${k} holds ${seen.pub}:${seen.seq}, which was ${ops[i].outcome}` });
          } else if ((la >= 0 || before) && !dropped) {
            out.push({ check: 'lvq-accepted-kept', kind: 'lost', detail: `${q.name} (${q.policy}, ${msgs.length} of ${q.max}): key ${k} is absent; ${la >= 0 ? `its message ${ops[la].pub}:${ops[la].seq} was accepted this round` : `it held ${was} before this round`}` });
          }
        }
      }
      return out;
    },
  },
];
