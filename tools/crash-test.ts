/**
 * crash-test: kill -9 the broker while publishers send, restart it on the same data, and
 * check that nothing accepted was lost, duplicated or reordered, that SOW state, log and SCNs
 * agree, and that transactions are all-or-nothing (acceptance E.1, issue 8).
 *
 *   npx tsx tools/crash-test.ts --rounds 20 --publishers 10 --messages 2000 [--queues 3] [--seed 1]
 *       [--mix plain,sow,tx] [--sow-queues 2] [--sow-keys 4] [--sow-messages M]
 *       [--sow-history WINDOW[,GRANULARITY]]   (default 1d, no granularity; e.g. 2s,500ms
 *       has the history sweep and granularity purge while publishers run and across kills;
 *       with a granularity, tools/crash/hist-kept.ts reads the log and history rows from the
 *       data directory after every round and checks the kept moments: kept versions G apart,
 *       each row's `kept` field the kept moment of the row before, every version current for G
 *       or longer kept unless the window may have purged it)
 *       [--lvq-max 6] [--lvq-keys 5]   (role `lvq`, not in the default mix nor the CI run)
 *
 * Each round: start `node bin/tidemark.js --port 0 --data DIR --no-http` (DIR kept across
 * rounds), run P concurrent publishers, one connection each, their roles cycling through
 * `--mix`:
 *   - plain: durable messages (application properties `pub`, `seq`, `round`; seq keeps
 *     counting across rounds) to a few durable queues;
 *   - sow: publish / delta / delete (annotation x-opt-tm-op) on a few keys of its own on a SOW
 *     queue (create-on-demand, sow.key=/id, sow.history.window=1d), a per-key version counter
 *     `ver` in every body;
 *   - tx: local transactions of 2-4 messages to a plain queue, committed (discharge);
 *   - lvq (only when named in --mix): keyed messages (property `k`, --lvq-keys keys per
 *     publisher) to two last-value queues with qpid.max_count=--lvq-max, one ring, one reject
 *     (publishers alternate); never consumed, browsed after the restart (the messages stay
 *     across rounds) and checked: one message per key, the limit, the newest accepted one or a later one, nothing
 *     accepted lost unless the ring was full (tools/crash/lvq.ts);
 * plus one live `subscribe` per SOW queue. Record every ACCEPTED outcome (for a transaction:
 * the discharge), SIGKILL the broker at a random moment, restart it on the same data, drain
 * every plain queue, query each SOW queue (`sow`), replay its whole log (bookmark 0) and
 * publish a probe, stop the broker cleanly, and run the checks (`CHECKS`). The broker must be
 * built (`npx tsc -p tsconfig.json`): bin/tidemark.js runs from dist/.
 *
 * Prints `rounds=R messages checked=N sow records checked=K lost=0 duplicated=0 mismatched=0`
 * and exits 1 on any violation. Checks are a list (`CHECKS`): add one by pushing a `Check`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { prng, openConnection, finishWhenSettled, startBroker, type BrokerChild } from './crash/common.js';
import type { SowMsg } from './crash/common.js';
import { SowWorld, SOW_CHECKS, setSowHistory, ensureSowQueues, liveSubscribe, sowPublish, verifySowQueue, type SowRound, type SowOp } from './crash/sow.js';
import { txPublish, type TxRec } from './crash/tx.js';
import { lvqQueues, ensureLvqQueues, lvqPublish, browseLvq, LVQ_CHECKS, type LvqRound, type LvqOp, type LvqSeen } from './crash/lvq.js';
import { checkHistKept, durationMs, type HistViolation } from './crash/hist-kept.js';


export type Role = 'plain' | 'sow' | 'tx' | 'lvq';

export interface CrashOptions {
  rounds: number;
  publishers: number;
  /** Messages each publisher tries to send per round (the kill usually cuts this short). */
  messages: number;
  queues: number;
  seed: number;
  /** Publisher roles, cycled over the publishers (default plain, sow, tx). */
  mix?: Role[];
  /** SOW queues (default 2), keys per SOW publisher (default 4), ops per SOW publisher per round (default `messages`). */
  sowQueues?: number;
  sowKeys?: number;
  sowMessages?: number;
  /** The SOW queues' `sow.history.window` and, after a comma, `sow.history.granularity` (default `1d`). */
  sowHistory?: string;
  /** qpid.max_count of the two LVQ queues (ring, reject) of the `lvq` role (default 6), keys per LVQ publisher (default 5). */
  lvqMax?: number;
  lvqKeys?: number;
  /** Data directory; a temporary one (removed afterwards) when absent. */
  dataDir?: string;
  log?: (line: string) => void;
}

/** One message as seen by the checks. */
export interface Seen { pub: number; seq: number; round: number; queue: string; body: unknown; properties: Record<string, unknown> }

/** Everything a check may look at for one round. */
export interface RoundData {
  round: number;
  /** `${pub}:${seq}` of every delivery the broker accepted before the kill. */
  accepted: Set<string>;
  /** `${pub}:${seq}` of every message sent (accepted or not). */
  sent: Set<string>;
  /** Messages drained after the restart, per queue, in delivery order. */
  drained: Map<string, Seen[]>;
  queues: string[];
  /** The transactions of the tx publishers and how far each got. */
  txns: TxRec[];
  /** SOW ops, live events, and the state after the restart (absent without sow publishers). */
  sow?: SowRound;
  /** LVQ ops and the LVQ queues drained after the restart (absent without lvq publishers). */
  lvq?: LvqRound;
}

export interface Violation { check: string; kind: 'lost' | 'duplicated' | 'order' | 'phantom' | string; detail: string }
export interface Check { name: string; run(d: RoundData): Violation[] }

const key = (pub: number, seq: number) => `${pub}:${seq}`;

/** The checks, in order. More (e.g. SOW: last accepted version per key) can be pushed here. */
export const CHECKS: Check[] = [
  {
    name: 'accepted-present-once',
    run(d) {
      const count = countBy(d);
      const out: Violation[] = [];
      for (const k of d.accepted) {
        const n = count.get(k) ?? 0;
        if (n === 0) out.push({ check: this.name, kind: 'lost', detail: `accepted message ${k} missing after restart` });
      }
      return out;
    },
  },
  {
    name: 'at-most-once',
    run(d) {
      const out: Violation[] = [];
      for (const [k, n] of countBy(d)) if (n > 1) out.push({ check: this.name, kind: 'duplicated', detail: `${k} present ${n} times${d.accepted.has(k) ? ' (accepted)' : ' (not accepted)'}` });
      return out;
    },
  },
  {
    name: 'no-phantoms',
    run(d) {
      const out: Violation[] = [];
      for (const [k] of countBy(d)) if (!d.sent.has(k)) out.push({ check: this.name, kind: 'phantom', detail: `${k} present but never sent this round` });
      return out;
    },
  },
  {
    name: 'per-publisher-order',
    run(d) {
      const out: Violation[] = [];
      for (const [q, msgs] of d.drained) {
        const last = new Map<number, number>();
        for (const m of msgs) {
          const prev = last.get(m.pub);
          if (prev !== undefined && m.seq <= prev) out.push({ check: this.name, kind: 'order', detail: `queue ${q}: publisher ${m.pub} seq ${m.seq} after ${prev}` });
          last.set(m.pub, m.seq);
        }
      }
      return out;
    },
  },
  {
    // (d) a committed transaction is there whole; one whose discharge was not answered is
    // there whole or not at all; one never discharged (or rejected) is not there.
    name: 'tx-all-or-nothing',
    run(d) {
      const count = countBy(d);
      const out: Violation[] = [];
      for (const t of d.txns) {
        const present = t.keys.filter((k) => (count.get(k) ?? 0) > 0).length;
        const what = `transaction ${t.txn} of publisher ${t.pub} (${t.status}${t.detail ? ' ' + t.detail : ''}, messages ${t.keys.join(' ')})`;
        if (t.status === 'accepted' && present < t.keys.length) out.push({ check: this.name, kind: 'lost', detail: `${what}: only ${present} of ${t.keys.length} present` });
        else if (t.status === 'discharging' && present !== 0 && present !== t.keys.length) out.push({ check: this.name, kind: 'partial', detail: `${what}: ${present} of ${t.keys.length} present` });
        else if ((t.status === 'open' || t.status === 'rejected') && present > 0) out.push({ check: this.name, kind: 'phantom', detail: `${what}: ${present} present though never committed` });
      }
      return out;
    },
  },
  ...SOW_CHECKS.map((c): Check => ({ name: c.name, run: (d) => (d.sow ? c.run(d.sow) : []) })),
  ...LVQ_CHECKS.map((c): Check => ({ name: c.name, run: (d) => (d.lvq ? c.run(d.lvq) : []) })),
];

function countBy(d: RoundData): Map<string, number> {
  const c = new Map<string, number>();
  for (const msgs of d.drained.values()) for (const m of msgs) c.set(key(m.pub, m.seq), (c.get(key(m.pub, m.seq)) ?? 0) + 1);
  return c;
}


/** One publisher: sends up to `n` messages, records accepted ones, stops when the connection dies. */
async function publish(port: number, pub: number, queue: string, firstSeq: number, n: number, round: number, sent: Set<string>, accepted: Set<string>, stop: { stopped: boolean }): Promise<number> {
  let conn: any;
  try { conn = await openConnection(port); } catch { return firstSeq; }
  let next = firstSeq;
  const end = firstSeq + n;
  return new Promise((resolve) => {
    let finished = false;
    const finish = () => { if (finished) return; finished = true; try { conn.close(); } catch { /* gone */ } resolve(next); };
    const sender = conn.open_sender({ target: { address: queue, durable: 2 }, autosettle: true });
    const pump = () => {
      while (!stop.stopped && next < end && sender.sendable()) {
        const seq = next++;
        sent.add(key(pub, seq));
        const d = sender.send({ durable: true, application_properties: { pub, seq, round }, body: `p${pub}-s${seq}` });
        d.__key = key(pub, seq);
      }
    };
    sender.on('accepted', (ctx: any) => { accepted.add(ctx.delivery.__key); });
    sender.on('rejected', () => { /* not accepted: not required */ });
    sender.on('released', () => { /* not accepted */ });
    sender.on('sendable', pump);
    conn.on('disconnected', finish);
    conn.on('connection_close', finish);
    sender.on('sender_error', finish);
    // Finish when everything is settled (or the broker dies).
    finishWhenSettled(conn, sender, () => next >= end || stop.stopped, () => finished, finish);
  });
}

/** Receives everything on `queue` (accepting it) until idle. */
async function drain(port: number, queue: string): Promise<Seen[]> {
  const conn = await openConnection(port);
  const out: Seen[] = [];
  await new Promise<void>((resolve) => {
    const rcv = conn.open_receiver({ source: { address: queue }, autoaccept: false, credit_window: 500 });
    let timer = setTimeout(resolve, 1500);
    rcv.on('message', (ctx: any) => {
      const ap = ctx.message.application_properties ?? {};
      out.push({ pub: Number(ap.pub), seq: Number(ap.seq), round: Number(ap.round), queue, body: ctx.message.body, properties: ap });
      ctx.delivery.accept();
      clearTimeout(timer);
      timer = setTimeout(resolve, 700);
    });
  });
  await new Promise((res) => setTimeout(res, 100)); // let the dispositions reach the broker
  await new Promise<void>((res) => { const t = setTimeout(res, 2000); conn.once('connection_close', () => { clearTimeout(t); res(); }); conn.close(); });
  return out;
}

export interface CrashResult { rounds: number; checked: number; sowChecked: number; lost: number; duplicated: number; mismatched: number; violations: Violation[]; accepted: number; sowAccepted: number; txCommitted: number; /** Transactions whose discharge was sent (committed or unanswered at the kill). */ txDischarged: number }

export async function runCrashTest(opts: CrashOptions): Promise<CrashResult> {
  const log = opts.log ?? ((l: string) => process.stdout.write(l + '\n'));
  const rand = prng(opts.seed);
  if (opts.sowHistory) { const [w, g] = opts.sowHistory.split(','); setSowHistory(w, g); }
  const [histWindow, histG] = opts.sowHistory ? opts.sowHistory.split(',').map((x) => (x ? durationMs(x) : 0)).concat(0) : [0, 0];
  let histRows = 0;
  const dataDir = opts.dataDir ?? mkdtempSync(path.join(tmpdir(), 'tidemark-crash-'));
  const queues = Array.from({ length: opts.queues }, (_, i) => `crash.q${i}`);
  const mix: Role[] = opts.mix?.length ? opts.mix : ['plain', 'sow', 'tx'];
  const roles = Array.from({ length: opts.publishers }, (_, p) => mix[p % mix.length]);
  const sowPubs = roles.flatMap((ro, p) => (ro === 'sow' ? [p] : []));
  const sowQueues = sowPubs.length ? Array.from({ length: Math.min(opts.sowQueues ?? 2, sowPubs.length) }, (_, i) => `crash.sow${i}`) : [];
  const sowQueueOf = new Map(sowPubs.map((p, i) => [p, sowQueues[i % sowQueues.length]]));
  const world = new SowWorld(sowQueues);
  const sowKeys = new Map(sowPubs.map((p) => [p, Array.from({ length: opts.sowKeys ?? 4 }, (_, i) => world.keyFor(sowQueueOf.get(p)!, p, `p${p}.k${i}`))]));
  const lvqPubs = roles.flatMap((ro, p) => (ro === 'lvq' ? [p] : []));
  const lvqQs = lvqPubs.length ? lvqQueues(opts.lvqMax ?? 6) : [];
  const lvqQueueOf = new Map(lvqPubs.map((p, i) => [p, lvqQs[i % lvqQs.length]]));
  let lvqHeld = new Map<string, Map<string, LvqSeen>>();
  const nextSeq = new Array(opts.publishers).fill(0);
  const result: CrashResult = { rounds: 0, checked: 0, sowChecked: 0, lost: 0, duplicated: 0, mismatched: 0, violations: [], accepted: 0, sowAccepted: 0, txCommitted: 0, txDischarged: 0 };
  try {
    for (let round = 1; round <= opts.rounds; round++) {
      const broker = await startBroker(dataDir);
      const sent = new Set<string>();
      const accepted = new Set<string>();
      const txns: TxRec[] = [];
      const stop = { stopped: false };
      const counter = { accepted: 0 };
      const sowRound: SowRound = { world, queues: sowQueues, ops: new Map(), live: new Map(), snapshot: new Map(), replay: new Map(), probe: new Map(), errors: [] };
      if (sowQueues.length) await ensureSowQueues(broker.port, sowQueues);
      if (lvqQs.length) await ensureLvqQueues(broker.port, lvqQs);
      const lvqRound: LvqRound = { queues: lvqQs, ops: new Map(), queueOf: new Map([...lvqQueueOf].map(([p, q]) => [p, q.name])), drained: new Map(), prev: lvqHeld };
      const subs = await Promise.all(sowQueues.map((q) => { const into: SowMsg[] = []; sowRound.live.set(q, into); return liveSubscribe(broker.port, q, into); }));
      const pubs = roles.map(async (role, p) => {
        const pr = prng(Math.floor(rand() * 2 ** 32));
        if (role === 'plain') nextSeq[p] = await publish(broker.port, p, queues[p % queues.length], nextSeq[p], opts.messages, round, sent, accepted, stop);
        else if (role === 'lvq') { const ops: LvqOp[] = []; lvqRound.ops.set(p, ops); nextSeq[p] = await lvqPublish(broker.port, p, lvqQueueOf.get(p)!, opts.lvqKeys ?? 5, nextSeq[p], opts.messages, round, pr, ops, stop, counter); }
        else if (role === 'tx') nextSeq[p] = await txPublish(broker.port, p, queues[p % queues.length], nextSeq[p], opts.messages, round, pr, sent, accepted, txns, stop, counter);
        else {
          const ops: SowOp[] = [];
          sowRound.ops.set(p, ops);
          await sowPublish(broker.port, p, sowQueueOf.get(p)!, sowKeys.get(p)!, opts.sowMessages ?? opts.messages, round, pr, ops, stop, counter);
        }
      });
      // Kill at a random moment: after a random share of the expected accepts, or a time limit.
      const target = Math.floor(rand() * opts.messages * opts.publishers * 0.9);
      const deadline = Date.now() + 200 + rand() * 3000;
      while (accepted.size + counter.accepted < target && Date.now() < deadline) await new Promise((res) => setTimeout(res, 1 + rand() * 5));
      broker.proc.kill('SIGKILL');
      await broker.exited;
      stop.stopped = true;
      await Promise.all(pubs);
      await Promise.all(subs.map((s) => s.done));

      const again = await startBroker(dataDir);
      const drained = new Map<string, Seen[]>();
      try {
        for (const q of queues) drained.set(q, await drain(again.port, q));
        for (const q of lvqQs) lvqRound.drained.set(q.name, await browseLvq(again.port, q.name));
        for (const q of sowQueues) {
          try { await verifySowQueue(again.port, q, round, sowRound); } catch (e) { sowRound.errors.push(`${q}: verification failed: ${(e as Error).message}`); }
        }
      } finally {
        again.proc.kill('SIGTERM');
        const code = await Promise.race([again.exited, new Promise<'timeout'>((res) => setTimeout(() => res('timeout'), 10000))]);
        if (code === 'timeout') { again.proc.kill('SIGKILL'); await again.exited; }
      }
      // With a history granularity: the kept moments in the data directory (tools/crash/hist-kept.ts).
      let histV: HistViolation[] = [];
      if (sowQueues.length && histG > 0) {
        try { const h = await checkHistKept(dataDir, sowQueues, histWindow, histG, Date.now()); histV = h.violations; histRows += h.rows; }
        catch (e) { histV = [{ check: 'hist-kept', kind: 'mismatched', detail: `reading the data directory failed: ${(e as Error).message}` }]; }
      }

      const data: RoundData = { round, accepted, sent, drained, queues, txns, sow: sowQueues.length ? sowRound : undefined, lvq: lvqQs.length ? lvqRound : undefined };
      const violations = [...CHECKS.flatMap((c) => c.run(data)), ...histV];
      const checked = [...drained.values()].reduce((n, m) => n + m.length, 0);
      const sowChecked = [...world.keys.values()].filter((k) => sowRound.snapshot.has(k.queue)).length;
      const sowOps = [...sowRound.ops.values()].flat();
      const sowAcc = sowOps.filter((o) => o.outcome === 'accepted').length;
      const txOk = txns.filter((t) => t.status === 'accepted').length;
      world.commit(sowRound);
      lvqHeld = new Map([...lvqRound.drained].map(([q, msgs]) => [q, new Map(msgs.map((m) => [m.key, m]))]));
      result.rounds = round;
      result.checked += checked;
      result.sowChecked += sowChecked;
      result.accepted += accepted.size;
      result.sowAccepted += sowAcc;
      result.txCommitted += txOk;
      result.txDischarged += txOk + txns.filter((t) => t.status === 'discharging').length;
      result.lost += violations.filter((v) => v.kind === 'lost').length;
      result.duplicated += violations.filter((v) => v.kind === 'duplicated').length;
      result.mismatched += violations.filter((v) => v.kind !== 'lost' && v.kind !== 'duplicated').length;
      result.violations.push(...violations);
      const live = [...sowRound.live.values()].reduce((n, m) => n + m.length, 0);
      const replayed = [...sowRound.replay.values()].reduce((n, m) => n + m.length, 0);
      log(`round ${round}: sent=${sent.size} accepted=${accepted.size} drained=${checked} | sow ops=${sowOps.length} accepted=${sowAcc} live=${live} records=${sowChecked} log=${replayed} ${lvqQs.length ? `| lvq ops=${[...lvqRound.ops.values()].flat().length} accepted=${[...lvqRound.ops.values()].flat().filter((o) => o.outcome === 'accepted').length} rejected=${lvqQs.map((q) => [...lvqRound.ops].filter(([p]) => lvqRound.queueOf.get(p) === q.name).flatMap(([, o]) => o).filter((o) => o.outcome === 'rejected').length).join('/')} left=${lvqQs.map((q) => lvqRound.drained.get(q.name)?.length ?? 0).join('/')} ` : ''}| tx committed=${txOk} unanswered=${txns.filter((t) => t.status === 'discharging').length} open=${txns.filter((t) => t.status === 'open').length} | violations=${violations.length}`);
      for (const v of violations.slice(0, 20)) log(`  VIOLATION [${v.check}] ${v.kind}: ${v.detail}`);
    }
  } finally {
    if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
  }
  if (histG > 0) log(`history rows checked (granularity ${histG} ms)=${histRows}`);
  log(`rounds=${result.rounds} messages checked=${result.checked} sow records checked=${result.sowChecked} lost=${result.lost} duplicated=${result.duplicated} mismatched=${result.mismatched}`);
  return result;
}

function parseArgs(argv: string[]): CrashOptions {
  const o: CrashOptions = { rounds: 5, publishers: 10, messages: 1000, queues: 3, seed: Date.now() % 1e9 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = () => { const x = argv[++i]; if (x === undefined) throw new Error(`${a} needs a value`); return x; };
    if (a === '--rounds') o.rounds = Number(v());
    else if (a === '--publishers') o.publishers = Number(v());
    else if (a === '--messages') o.messages = Number(v());
    else if (a === '--queues') o.queues = Number(v());
    else if (a === '--seed') o.seed = Number(v());
    else if (a === '--data') o.dataDir = v();
    else if (a === '--mix') o.mix = v().split(',').map((x) => { if (!['plain', 'sow', 'tx', 'lvq'].includes(x)) throw new Error(`--mix: unknown role ${x}`); return x as Role; });
    else if (a === '--sow-queues') o.sowQueues = Number(v());
    else if (a === '--sow-keys') o.sowKeys = Number(v());
    else if (a === '--sow-messages') o.sowMessages = Number(v());
    else if (a === '--sow-history') o.sowHistory = v();
    else if (a === '--lvq-max') o.lvqMax = Number(v());
    else if (a === '--lvq-keys') o.lvqKeys = Number(v());
    else if (a === '--help' || a === '-h') {
      process.stdout.write('crash-test --rounds N --publishers 10 --messages M [--queues 3] [--seed S] [--data DIR] [--mix plain,sow,tx] [--sow-queues 2] [--sow-keys 4] [--sow-messages M] [--sow-history 1d[,G]]\n');
      process.exit(0);
    } else throw new Error(`unknown option ${a}`);
  }
  for (const k of ['rounds', 'publishers', 'messages', 'queues', 'sowQueues', 'sowKeys', 'sowMessages', 'lvqMax', 'lvqKeys'] as const) if (o[k] !== undefined && (!Number.isInteger(o[k]) || (o[k] as number) < 1)) throw new Error(`--${k} must be a positive integer`);
  return o;
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  try {
    const opts = parseArgs(process.argv.slice(2));
    process.stdout.write(`crash-test seed=${opts.seed}\n`);
    const res = await runCrashTest(opts);
    process.exit(res.violations.length ? 1 : 0);
  } catch (e) {
    process.stderr.write(`crash-test: ${(e as Error).message}\n`);
    process.exit(2);
  }
}
