/**
 * SOW part of the crash test (tools/crash-test.ts): publishers doing publish / delta / delete
 * on a small key set of their own (a per-key version counter `ver` in every body), a live
 * `subscribe` per SOW queue during the round, and after the restart a `sow` query, a replay
 * of the whole log (`subscribe`, bookmark 0, up to `completed`) and a probe publish.
 *
 * The model: per key, the events verified so far (history) and the record (state). An op
 * whose outcome was not seen before the kill may or may not have been applied, so a key may
 * end on the state after its last accepted op, or after any later (unconfirmed) op of the
 * same publisher; the log must hold exactly the ops applied, and one publisher's applied ops
 * must be a prefix of what it sent (one link, in order).
 */
import { r, openConnection, closeConnection, attached, tmFilters, sowMsg, sameJson, show, finishWhenSettled, type SowMsg } from './common.js';

export type Obj = Record<string, unknown>;
export type SowOpName = 'publish' | 'delta' | 'delete';

export const SOW_NODE_PROPERTIES: Record<string, string> = { 'sow.key': '/id', 'sow.history.window': '1d' };

/**
 * The SOW queues' history (before the first round creates them): a short window makes the
 * history sweep purge while publishers run and across kills, a granularity drops superseded
 * versions as events arrive; the records of such a queue are its newest history versions.
 */
export function setSowHistory(window: string, granularity?: string): void {
  SOW_NODE_PROPERTIES['sow.history.window'] = window;
  if (granularity !== undefined) SOW_NODE_PROPERTIES['sow.history.granularity'] = granularity;
  else delete SOW_NODE_PROPERTIES['sow.history.granularity'];
}
export const sowTarget = (queue: string) => ({ address: queue, durable: 2, capabilities: ['create-on-demand'], dynamic_node_properties: SOW_NODE_PROPERTIES });

/** One op a SOW publisher sent: `after` is the record the model expects once it is applied. */
export interface SowOp { g: number; pub: number; queue: string; key: string; op: SowOpName; ver: number; body: Obj; after: Obj | null; outcome?: string }

/** One event of the log as the model expects it (`publish` carries the full merged record). */
export interface LogEv { cmd: 'publish' | 'delete'; body: Obj | null; ver?: number }

export interface KeyState { queue: string; key: string; pub: number; ver: number; state: Obj | null; history: LogEv[] }

/** Everything the SOW checks look at for one round. */
export interface SowRound {
  world: SowWorld;
  queues: string[];
  /** Per SOW publisher, its ops in send order. */
  ops: Map<number, SowOp[]>;
  /** What the live subscriber of each queue saw before the kill. */
  live: Map<string, SowMsg[]>;
  /** After the restart: `sow` records per queue (key → record). */
  snapshot: Map<string, Map<string, SowMsg>>;
  /** After the restart: the replay from bookmark 0 (events only), per queue. */
  replay: Map<string, SowMsg[]>;
  /** After the restart: one publish per queue, received live after the replay. */
  probe: Map<string, SowMsg | undefined>;
  /** Verification problems (query time-outs and the like). */
  errors: string[];
}

/** The verified state of every SOW key, carried across rounds. */
export class SowWorld {
  readonly keys = new Map<string, KeyState>();
  readonly queues: string[];
  constructor(queues: string[]) { this.queues = queues; }

  keyFor(queue: string, pub: number, key: string): KeyState {
    let k = this.keys.get(key);
    if (!k) this.keys.set(key, k = { queue, key, pub, ver: 0, state: null, history: [] });
    return k;
  }

  /** After the checks: adopt what the broker holds (verified, or at least observed) as the base of the next round. */
  commit(round: SowRound): void {
    const perKey = eventsByKey(round);
    for (const q of round.queues) {
      for (const [key, rec] of round.snapshot.get(q) ?? []) if (!this.keys.has(key)) this.keyFor(q, -1, key);
    }
    for (const k of this.keys.values()) {
      k.history = (perKey.get(k.key) ?? []).map((e) => ({ cmd: e.cmd === 'delete' ? 'delete' : 'publish', body: e.cmd === 'delete' ? null : e.body }));
      k.state = round.snapshot.get(k.queue)?.get(k.key)?.body ?? null;
    }
    for (const [q, p] of round.probe) {
      if (!p) continue;
      const k = this.keyFor(q, -1, p.key);
      k.history.push({ cmd: 'publish', body: p.body });
      k.state = p.body;
    }
  }
}

function eventsByKey(round: SowRound): Map<string, SowMsg[]> {
  const m = new Map<string, SowMsg[]>();
  for (const evs of round.replay.values()) for (const e of evs) { let l = m.get(e.key); if (!l) m.set(e.key, l = []); l.push(e); }
  return m;
}

/** Creates the SOW queues (create-on-demand attach) so that subscribers can attach before the publishers. */
export async function ensureSowQueues(port: number, queues: string[]): Promise<void> {
  const conn = await openConnection(port);
  try {
    for (const q of queues) { const s = conn.open_sender({ target: sowTarget(q) }); await attached(s, conn, 'sendable'); s.close(); }
  } finally { await closeConnection(conn); }
}

/** A live `subscribe` on `queue` until the broker dies; events go to `into`. Resolves once attached. */
export async function liveSubscribe(port: number, queue: string, into: SowMsg[]): Promise<{ done: Promise<void> }> {
  const conn = await openConnection(port);
  const rcv = conn.open_receiver({ source: { address: queue, filter: tmFilters({ command: 'subscribe' }) }, autoaccept: true, credit_window: 500 });
  rcv.on('message', (ctx: any) => { const m = sowMsg(ctx.message); if (!['group_begin', 'group_end', 'completed'].includes(m.cmd)) into.push(m); });
  await attached(rcv, conn, 'receiver_open');
  const done = new Promise<void>((res) => { conn.once('disconnected', () => res()); conn.once('connection_close', () => res()); });
  return { done };
}

/** One SOW publisher: up to `n` random ops on its keys, in order on one link; records each op and its outcome. */
export async function sowPublish(port: number, pub: number, queue: string, keys: KeyState[], n: number, round: number, rand: () => number, ops: SowOp[], stop: { stopped: boolean }, counter: { accepted: number }): Promise<void> {
  let conn: any;
  try { conn = await openConnection(port); } catch { return; }
  const cur = new Map(keys.map((k) => [k.key, k.state]));
  let sentN = 0;
  await new Promise<void>((resolve) => {
    let finished = false;
    const finish = () => { if (finished) return; finished = true; try { conn.close(); } catch { /* gone */ } resolve(); };
    const sender = conn.open_sender({ target: sowTarget(queue), autosettle: true });
    const pump = () => {
      while (!stop.stopped && sentN < n && sender.sendable()) {
        const k = keys[Math.floor(rand() * keys.length)];
        const prev = cur.get(k.key) ?? null;
        const x = rand();
        const op: SowOpName = x < 0.2 ? 'delete' : x < 0.5 ? 'delta' : 'publish';
        const ver = ++k.ver;
        let body: Obj, after: Obj | null;
        if (op === 'publish') { body = { id: k.key, pub, ver, round, p: ver }; after = body; }
        else if (op === 'delta') { body = { id: k.key, ver, round, ['d' + (ver % 3)]: ver }; after = { ...(prev ?? {}), ...body }; }
        else { body = { id: k.key, ver }; after = null; }
        cur.set(k.key, after);
        const rec: SowOp = { g: ops.length, pub, queue, key: k.key, op, ver, body, after };
        ops.push(rec);
        sentN++;
        const d = sender.send({ durable: true, message_annotations: { 'x-opt-tm-op': op }, body: JSON.stringify(body) });
        d.__op = rec;
      }
    };
    sender.on('accepted', (ctx: any) => { ctx.delivery.__op.outcome = 'accepted'; counter.accepted++; });
    for (const o of ['rejected', 'released', 'modified']) sender.on(o, (ctx: any) => { ctx.delivery.__op.outcome = o + ':' + JSON.stringify(ctx.delivery.remote_state?.error?.description ?? ''); });
    sender.on('sendable', pump);
    conn.on('disconnected', finish);
    conn.on('connection_close', finish);
    sender.on('sender_error', finish);
    finishWhenSettled(conn, sender, () => sentN >= n || stop.stopped, () => finished, finish);
  });
}

/** Collects messages from `rcv` until `until` holds, or nothing arrives for `idleMs`. */
function collectUntil(rcv: any, until: (m: SowMsg) => boolean, idleMs: number): Promise<{ msgs: SowMsg[]; ended: boolean }> {
  return new Promise((resolve) => {
    const msgs: SowMsg[] = [];
    let timer = setTimeout(() => done(false), idleMs);
    const done = (ended: boolean) => { clearTimeout(timer); rcv.removeListener('message', on); resolve({ msgs, ended }); };
    const on = (ctx: any) => {
      const m = sowMsg(ctx.message);
      msgs.push(m);
      clearTimeout(timer);
      if (until(m)) { done(true); return; }
      timer = setTimeout(() => done(false), idleMs);
    };
    rcv.on('message', on);
  });
}

/** After the restart: the `sow` records, the replay from bookmark 0, and a probe publish received live after it. */
export async function verifySowQueue(port: number, queue: string, round: number, into: SowRound): Promise<void> {
  const conn = await openConnection(port);
  try {
    const snap = conn.open_receiver({ source: { address: queue, filter: tmFilters({ command: 'sow' }) }, autoaccept: true, credit_window: 1000 });
    const snapDone = collectUntil(snap, (m) => m.cmd === 'group_end', 5000);
    await attached(snap, conn, 'receiver_open');
    const s = await snapDone;
    if (!s.ended) into.errors.push(`${queue}: sow query did not end with group_end`);
    into.snapshot.set(queue, new Map(s.msgs.filter((m) => m.cmd === 'sow').map((m) => [m.key, m])));
    snap.close();

    const rep = conn.open_receiver({ source: { address: queue, filter: tmFilters({ command: 'subscribe', bookmark: '0' }) }, autoaccept: true, credit_window: 1000 });
    const repDone = collectUntil(rep, (m) => m.cmd === 'completed', 5000);
    await attached(rep, conn, 'receiver_open');
    const p = await repDone;
    if (!p.ended) into.errors.push(`${queue}: replay from bookmark 0 did not end with completed`);
    into.replay.set(queue, p.msgs.filter((m) => !['group_begin', 'group_end', 'completed'].includes(m.cmd)));

    const probeKey = `probe.${queue}.r${round}`;
    const probeDone = collectUntil(rep, (m) => m.key === probeKey, 5000);
    const sender = conn.open_sender({ target: sowTarget(queue) });
    await attached(sender, conn, 'sendable');
    sender.send({ durable: true, body: JSON.stringify({ id: probeKey, probe: round }) });
    const pr = await probeDone;
    const probe = pr.msgs.find((m) => m.key === probeKey);
    if (!probe) into.errors.push(`${queue}: the probe publish after the restart was not received`);
    into.probe.set(queue, probe);
    // Anything else received live here would be a phantom: nobody else publishes now.
    for (const m of pr.msgs) if (m.key !== probeKey) into.errors.push(`${queue}: unexpected live event after the restart ${m.cmd} ${m.key} scn ${m.scn}`);
  } finally { await closeConnection(conn); }
}

export interface SowViolation { check: string; kind: string; detail: string }

/** The states a key may hold after the restart: after its last accepted op or any later one (or the base, if none was accepted). */
function allowedStates(base: Obj | null, ops: SowOp[]): { states: Array<Obj | null>; lastAccepted: number } {
  let la = -1;
  ops.forEach((o, i) => { if (o.outcome === 'accepted') la = i; });
  const states: Array<Obj | null> = la === -1 ? [base] : [];
  for (let i = Math.max(la, 0); i < ops.length; i++) states.push(ops[i].after);
  return { states, lastAccepted: la };
}

function opsByKey(d: SowRound): Map<string, SowOp[]> {
  const m = new Map<string, SowOp[]>();
  for (const ops of d.ops.values()) for (const o of ops) { let l = m.get(o.key); if (!l) m.set(o.key, l = []); l.push(o); }
  return m;
}

const evMatches = (e: SowMsg, x: LogEv) => (x.cmd === 'delete' ? e.cmd === 'delete' : e.cmd !== 'delete' && sameJson(e.body, x.body));
const expectedEv = (o: SowOp): LogEv => (o.op === 'delete' ? { cmd: 'delete', body: null, ver: o.ver } : { cmd: 'publish', body: o.after, ver: o.ver });

/** How many of this round's ops on a key the log holds, if the log is history ++ a prefix of them. */
function appliedCount(k: KeyState, evs: SowMsg[], ops: SowOp[]): { m: number; problem?: { kind: string; detail: string } } {
  const h = k.history.length;
  for (let i = 0; i < Math.min(h, evs.length); i++) {
    if (!evMatches(evs[i], k.history[i])) return { m: 0, problem: { kind: 'mismatched', detail: `log event ${i} of key ${k.key} (scn ${evs[i].scn}) is ${evs[i].cmd} ${show(evs[i].body)}, an earlier round verified ${k.history[i].cmd} ${show(k.history[i].body)}` } };
  }
  if (evs.length < h) return { m: 0, problem: { kind: 'lost', detail: `key ${k.key}: the log has ${evs.length} events, earlier rounds verified ${h}` } };
  const m = evs.length - h;
  if (m > ops.length) return { m: ops.length, problem: { kind: 'duplicated', detail: `key ${k.key}: ${m} log events this round for ${ops.length} ops sent (${evs.slice(h).map((e) => `${e.cmd}@${e.scn}:${e.body?.ver}`).join(' ')})` } };
  for (let i = 0; i < m; i++) {
    const x = expectedEv(ops[i]);
    if (!evMatches(evs[h + i], x)) {
      const e = evs[h + i];
      const dupOfPrev = i > 0 && evMatches(e, expectedEv(ops[i - 1]));
      return { m: i, problem: { kind: dupOfPrev ? 'duplicated' : 'mismatched', detail: `key ${k.key}: log event scn ${e.scn} is ${e.cmd} ${show(e.body)}, expected op ${i} (${ops[i].op} ver ${ops[i].ver}) → ${x.cmd} ${show(x.body)}` } };
    }
  }
  return { m };
}

export const SOW_CHECKS: Array<{ name: string; run(d: SowRound): SowViolation[] }> = [
  {
    // (a) each record is the last accepted version (or a later unconfirmed one); deleted keys are absent.
    name: 'sow-record-last-accepted',
    run(d) {
      const out: SowViolation[] = [];
      const byKey = opsByKey(d);
      for (const k of d.world.keys.values()) {
        const snap = d.snapshot.get(k.queue);
        if (!snap) continue;
        const ops = byKey.get(k.key) ?? [];
        const actual = snap.get(k.key)?.body ?? null;
        const { states, lastAccepted } = allowedStates(k.state, ops);
        if (states.some((s) => sameJson(s, actual))) continue;
        const earlier = [k.state, ...ops.slice(0, Math.max(lastAccepted, 0)).map((o) => o.after)].some((s) => sameJson(s, actual));
        const la = lastAccepted >= 0 ? `${ops[lastAccepted].op} ver ${ops[lastAccepted].ver} → ${show(ops[lastAccepted].after)}` : `none this round (base ${show(k.state)})`;
        out.push({ check: this.name, kind: earlier ? 'lost' : 'mismatched', detail: `${k.queue} key ${k.key}: record is ${show(actual)}; last accepted op ${la}; ${ops.length - Math.max(lastAccepted + 1, 0)} later unconfirmed` });
      }
      for (const [q, snap] of d.snapshot) for (const key of snap.keys()) if (!d.world.keys.has(key)) out.push({ check: this.name, kind: 'phantom', detail: `${q}: record ${key} never published` });
      return out;
    },
  },
  {
    // (b) folding the replay of the whole log gives exactly the SOW (records and their SCNs).
    name: 'sow-log-folds-to-sow',
    run(d) {
      const out: SowViolation[] = [];
      for (const q of d.queues) {
        const snap = d.snapshot.get(q), evs = d.replay.get(q);
        if (!snap || !evs) continue;
        const fold = new Map<string, SowMsg>();
        for (const e of evs) { if (e.cmd === 'delete') fold.delete(e.key); else fold.set(e.key, e); }
        for (const [key, e] of fold) {
          const s = snap.get(key);
          if (!s) out.push({ check: this.name, kind: 'mismatched', detail: `${q} key ${key}: the log ends on ${show(e.body)} (scn ${e.scn}) but the SOW has no record` });
          else if (!sameJson(s.body, e.body) || s.scn !== e.scn) out.push({ check: this.name, kind: 'mismatched', detail: `${q} key ${key}: log ends on scn ${e.scn} ${show(e.body)}, SOW has scn ${s.scn} ${show(s.body)}` });
        }
        for (const [key, s] of snap) if (!fold.has(key)) out.push({ check: this.name, kind: 'mismatched', detail: `${q} key ${key}: SOW record scn ${s.scn} ${show(s.body)} but the log ends deleted or has no event` });
      }
      return out;
    },
  },
  {
    // The log per key is the verified history plus a prefix of this round's ops at least as
    // long as the last accepted one; one publisher's applied ops are a prefix of its sends.
    name: 'sow-log-per-key',
    run(d) {
      const out: SowViolation[] = [];
      const byKey = opsByKey(d);
      const evs = eventsByKey(d);
      const applied = new Map<string, number>();
      for (const k of d.world.keys.values()) {
        if (!d.replay.has(k.queue)) continue;
        const ops = byKey.get(k.key) ?? [];
        const { m, problem } = appliedCount(k, evs.get(k.key) ?? [], ops);
        if (problem) { out.push({ check: this.name, ...problem }); continue; }
        applied.set(k.key, m);
        let la = -1;
        ops.forEach((o, i) => { if (o.outcome === 'accepted') la = i; });
        if (m < la + 1) out.push({ check: this.name, kind: 'lost', detail: `key ${k.key}: accepted op ${la} (${ops[la].op} ver ${ops[la].ver}) is not in the log (${m} of this round's ops are)` });
      }
      for (const [pub, ops] of d.ops) {
        let maxApplied = -1, minUnapplied = Infinity;
        const seen = new Map<string, number>();
        for (const o of ops) {
          const i = seen.get(o.key) ?? 0;
          seen.set(o.key, i + 1);
          const m = applied.get(o.key);
          if (m === undefined) continue;
          if (i < m) maxApplied = Math.max(maxApplied, o.g); else minUnapplied = Math.min(minUnapplied, o.g);
        }
        if (maxApplied > minUnapplied) out.push({ check: this.name, kind: 'order', detail: `SOW publisher ${pub}: op ${maxApplied} applied but earlier op ${minUnapplied} not (not a prefix of the link)` });
      }
      return out;
    },
  },
  {
    // (c) SCNs: replay strictly increasing; what the live subscribers saw before the kill is in
    // the log unchanged; the probe after the restart gets an SCN above everything seen before.
    name: 'sow-scn',
    run(d) {
      const out: SowViolation[] = [];
      for (const q of d.queues) {
        const evs = d.replay.get(q) ?? [];
        const byScn = new Map<number, SowMsg>();
        for (let i = 0; i < evs.length; i++) {
          byScn.set(evs[i].scn, evs[i]);
          if (!(evs[i].scn > 0)) out.push({ check: this.name, kind: 'mismatched', detail: `${q}: replay event ${i} has no SCN` });
          if (i > 0 && evs[i].scn <= evs[i - 1].scn) out.push({ check: this.name, kind: evs[i].scn === evs[i - 1].scn ? 'duplicated' : 'order', detail: `${q}: replay SCN ${evs[i].scn} after ${evs[i - 1].scn}` });
        }
        const live = d.live.get(q) ?? [];
        for (let i = 1; i < live.length; i++) if (live[i].scn <= live[i - 1].scn) out.push({ check: this.name, kind: 'order', detail: `${q}: live SCN ${live[i].scn} after ${live[i - 1].scn} before the kill` });
        if (d.replay.has(q)) {
          for (const e of live) {
            const x = byScn.get(e.scn);
            if (!x) out.push({ check: this.name, kind: 'lost', detail: `${q}: event scn ${e.scn} (${e.cmd} ${e.key} ${show(e.body)}) was delivered live before the kill but is not in the log` });
            else if (x.key !== e.key || (x.cmd === 'delete') !== (e.cmd === 'delete') || (e.cmd !== 'delete' && !sameJson(x.body, e.body))) out.push({ check: this.name, kind: 'mismatched', detail: `${q}: scn ${e.scn} was ${e.cmd} ${e.key} ${show(e.body)} live before the kill, the log has ${x.cmd} ${x.key} ${show(x.body)}` });
          }
        }
        const probe = d.probe.get(q);
        const maxBefore = Math.max(0, ...live.map((e) => e.scn));
        const maxLog = Math.max(0, ...evs.map((e) => e.scn));
        if (probe && (probe.scn <= maxBefore || probe.scn <= maxLog)) out.push({ check: this.name, kind: 'scn-reuse', detail: `${q}: the first publish after the restart got SCN ${probe.scn}; before the kill SCNs up to ${maxBefore} were seen, the log holds up to ${maxLog}` });
      }
      return out;
    },
  },
  {
    name: 'sow-verification',
    run(d) {
      const out: SowViolation[] = d.errors.map((e) => ({ check: this.name, kind: 'mismatched', detail: e }));
      // Every op is valid: an outcome other than accepted breaks the model (and is a bug).
      for (const ops of d.ops.values()) for (const o of ops) if (o.outcome && o.outcome !== 'accepted') out.push({ check: this.name, kind: 'rejected', detail: `SOW publisher ${o.pub} op ${o.g} (${o.op} ${o.key} ver ${o.ver}): ${o.outcome}` });
      return out;
    },
  },
];

void r;
