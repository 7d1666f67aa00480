/**
 * browse-kill: a checkpoint reader of a plain browse-only queue bounded by `log.max_count`,
 * across `kill -9` of the broker (not part of the CI run).
 *
 *   npx tsx tools/crash/browse-kill.ts --rounds 12 --seed 5 [--max-count 200] [--rate 400] [--stall 0.3]
 *
 * Set-up: a broker (`node bin/tidemark.js --port 0 --data DIR --no-http`, DIR kept across
 * rounds), a queue created on demand with `qpid.browse-only=true` and `log.max_count=M`, one
 * publisher sending durable messages (property `seq`, counting across rounds) at about
 * `--rate` per second, and one reader: a receiver with a `tidemark:checkpoint:map` filter that
 * applies every message (its seq and SCN) together with the message's `x-opt-tm-checkpoint`,
 * as a consumer persisting its state with its checkpoint would, and re-attaches from the last
 * checkpoint it applied. With probability `--stall` a round stops the reader for a while
 * (more than M messages' worth of time), so that it falls off the bounded log while it reads,
 * or (half of those rounds) starts it that much later, so that its checkpoint has fallen off
 * when it attaches after the restart. After a
 * scn-not-found it starts again with a flexible checkpoint (windowScn -1: from the oldest
 * retained message); at a rate well above what the reader reads at the edge of the log it
 * may fall off again and again (`resets` grows, `applied` stands still): that is the bound
 * doing its job, not a violation.
 *
 * Each round: start the broker, publisher and reader, SIGKILL the broker at a random moment,
 * restart it (next round). After the last round the publisher stops, the reader reads to the
 * head, and a fresh browse of the queue lists what it holds. Checks:
 *   - no-duplicate: seq and SCN strictly increasing over everything the reader applied;
 *   - no-gap: between two messages applied one after the other, no message skipped that was
 *     accepted, or that the final browse shows (it was in the log), unless the reader was
 *     detached with `tidemark:scn-not-found` between them (then it starts again from the
 *     oldest retained message, a flexible checkpoint);
 *   - limit: the final browse holds at most M messages, in seq order, no duplicate;
 *   - caught-up: the reader's last applied seq is the final browse's last one;
 *   - accepted-retained: every accepted message newer than the M newest the browse shows... is
 *     in it (the newest accepted message is there, and the browse has no hole among accepted
 *     ones after its first).
 * Prints one summary line and exits 1 on any violation.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { prng, sleep, openConnection, closeConnection, attached, startBroker, type BrokerChild } from './common.js';
import { wrapDescribed } from '../common/connection.js';
import { FLEXIBLE_CHECKPOINT, checkpointPlain, typedCheckpoint } from '../common/checkpoint.js';

export interface BrowseKillOptions { rounds: number; seed: number; maxCount: number; rate: number; stall: number; log?: (l: string) => void }
interface Applied { seq: number; scn: number; afterReset: boolean }
export interface BrowseKillResult { kills: number; applied: number; resets: number; accepted: number; violations: string[] }

const Q = 'crash.browse';

function target(maxCount: number) {
  return { address: Q, durable: 2, capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.browse-only': true, 'log.max_count': maxCount } };
}

export async function runBrowseKill(o: BrowseKillOptions): Promise<BrowseKillResult> {
  const log = o.log ?? ((l: string) => process.stdout.write(l + '\n'));
  const rand = prng(o.seed);
  const dataDir = mkdtempSync(path.join(tmpdir(), 'tidemark-browse-kill-'));
  const accepted = new Set<number>();
  const applied: Applied[] = [];
  const violations: string[] = [];
  let checkpoint: Record<string, unknown> = FLEXIBLE_CHECKPOINT;
  let pendingReset = true; // the first attach starts from wherever a flexible checkpoint starts
  let resets = 0;
  let nextSeq = 0;
  const apply = (seq: number, scn: number, cp: unknown) => {
    const last = applied[applied.length - 1];
    if (last && (seq <= last.seq || scn <= last.scn)) violations.push(`no-duplicate: applied seq ${seq} scn ${scn} after seq ${last.seq} scn ${last.scn}`);
    applied.push({ seq, scn, afterReset: pendingReset });
    pendingReset = false;
    if (cp !== undefined) checkpoint = checkpointPlain(cp) as Record<string, unknown>;
    else violations.push(`checkpoint: message seq ${seq} scn ${scn} came without x-opt-tm-checkpoint`);
  };

  /** The reader: until `stop.stopped` or the broker dies; re-attaches after scn-not-found. */
  const reader = async (port: number, stop: { stopped: boolean; paused: boolean }) => {
    let conn: any;
    try { conn = await openConnection(port); } catch { return; }
    try {
      while (!stop.stopped && conn.is_open()) {
        const rcv = conn.open_receiver({ source: { address: Q, distribution_mode: 'copy', filter: { 'tidemark-checkpoint': wrapDescribed(typedCheckpoint(checkpoint), 'tidemark:checkpoint:map') } }, autoaccept: false, credit_window: 0 });
        const why = await new Promise<string>((resolve) => {
          const t = setInterval(() => {
            if (stop.stopped) { clearInterval(t); resolve('stop'); return; }
            if (!stop.paused && rcv.credit < 20) rcv.add_credit(50 - rcv.credit);
          }, 10);
          rcv.on('message', (ctx: any) => {
            const a = ctx.message.message_annotations ?? {};
            apply(Number(ctx.message.application_properties?.seq), Number(a['x-opt-tm-scn'] ?? -1), a['x-opt-tm-checkpoint']);
            ctx.delivery.accept();
          });
          const closed = () => { clearInterval(t); resolve(String(rcv.remote?.detach?.error?.condition ?? rcv.error?.condition ?? 'closed')); };
          rcv.once('receiver_close', closed);
          rcv.once('receiver_error', closed);
          const gone = () => { clearInterval(t); resolve('disconnected'); };
          conn.once('disconnected', gone);
          rcv.once('receiver_close', () => conn.removeListener('disconnected', gone));
        });
        if (why === 'tidemark:scn-not-found') { resets++; pendingReset = true; checkpoint = FLEXIBLE_CHECKPOINT; continue; }
        if (why !== 'stop' && why !== 'disconnected') violations.push(`reader: detached with ${why}`);
        break;
      }
    } finally { await closeConnection(conn).catch(() => undefined); }
  };

  const publisher = async (port: number, stop: { stopped: boolean }) => {
    let conn: any;
    try { conn = await openConnection(port); } catch { return; }
    const s = conn.open_sender({ target: target(o.maxCount), autosettle: true });
    s.on('accepted', (ctx: any) => accepted.add(ctx.delivery.__seq));
    try { await attached(s, conn, 'sendable'); } catch { return; }
    const gap = 1000 / o.rate;
    while (!stop.stopped && conn.is_open()) {
      if (s.sendable()) { const seq = nextSeq++; const d = s.send({ durable: true, application_properties: { seq }, body: `s${seq}` }); d.__seq = seq; }
      await sleep(gap);
    }
    await closeConnection(conn).catch(() => undefined);
  };

  let kills = 0;
  try {
    for (let round = 1; round <= o.rounds; round++) {
      const b: BrokerChild = await startBroker(dataDir);
      const stop = { stopped: false, paused: false };
      const pub = publisher(b.port, stop);
      const life = 300 + rand() * 2500;
      const stallMs = (1.5 * o.maxCount / o.rate) * 1000;
      // A stall: the reader stops reading for a while (falls off in the stream), or (half of
      // them) attaches only after the log moved past its checkpoint (falls off at the attach).
      const x = rand();
      const late = x < o.stall / 2 && life > stallMs + 200;
      await sleep(late ? stallMs : 50);
      const rd = reader(b.port, stop);
      if (!late && x < o.stall) { stop.paused = true; setTimeout(() => { stop.paused = false; }, Math.min(life - 50, stallMs)); }
      await sleep(late ? life - stallMs : life);
      b.proc.kill('SIGKILL');
      await b.exited;
      kills++;
      stop.stopped = true;
      await Promise.all([pub, rd]);
      log(`round ${round}: sent=${nextSeq} accepted=${accepted.size} applied=${applied.length} last=${applied.at(-1)?.seq ?? '-'} resets=${resets} violations=${violations.length}`);
    }
    // The end: no publisher; the reader reads to the head; a fresh browse lists the queue.
    const b = await startBroker(dataDir);
    try {
      const stop = { stopped: false, paused: false };
      const rd = reader(b.port, stop);
      let n = -1;
      for (let i = 0; i < 100 && n !== applied.length; i++) { n = applied.length; await sleep(300); }
      stop.stopped = true;
      await rd;
      const conn = await openConnection(b.port);
      const held: number[] = [];
      const rcv = conn.open_receiver({ source: { address: Q, distribution_mode: 'copy' }, credit_window: 500 });
      rcv.on('message', (ctx: any) => { held.push(Number(ctx.message.application_properties?.seq)); });
      let m = -1;
      for (let i = 0; i < 50 && m !== held.length; i++) { m = held.length; await sleep(300); }
      await closeConnection(conn);
      const inLog = new Set(held);
      if (held.length > o.maxCount) violations.push(`limit: the queue holds ${held.length} messages, log.max_count=${o.maxCount}`);
      for (let i = 1; i < held.length; i++) if (held[i] <= held[i - 1]) violations.push(`limit: browse seq ${held[i]} after ${held[i - 1]}`);
      const maxAcc = Math.max(-1, ...accepted);
      if (maxAcc >= 0 && !inLog.has(maxAcc)) violations.push(`accepted-retained: the newest accepted message ${maxAcc} is not in the queue (browse ${held[0]}..${held.at(-1)})`);
      if (held.length) for (const s of accepted) if (s > held[0] && !inLog.has(s)) violations.push(`accepted-retained: accepted ${s} missing from the queue though ${held[0]} before it is there`);
      const lastApplied = applied.at(-1)?.seq;
      if (held.length && lastApplied !== held.at(-1)) violations.push(`caught-up: the reader's last applied seq is ${lastApplied}, the queue ends at ${held.at(-1)}`);
      for (let i = 1; i < applied.length; i++) {
        const a = applied[i - 1], c = applied[i];
        if (c.afterReset) continue;
        for (let s = a.seq + 1; s < c.seq; s++) if (accepted.has(s) || inLog.has(s)) { violations.push(`no-gap: the reader applied seq ${c.seq} (scn ${c.scn}) right after ${a.seq} (scn ${a.scn}), skipping ${s} (${accepted.has(s) ? 'accepted' : 'in the log'}) without scn-not-found`); break; }
      }
    } finally { b.proc.kill('SIGTERM'); await b.exited; }
  } finally { rmSync(dataDir, { recursive: true, force: true }); }
  log(`kills=${kills} sent=${nextSeq} accepted=${accepted.size} applied=${applied.length} resets=${resets} violations=${violations.length}`);
  for (const v of violations.slice(0, 30)) log(`  VIOLATION ${v}`);
  return { kills, applied: applied.length, resets, accepted: accepted.size, violations };
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const o: BrowseKillOptions = { rounds: 8, seed: Date.now() % 1e9, maxCount: 200, rate: 400, stall: 0.3 };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--help' || a === '-h') {
      process.stdout.write('usage: npx tsx tools/crash/browse-kill.ts [--rounds N] [--seed N] [--max-count M] [--rate PER_S] [--stall P]\n(see the comment at the top of this file)\n');
      process.exit(0);
    }
    const v = Number(argv[++i]);
    if (!Number.isFinite(v)) { process.stderr.write(`browse-kill: ${a} needs a number\n`); process.exit(2); }
    if (a === '--rounds') o.rounds = v; else if (a === '--seed') o.seed = v; else if (a === '--max-count') o.maxCount = v;
    else if (a === '--rate') o.rate = v; else if (a === '--stall') o.stall = v;
    else { process.stderr.write(`browse-kill: unknown option ${a}\n`); process.exit(2); }
  }
  process.stdout.write(`browse-kill seed=${o.seed}\n`);
  const res = await runBrowseKill(o);
  process.exit(res.violations.length ? 1 : 0);
}
