/**
 * drain-kill: `kill -9` a `drain --checkpoint` consumer at random points while a publisher
 * keeps writing, restart it, many times; then check that what the consumer applied equals the
 * SOW and that the events it applied have no gap and no duplicate (issue #7, semantics.md 8,
 * wire.md 6).
 *
 *   npx tsx tools/crash/drain-kill.ts --rounds 100 --seed 7 [--keys 300] [--rate 150]
 *       [--max-count 300] [--tx 0.3] [--url amqp://127.0.0.1:PORT] [--queue NAME] [--no-stalls]
 *       [--no-coverage] [--verbose]
 *
 * Prints one summary line (`kills=… snapshot=… catchup=… online=… mid-window=… … violations=0`)
 * and exits 1 on any violation (2 on a usage error). bin/drain.js and bin/tidemark.js run from
 * dist/: build first (`npx tsc -p tsconfig.json`).
 *
 * Set-up: a broker (the one at --url, or `node bin/tidemark.js --port 0 --data DIR --no-http`
 * started here), a SOW queue (create-on-demand, `sow.key=/id`, `sow.history.window=1d`,
 * `log.max_count=M`) loaded with one record per key, and a publisher at a steady rate doing
 * publish / delta / delete (annotation `x-opt-tm-op`, 50/30/20 %) over the keys, a per-key
 * version `ver` in every body; a share of the ops go in local transactions of 2-5 (one window
 * of contiguous SCNs), so that a checkpoint can be mid-window.
 *
 * Each round: (maybe) wait, start `node bin/drain.js -b URL -f -p json --checkpoint FILE Q`,
 * SIGKILL it at a seeded random point, read what it printed and the checkpoint file. Rounds
 * aim in turn at the snapshot, the catch-up, a window and the online phase: the wait before
 * the start is long enough for the consumer to fall off the log (polled through `$management`:
 * oldest retained SCN > its position + 1) when a bootstrap is wanted, and the kill comes after
 * a random number of messages of the wanted phase (or a random time online). Where the kill
 * landed is what the checkpoint file says afterwards. After a kill in catch-up the next start
 * waits for a fall-off (the consumer falls off during catch-up); with stalls on, some rounds
 * also SIGSTOP drain in catch-up until the log has moved past it, then SIGCONT (the broker
 * must re-bootstrap inside the link).
 *
 * The consumer model (`Consumer`) is a consumer that persists its state together with the
 * checkpoint: its state is the fold of every message drain printed up to and including the
 * one whose `x-opt-tm-checkpoint` is in the file at the kill (drain syncs the
 * checkpoint file, prints the message, then renames the file into place, so the file is the
 * last printed message's but for a kill in the microseconds between a print and its rename:
 * then one printed message is not applied and comes again after the restart). Folding: `group_begin` without `snapshot_offset` starts a bootstrap (the state
 * is reset), `sow` sets a record, `group_end` starts the catch-up at the snapshot SCN S,
 * `publish` sets, `delete` removes, `completed` marks online. Checked on every applied message:
 *   - events (catch-up and online) have SCN = last applied SCN + 1 (the queue's SCNs are
 *     contiguous and a checkpoint link gets every event): else `gap` or `duplicate`;
 *   - a snapshot sends keys in strictly increasing order, resuming after `snapshot_offset`;
 *   - each checkpoint says exactly what was applied: snapshot_offset = the key, catchup_offset
 *     = the SCN, catch-up until bootstrap_target_scn then online, windowScn / prevScn /
 *     windowOffset follow the windows (mid-window offsets count 1, 2, … and the window closes
 *     at its last SCN), the bootstrap start S stays the same while a bootstrap is resumed;
 *   - the checkpoint file holds the checkpoint of the last or next-to-last printed message;
 *   - a consumer restarted after it fell off the log gets a fresh bootstrap.
 * At the end the publisher stops, drain runs to completion (`-t 2`), and the state must equal
 * a final `drain --sow` exactly (per key: body and SCN), the last applied SCN must be the
 * head, and the SOW must equal the publisher's own model of its ops. With 8 rounds or more the
 * run also fails unless kills landed in the snapshot, the catch-up, online and (with
 * transactions) mid-window online, and the consumer fell off the log during catch-up: after
 * the first block of four rounds, rounds aim at whatever is still missing.
 *
 * A snapshot record whose SCN is above the bootstrap start S is a violation (`snapshot-scn`):
 * semantics.md 8 leaves records changed after S to catch-up, also in a resumed snapshot.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { applyRheaPatches } from '../../lib/core/protocol/rhea-patches.js';
import { openCoordinator, markTransactionalTransfers } from '../common/transactions.js';
import { r, prng, sleep, attached, closeConnection, sameJson, show, startBroker, type BrokerChild } from './common.js';
import { controlBody, settled, sendable } from './tx.js';
import { connect as toolConnect, type Connected } from '../common/connection.js';
import { ManagementClient } from '../common/management.js';

applyRheaPatches(); // decodes `declared` and `transactional-state` on the client side

const HERE = path.dirname(fileURLToPath(import.meta.url));
/** The project root (this file runs from tools/crash/ under tsx, or from dist/tools/crash/). */
const ROOT = [path.resolve(HERE, '../..'), path.resolve(HERE, '../../..')].find((d) => existsSync(path.join(d, 'bin', 'drain.js')))!;

export interface DrainKillOptions {
  /** Kills (each followed by a restart). */
  rounds: number;
  seed: number;
  /** SOW keys (default 300): the snapshot sends one record per live key. */
  keys?: number;
  /** Publisher ops per second (default 150); drain must be clearly faster (it fsyncs twice per message). */
  rate?: number;
  /** log.max_count of the queue (default 300). */
  maxCount?: number;
  /** Share of publisher op groups sent as a transaction of 2-5 ops (default 0.3). */
  txShare?: number;
  /** Also SIGSTOP drain in catch-up until it has fallen off, in some rounds (default true). */
  stalls?: boolean;
  /** A running broker; otherwise one is started on a temporary data directory. */
  url?: string;
  queue?: string;
  /** Fail when a phase was never hit (default: when rounds >= 8). */
  requireCoverage?: boolean;
  log?: (line: string) => void;
  /** Also log where each kill was aimed and each stall. */
  verbose?: boolean;
  /** Test hook: change the messages a run applies before they are folded (run 0: the final drain), to show the checks fail. */
  tamper?: (run: number, applied: Printed[]) => Printed[];
}

export type Phase = 'connecting' | 'snapshot' | 'catchup' | 'online';
type Target = 'snapshot' | 'catchup' | 'window' | 'online';
type Mode = 'ONLINE_CONSUMPTION' | 'BOOTSTRAP_SNAPSHOT' | 'BOOTSTRAP_CATCHUP';

export interface Violation { check: string; detail: string }

export interface DrainKillResult {
  kills: number;
  /** Where the kills landed: the mode of the checkpoint in the file afterwards ('connecting': nothing applied in that run). */
  landed: Record<Phase, number>;
  /** Kills whose checkpoint was mid-window (windowOffset >= 0). */
  midWindow: number;
  /** Restarts from an online mid-window checkpoint that resumed in that window (not a bootstrap). */
  midWindowResumes: number;
  /** Fresh bootstraps (group_begin without snapshot_offset), by the consumer's mode before it; `inStream`: inside a running link. */
  fresh: { initial: number; online: number; snapshot: number; catchup: number; inStream: number };
  /** Restarts that resumed a snapshot (group_begin with snapshot_offset). */
  snapshotResumes: number;
  /** Fresh bootstraps that were incremental (since > 0), and the tombstones their snapshots carried. */
  incremental: number;
  tombstones: number;
  stalls: number;
  events: number;
  rows: number;
  /** Snapshot records whose SCN is above the bootstrap start S (semantics.md 8 says they are skipped; harmless: catch-up replays them). */
  rowsAfterStart: number;
  publisherOps: number;
  finalRecords: number;
  headScn: number;
  violations: Violation[];
  summary: string;
}

/** One message drain printed (`-p json`), with its checkpoint normalised. */
export interface Printed {
  cmd: string;
  scn?: number;
  key?: string;
  body: unknown;
  cp?: Cp;
  /** Canonical text of the checkpoint, to compare with the file. */
  cpText: string;
}

interface Cp {
  consumption_mode: Mode;
  windowScn: number;
  prevScn: number;
  windowOffset: number;
  bootstrap_since_scn?: number;
  bootstrap_start_scn?: number;
  bootstrap_target_scn?: number;
  snapshot_offset?: string;
  catchup_offset?: number;
  tsNsecs?: string;
}

const num = (v: unknown): number | undefined => (v === undefined || v === null ? undefined : Number(v));

/**
 * A checkpoint as printed by drain (toPlain: an 8-byte long rhea could not turn into a number
 * is a Buffer, printed as its UTF-8 text or {binary}) or as drain wrote it to the file (such a
 * long as a decimal string).
 */
function normCp(v: any, from: 'printed' | 'file'): Cp | undefined {
  if (!v || typeof v !== 'object') return undefined;
  const cp: Cp = { consumption_mode: v.consumption_mode, windowScn: Number(v.windowScn), prevScn: Number(v.prevScn), windowOffset: Number(v.windowOffset) };
  for (const k of ['bootstrap_since_scn', 'bootstrap_start_scn', 'bootstrap_target_scn', 'catchup_offset'] as const) if (v[k] !== undefined && v[k] !== null) cp[k] = Number(v[k]);
  if (v.snapshot_offset !== undefined && v.snapshot_offset !== null) cp.snapshot_offset = String(v.snapshot_offset);
  const ts = v.tsNsecs;
  if (ts !== undefined && ts !== null) {
    if (typeof ts === 'number') cp.tsNsecs = String(ts);
    else if (typeof ts === 'object' && typeof ts.binary === 'string') cp.tsNsecs = Buffer.from(ts.binary, 'base64').readBigInt64BE(0).toString();
    else if (typeof ts === 'string' && from === 'file') cp.tsNsecs = ts;
    else if (typeof ts === 'string') { const b = Buffer.from(ts, 'utf8'); cp.tsNsecs = b.length === 8 ? b.readBigInt64BE(0).toString() : ts; }
  }
  return cp;
}

const cpText = (cp: Cp | undefined) => (cp ? JSON.stringify([cp.consumption_mode, cp.windowScn, cp.prevScn, cp.windowOffset, cp.bootstrap_since_scn, cp.bootstrap_start_scn, cp.bootstrap_target_scn, cp.snapshot_offset, cp.catchup_offset, cp.tsNsecs]) : 'none');

function jsonOf(body: unknown): unknown {
  if (typeof body === 'string') { try { return JSON.parse(body); } catch { return body; } }
  return body;
}

/** Parses one line of `drain -p json`. */
export function parsePrinted(line: string): Printed {
  const m = JSON.parse(line);
  const a = m.annotations ?? {};
  const cp = normCp(a['x-opt-tm-checkpoint'], 'printed');
  return { cmd: String(a['x-opt-tm-cmd'] ?? ''), scn: num(a['x-opt-tm-scn']), key: a['x-opt-tm-key'] === undefined ? undefined : String(a['x-opt-tm-key']), body: jsonOf(m.body), cp, cpText: cpText(cp) };
}

/** Where a checkpoint resumes, as the broker decides whether it fell off (lib/ext/sow checkpointPlan). */
function positionOf(cp: Cp): number {
  if (cp.consumption_mode === 'BOOTSTRAP_SNAPSHOT') return cp.bootstrap_start_scn ?? 0;
  if (cp.consumption_mode === 'BOOTSTRAP_CATCHUP') return cp.catchup_offset ?? cp.bootstrap_start_scn ?? 0;
  return cp.windowOffset === -1 ? cp.windowScn : Math.max(0, cp.prevScn);
}

const phaseOf = (cp: Cp): Phase => (cp.consumption_mode === 'BOOTSTRAP_SNAPSHOT' ? 'snapshot' : cp.consumption_mode === 'BOOTSTRAP_CATCHUP' ? 'catchup' : 'online');

/** A consumer that persists its state and its checkpoint together, after every message. */
export class Consumer {
  /** key → record (SCN of its version, JSON body). */
  readonly state = new Map<string, { scn: number; body: unknown }>();
  mode: 'none' | 'snapshot' | 'catchup' | 'online' = 'none';
  /** The bootstrap being applied: start S, since (0: full), last key applied, catch-up target T. */
  snapS?: number;
  since?: number;
  lastKey?: string;
  target?: number;
  /** Last applied event SCN (S after group_end). */
  pos = -1;
  /** The last fully consumed window, and the open one. */
  prevW = -1;
  win?: { W: number; k: number };
  /** The persisted checkpoint (the file's). */
  persisted: Cp;
  readonly violations: Violation[] = [];
  readonly stats = { events: 0, rows: 0, rowsAfterStart: 0, fresh: { initial: 0, online: 0, snapshot: 0, catchup: 0, inStream: 0 }, snapshotResumes: 0, incremental: 0, tombstones: 0 };

  constructor(initial: Cp) { this.persisted = initial; }

  #bad(check: string, where: string, detail: string): void { this.violations.push({ check, detail: `${where}: ${detail}` }); }

  /** Folds one applied message; `where` names it (run, line) for the reports. */
  apply(m: Printed, where: string, firstOfRun: boolean): void {
    const cp = m.cp;
    if (!cp) { this.#bad('checkpoint', where, `${m.cmd || 'message'} without x-opt-tm-checkpoint`); return; }
    switch (m.cmd) {
      case 'group_begin': this.#groupBegin(m, cp, where, firstOfRun); break;
      case 'sow': this.#row(m, cp, where); break;
      case 'group_end': this.#groupEnd(m, cp, where); break;
      case 'delete': if (this.mode === 'snapshot') this.#row(m, cp, where); else this.#event(m, cp, where); break;
      case 'publish': this.#event(m, cp, where); break;
      case 'completed': this.#completed(m, cp, where); break;
      default: this.#bad('unexpected', where, `message with x-opt-tm-cmd ${JSON.stringify(m.cmd)} on a checkpoint link`);
    }
    this.persisted = cp;
  }

  #groupBegin(m: Printed, cp: Cp, where: string, firstOfRun: boolean): void {
    if (cp.consumption_mode !== 'BOOTSTRAP_SNAPSHOT' || cp.bootstrap_start_scn === undefined) { this.#bad('checkpoint', where, `group_begin with checkpoint ${show(cp)}`); return; }
    const S = cp.bootstrap_start_scn;
    if (cp.windowScn !== S || cp.prevScn !== S || cp.windowOffset !== -1) this.#bad('checkpoint', where, `group_begin checkpoint window fields ${cp.windowScn}/${cp.prevScn}/${cp.windowOffset}, expected ${S}/${S}/-1`);
    if (cp.snapshot_offset === undefined) {
      // A fresh bootstrap: a full one (since 0) replaces whatever the consumer held; an
      // incremental one brings what changed from `since` on, which must be right after what
      // the consumer applied (semantics.md 8).
      const from = this.mode;
      const since = cp.bootstrap_since_scn ?? 0;
      if (since > 0) {
        const had = from === 'online' ? this.prevW : from === 'catchup' ? this.pos : from === 'snapshot' ? (this.since ?? 0) - 1 : -1;
        // (earlier is safe: the changes are sent again, idempotently; later would lose some)
        if (since > had + 1 || had < 0) this.#bad('since', where, `incremental bootstrap since SCN ${since}, but the consumer (in ${from}) holds the state after SCN ${had}`);
        this.stats.incremental++;
      }
      if (from === 'snapshot' && this.lastKey === undefined && S === this.snapS) {
        // The same bootstrap again: the consumer had applied its group_begin and no record.
        this.stats.snapshotResumes++;
      } else {
        if (from === 'none') this.stats.fresh.initial++;
        else this.stats.fresh[from]++;
        if (!firstOfRun) this.stats.fresh.inStream++;
      }
      if (since === 0) this.state.clear();
      this.since = since;
      this.mode = 'snapshot';
      this.snapS = S; this.lastKey = undefined; this.target = undefined;
      this.win = undefined; this.prevW = S; this.pos = -1;
      return;
    }
    // Resuming a snapshot: the same bootstrap, right after the last key applied.
    this.stats.snapshotResumes++;
    if (this.mode !== 'snapshot') this.#bad('resume', where, `group_begin resumes a snapshot after ${JSON.stringify(cp.snapshot_offset)} but the consumer is in ${this.mode}`);
    else if (S !== this.snapS || cp.snapshot_offset !== this.lastKey) this.#bad('resume', where, `group_begin resumes bootstrap S=${S} after ${JSON.stringify(cp.snapshot_offset)}; the consumer applied S=${this.snapS} up to ${JSON.stringify(this.lastKey)}`);
  }

  #row(m: Printed, cp: Cp, where: string): void {
    if (this.mode !== 'snapshot') { this.#bad('phase', where, `sow record ${m.key} outside a snapshot (consumer in ${this.mode})`); return; }
    const key = m.key ?? '';
    if (cp.consumption_mode !== 'BOOTSTRAP_SNAPSHOT' || cp.bootstrap_start_scn !== this.snapS || cp.snapshot_offset !== key) this.#bad('checkpoint', where, `sow record ${key}: checkpoint ${show(cp)}, expected BOOTSTRAP_SNAPSHOT S=${this.snapS} snapshot_offset=${key}`);
    if (this.lastKey !== undefined && !(key > this.lastKey)) this.#bad(key === this.lastKey ? 'duplicate' : 'order', where, `snapshot record ${key} after ${this.lastKey}`);
    if (m.scn === undefined) this.#bad('checkpoint', where, `sow record ${key} without x-opt-tm-scn`);
    else if (m.scn > (this.snapS ?? Infinity)) { this.stats.rowsAfterStart++; this.#bad('snapshot-scn', where, `snapshot record ${key} has SCN ${m.scn}, above the bootstrap start ${this.snapS}`); }
    else if (m.scn < (this.since ?? 0)) this.#bad('snapshot-scn', where, `incremental snapshot record ${key} has SCN ${m.scn}, before its since ${this.since}`);
    if ((cp.bootstrap_since_scn ?? 0) !== (this.since ?? 0)) this.#bad('checkpoint', where, `snapshot row ${key}: bootstrap_since_scn ${cp.bootstrap_since_scn}, expected ${this.since}`);
    if (m.cmd === 'delete') { this.state.delete(key); this.stats.tombstones++; }
    else this.state.set(key, { scn: m.scn ?? -1, body: m.body });
    this.lastKey = key;
    this.stats.rows++;
  }

  #groupEnd(m: Printed, cp: Cp, where: string): void {
    if (this.mode !== 'snapshot') { this.#bad('phase', where, `group_end outside a snapshot (consumer in ${this.mode})`); return; }
    const S = this.snapS!;
    if (cp.consumption_mode !== 'BOOTSTRAP_CATCHUP' || cp.bootstrap_start_scn !== S || cp.catchup_offset !== S || cp.bootstrap_target_scn === undefined || cp.bootstrap_target_scn < S
      || cp.windowScn !== S || cp.prevScn !== S || cp.windowOffset !== -1) {
      this.#bad('checkpoint', where, `group_end checkpoint ${show(cp)}, expected BOOTSTRAP_CATCHUP S=${S} catchup_offset=${S} target >= S`);
      return;
    }
    this.mode = 'catchup';
    this.target = cp.bootstrap_target_scn;
    this.pos = S;
    this.prevW = S;
    this.win = undefined;
    void m;
  }

  #event(m: Printed, cp: Cp, where: string): void {
    if (this.mode !== 'catchup' && this.mode !== 'online') { this.#bad('phase', where, `${m.cmd} scn ${m.scn} while the consumer is in ${this.mode}`); return; }
    const scn = m.scn;
    if (scn === undefined) { this.#bad('checkpoint', where, `${m.cmd} without x-opt-tm-scn`); return; }
    if (scn !== this.pos + 1) this.#bad(scn <= this.pos ? 'duplicate' : 'gap', where, `${m.cmd} ${m.key} scn ${scn} applied after scn ${this.pos}${scn > this.pos ? ` (${scn - this.pos - 1} missing)` : ''}`);
    // The checkpoint after this event.
    const catchingUp = this.mode === 'catchup' && this.target !== undefined && scn < this.target;
    if (catchingUp) {
      if (cp.consumption_mode !== 'BOOTSTRAP_CATCHUP' || cp.catchup_offset !== scn || cp.bootstrap_target_scn !== this.target || cp.bootstrap_start_scn !== this.snapS) this.#bad('checkpoint', where, `catch-up event scn ${scn}: checkpoint ${show(cp)}, expected BOOTSTRAP_CATCHUP catchup_offset=${scn} target=${this.target} S=${this.snapS}`);
    } else if (cp.consumption_mode !== 'ONLINE_CONSUMPTION') {
      this.#bad('checkpoint', where, `event scn ${scn} (target ${this.target ?? '-'}): checkpoint mode ${cp.consumption_mode}, expected ONLINE_CONSUMPTION`);
    }
    this.#window(scn, cp, where);
    if (m.cmd === 'delete') this.state.delete(m.key ?? '');
    else this.state.set(m.key ?? '', { scn, body: m.body });
    this.pos = Math.max(this.pos, scn);
    if (!catchingUp) this.mode = 'online';
    this.stats.events++;
  }

  /** windowScn / prevScn / windowOffset after event `scn` (checkpoint.ts WindowTracker, semantics.md 8). */
  #window(scn: number, cp: Cp, where: string): void {
    if (cp.windowOffset === -1) {
      if (cp.windowScn !== scn || cp.prevScn !== scn) this.#bad('window', where, `event scn ${scn} ends a window but the checkpoint says windowScn ${cp.windowScn} prevScn ${cp.prevScn}`);
      if (this.win && this.win.W !== scn) this.#bad('window', where, `window ${this.win.W} was open (${this.win.k} consumed) but event scn ${scn} closed window ${cp.windowScn}`);
      this.win = undefined;
      this.prevW = scn;
      return;
    }
    const k = this.win ? this.win.k + 1 : 1;
    if (!(cp.windowScn > scn)) this.#bad('window', where, `event scn ${scn} mid-window but windowScn ${cp.windowScn} is not after it`);
    if (this.win && cp.windowScn !== this.win.W) this.#bad('window', where, `event scn ${scn} in window ${cp.windowScn} while window ${this.win.W} was open`);
    if (cp.windowOffset !== k) this.#bad('window', where, `event scn ${scn}: windowOffset ${cp.windowOffset}, expected ${k}`);
    if (cp.prevScn !== this.prevW) this.#bad('window', where, `event scn ${scn}: prevScn ${cp.prevScn}, expected the last whole window ${this.prevW}`);
    this.win = { W: cp.windowScn, k };
  }

  #completed(m: Printed, cp: Cp, where: string): void {
    if (this.mode !== 'catchup' && this.mode !== 'online') { this.#bad('phase', where, `completed while the consumer is in ${this.mode}`); return; }
    if (cp.consumption_mode !== 'ONLINE_CONSUMPTION' || cp.windowOffset !== -1 || cp.windowScn !== this.pos || cp.prevScn !== this.pos) this.#bad('checkpoint', where, `completed at applied scn ${this.pos}: checkpoint ${show(cp)}`);
    if (m.scn !== this.pos) this.#bad('checkpoint', where, `completed carries scn ${m.scn}, the consumer applied up to ${this.pos}`);
    if (this.target !== undefined && this.pos < this.target) this.#bad('phase', where, `completed at scn ${this.pos} before the catch-up target ${this.target}`);
    this.mode = 'online';
  }
}

// ---------------------------------------------------------------------------------------------
// The broker, the queue, the publisher


function openConn(url: string): Promise<any> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const c = r.create_container({ id: 'drain-kill-' + Math.random().toString(36).slice(2) });
    const conn = c.connect({ host: u.hostname, port: Number(u.port), reconnect: false });
    conn.once('connection_open', () => resolve(conn));
    conn.once('disconnected', (ctx: any) => reject(new Error('connect failed: ' + (ctx?.error?.message ?? 'disconnected'))));
    conn.on('error', () => { /* reported through the outcomes */ });
  });
}

type Obj = Record<string, unknown>;

/** The publisher: ops at a steady rate, some in transactions; its own model of the SOW. */
class Publisher {
  readonly expected = new Map<string, Obj>();
  readonly ver = new Map<string, number>();
  readonly problems: string[] = [];
  ops = 0;
  txns = 0;
  #stop = false;
  #unsettled = 0;
  #conn: any;
  #sender: any;
  #coordinator: any;
  #txnOf = new Map<number, Buffer>();
  #loop?: Promise<void>;

  constructor(private url: string, private queue: string, private nodeProps: Obj, private keys: string[], private rand: () => number, private rate: number, private txShare: number) {}

  async open(): Promise<void> {
    this.#conn = await openConn(this.url);
    this.#sender = this.#conn.open_sender({ target: { address: this.queue, durable: 2, capabilities: ['create-on-demand'], dynamic_node_properties: this.nodeProps }, autosettle: true });
    this.#sender.on('accepted', (ctx: any) => { if (ctx.delivery.__plain) this.#unsettled--; });
    for (const o of ['rejected', 'released', 'modified']) {
      this.#sender.on(o, (ctx: any) => {
        if (ctx.delivery.__plain) this.#unsettled--;
        this.problems.push(`op ${ctx.delivery.__what ?? '?'}: ${o} ${JSON.stringify(ctx.delivery.remote_state?.error?.description ?? '')}`);
      });
    }
    await attached(this.#sender, this.#conn, 'sendable');
    if (this.txShare > 0) {
      this.#coordinator = openCoordinator(this.#conn, `drain-kill-txn-${process.pid}`);
      await attached(this.#coordinator, this.#conn, 'sendable');
      markTransactionalTransfers(this.#sender.session, this.#txnOf);
    }
  }

  /** One op on a random key: the body to send and the record it leaves. */
  #op(): { key: string; op: 'publish' | 'delta' | 'delete'; body: Obj } {
    const key = this.keys[Math.floor(this.rand() * this.keys.length)];
    const ver = (this.ver.get(key) ?? 0) + 1;
    this.ver.set(key, ver);
    const x = this.rand();
    const op = x < 0.2 ? 'delete' : x < 0.5 ? 'delta' : 'publish';
    const prev = this.expected.get(key);
    let body: Obj;
    if (op === 'publish') { body = { id: key, ver, p: ver }; this.expected.set(key, body); }
    else if (op === 'delta') { body = { id: key, ver, ['d' + (ver % 3)]: ver }; this.expected.set(key, { ...(prev ?? {}), ...body }); }
    else { body = { id: key, ver }; this.expected.delete(key); }
    this.ops++;
    return { key, op, body };
  }

  #send(o: { key: string; op: string; body: Obj }, txn?: Buffer): any {
    const d = this.#sender.send({ durable: true, message_annotations: { 'x-opt-tm-op': o.op }, body: JSON.stringify(o.body) });
    d.__what = `${o.op} ${o.key} ver ${o.body.ver}`;
    if (txn) this.#txnOf.set(d.id, txn);
    else { d.__plain = true; this.#unsettled++; }
    return d;
  }

  /** One record per key (publish), all accepted. */
  async load(): Promise<void> {
    for (const key of this.keys) {
      this.ver.set(key, 1);
      const body = { id: key, ver: 1, p: 1 };
      this.expected.set(key, body);
      if (!(await sendable(this.#sender, this.#conn))) throw new Error('publisher: disconnected during the load');
      this.#send({ key, op: 'publish', body });
      this.ops++;
    }
    await this.#settledAll(20000);
  }

  async #settledAll(ms: number): Promise<void> {
    const until = Date.now() + ms;
    while (this.#unsettled > 0 && Date.now() < until && this.#conn.is_open()) await sleep(5);
    if (this.#unsettled > 0) throw new Error(`publisher: ${this.#unsettled} ops not settled within ${ms} ms`);
  }

  async #transaction(n: number): Promise<void> {
    await this.#settledAll(10000); // the model's order is the send order: plain ops first
    if (!(await sendable(this.#coordinator, this.#conn))) throw new Error('publisher: disconnected');
    const dd = await settled(this.#coordinator, this.#conn, this.#coordinator.send(controlBody(0x31, [null]), undefined, 0));
    const id = dd?.remote_state?.txn_id;
    if (!Buffer.isBuffer(id)) throw new Error('publisher: declare failed ' + JSON.stringify(dd?.remote_state ?? null));
    const what: string[] = [];
    for (let i = 0; i < n; i++) {
      if (!(await sendable(this.#sender, this.#conn))) throw new Error('publisher: disconnected');
      const o = this.#op();
      what.push(`${o.op} ${o.key} ver ${o.body.ver}`);
      this.#send(o, id);
    }
    const dis = await settled(this.#coordinator, this.#conn, this.#coordinator.send(controlBody(0x32, [r.types.wrap_binary(id), false]), undefined, 0));
    const state = dis?.remote_state?.constructor?.composite_type;
    if (state !== 'accepted') this.problems.push(`transaction [${what.join(', ')}]: discharge ${state ?? 'unanswered'} ${JSON.stringify(dis?.remote_state?.error?.description ?? '')}`);
    this.txns++;
  }

  start(): void {
    this.#loop = (async () => {
      const t0 = Date.now();
      let sent = 0;
      try {
        while (!this.#stop) {
          const due = Math.floor(((Date.now() - t0) * this.rate) / 1000);
          if (sent >= due) { await sleep(5); continue; }
          if (this.txShare > 0 && this.rand() < this.txShare) {
            const n = 2 + Math.floor(this.rand() * 4);
            await this.#transaction(n);
            sent += n;
          } else {
            if (!(await sendable(this.#sender, this.#conn))) throw new Error('publisher: disconnected');
            this.#send(this.#op());
            sent++;
          }
          // Keep a bounded number in flight.
          while (this.#unsettled > 200 && !this.#stop) await sleep(2);
        }
        await this.#settledAll(20000);
      } catch (e) {
        this.problems.push((e as Error).message);
      }
    })();
  }

  async stop(): Promise<void> {
    this.#stop = true;
    await this.#loop;
    await closeConnection(this.#conn);
  }
}

// ---------------------------------------------------------------------------------------------
// drain as a child process

interface DrainRun {
  proc: ChildProcess;
  /** Complete lines printed so far, parsed. */
  lines: Printed[];
  /** Complete lines that were not JSON (a broken write). */
  bad: string[];
  stderr(): string;
  /** Resolves on exit; stdout fully read. */
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  onLine(f: (m: Printed, i: number) => void): void;
  exited(): boolean;
}

function startDrain(url: string, cpFile: string, queue: string, extra: string[] = []): DrainRun {
  const proc = spawn(process.execPath, [path.join(ROOT, 'bin/drain.js'), '-b', url, '-p', 'json', '--checkpoint', cpFile, ...extra, queue], { stdio: ['ignore', 'pipe', 'pipe'], cwd: ROOT });
  let buf = '';
  let err = '';
  let exited = false;
  const lines: Printed[] = [];
  const bad: string[] = [];
  const listeners: Array<(m: Printed, i: number) => void> = [];
  proc.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (!line) continue;
      let m: Printed;
      try { m = parsePrinted(line); } catch { bad.push(line.slice(0, 200)); continue; }
      lines.push(m);
      for (const l of listeners) l(m, lines.length - 1);
    }
  });
  proc.stderr!.on('data', (d: Buffer) => { err += d.toString(); });
  // A partial last line (the kill cut a write) stays in `buf`: its checkpoint was never written.
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) => proc.once('close', (code, signal) => { exited = true; res({ code, signal }); }));
  return { proc, lines, bad, stderr: () => err, done, onLine: (f) => listeners.push(f), exited: () => exited };
}

// ---------------------------------------------------------------------------------------------

export async function runDrainKill(opts: DrainKillOptions): Promise<DrainKillResult> {
  const log = opts.log ?? ((l: string) => process.stdout.write(l + '\n'));
  const rand = prng(opts.seed);
  const K = opts.keys ?? 300;
  const rate = opts.rate ?? 150;
  const maxCount = opts.maxCount ?? 300;
  const txShare = opts.txShare ?? 0.3;
  const stallsOn = opts.stalls ?? true;
  const queue = opts.queue ?? `drainkill.${opts.seed}.${Date.now().toString(36)}`;
  const requireCoverage = opts.requireCoverage ?? opts.rounds >= 8;
  const work = mkdtempSync(path.join(tmpdir(), 'tidemark-drain-kill-'));
  const cpFile = path.join(work, 'checkpoint.json');
  const violations: Violation[] = [];
  const landed: Record<Phase, number> = { connecting: 0, snapshot: 0, catchup: 0, online: 0 };
  let midWindow = 0, midWindowResumes = 0, stalls = 0, kills = 0, headScn = -1, finalRecords = 0;
  let broker: BrokerChild | undefined;
  let mgmtConn: Connected | undefined;
  let publisher: Publisher | undefined;
  const running: DrainRun[] = [];
  // A fresh consumer (windowScn = 0) bootstraps: snapshot, catch-up, online (semantics.md 8).
  const initial: Cp = { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 0, prevScn: 0, windowOffset: -1 };
  const consumer = new Consumer(initial);
  try {
    broker = opts.url ? undefined : await startBroker(path.join(work, 'data'));
    const url = opts.url ?? broker!.url;
    const keys = Array.from({ length: K }, (_, i) => `k${String(i).padStart(5, '0')}`);
    const nodeProps = { 'sow.key': '/id', 'sow.history.window': '1d', 'log.max_count': maxCount };
    publisher = new Publisher(url, queue, nodeProps, keys, prng(Math.floor(rand() * 2 ** 32)), rate, txShare);
    await publisher.open();
    await publisher.load();
    mgmtConn = await toolConnect({ broker: url });
    const mgmt = await ManagementClient.open(mgmtConn);
    const oldestScn = async (): Promise<{ oldest: number; head: number }> => {
      const b = (await mgmt.call('READ', queue)).body ?? {};
      return { oldest: Number(b.scn_oldest ?? 0), head: Number(b.scn_head ?? 0) };
    };
    /** Waits until the log no longer holds the event after `pos` (bounded). */
    const waitFallOff = async (pos: number, what: string): Promise<boolean> => {
      const until = Date.now() + 30000;
      while (Date.now() < until) {
        if ((await oldestScn()).oldest > pos + 1) return true;
        await sleep(100);
      }
      violations.push({ check: 'harness', detail: `${what}: the log still held scn ${pos + 1} after 30 s (is the publisher running?)` });
      return false;
    };
    writeFileSync(cpFile, JSON.stringify({ [queue]: initial }, null, 2) + '\n');
    publisher.start();

    const targets: Target[] = [];
    let onlineMidWindow = 0;
    const nextTarget = (round: number): Target => {
      // After a first block of all four, aim again at whatever no kill has landed in yet.
      if (round > 5) {
        const missing: Target | undefined = txShare > 0 && !onlineMidWindow ? 'window' : !landed.catchup ? 'catchup' : !landed.snapshot ? 'snapshot' : !landed.online ? 'online' : undefined;
        if (missing) return missing;
      }
      if (!targets.length) {
        const block: Target[] = ['snapshot', 'catchup', 'window', 'online'];
        for (let i = block.length - 1; i > 0; i--) { const j = Math.floor(rand() * (i + 1)); [block[i], block[j]] = [block[j], block[i]]; }
        targets.push(...block);
      }
      return targets.shift()!;
    };
    let catchupFallOffs = 0;
    let stallDone = false;

    for (let round = 1; round <= opts.rounds; round++) {
      const target: Target = round === 1 ? 'snapshot' : nextTarget(round);
      const before = consumer.persisted;
      const beforePhase = phaseOf(before);
      // How long to stay down: long enough to fall off the log when a bootstrap is wanted.
      let fallOff = false;
      if (round > 1) {
        if (target === 'snapshot') fallOff = !(beforePhase === 'snapshot' && rand() < 0.5);
        else if (target === 'catchup') fallOff = beforePhase === 'online';
        // Falling off during catch-up: always the first time a kill lands there, then sometimes.
        if (beforePhase === 'catchup' && (catchupFallOffs === 0 || rand() < 0.3)) fallOff = true;
        // Resuming mid-window online (the broker skips the consumed events of the window): always
        // the first time a kill lands there, then mostly.
        if (beforePhase === 'online' && before.windowOffset >= 0 && (midWindowResumes === 0 || rand() < 0.7)) fallOff = false;
      }
      let fellOff = false;
      if (fallOff) {
        fellOff = await waitFallOff(positionOf(before), `round ${round}`);
        if (fellOff && beforePhase === 'catchup') catchupFallOffs++;
      } else if (round > 1) {
        // 'window': a backlog (not enough to fall off), so that the kill lands while drain streams.
        await sleep(target === 'window' ? 500 + rand() * 700 : rand() * 300);
      }
      const stall = stallsOn && target === 'catchup' && (!stallDone || rand() < 0.25);

      const run = startDrain(url, cpFile, queue, ['-f']);
      running.push(run);
      const started = Date.now();
      // The kill point: a random number of messages into the wanted phase, or a random time.
      const inPhase = { snapshot: Math.floor(rand() * K * 0.7), catchup: Math.floor(rand() * 8), window: Math.floor(rand() * 40), online: 200 + Math.floor(rand() * 1200) };
      const deadline = 2500 + rand() * 2500;
      await new Promise<void>((resolve) => {
        let seen: Record<string, number> = {};
        let onlineSince = 0;
        let stalling = false, stalled = false;
        let base = started;
        let awaitRebootstrap = false;
        let finished = false;
        const finish = (why = 'deadline') => {
          if (finished) return;
          finished = true; clearTimeout(timer); clearInterval(tick);
          if (opts.verbose) log(`  kill: ${why} after line ${run.lines.length} ${run.lines.at(-1)?.cmd} ${run.lines.at(-1)?.cpText}`);
          resolve();
        };
        const timer = setTimeout(finish, 15000 + deadline);
        const tick = setInterval(() => {
          if (run.exited()) { finish('exited'); return; }
          if (stalling) return;
          const now = Date.now();
          if (target === 'online' && onlineSince && now - onlineSince >= inPhase.online) finish('online');
          else if (run.lines.length && now - base >= deadline) finish();
        }, 10);
        run.onLine(async (m) => {
          if (finished || stalling || !m.cp) return;
          const ph = phaseOf(m.cp);
          seen[ph] = (seen[ph] ?? 0) + 1;
          if (ph === 'online' && !onlineSince) onlineSince = Date.now();
          if (m.cmd === 'group_begin' && m.cp.snapshot_offset === undefined) { seen = { snapshot: 1 }; onlineSince = 0; awaitRebootstrap = false; }
          if (stall && !stalled && ph === 'catchup' && m.cmd !== 'group_end') {
            // SIGSTOP in catch-up until the log has moved past everything the broker may have
            // sent ahead (credit up to 100), then SIGCONT: the link must bootstrap again.
            stalling = stalled = true;
            stallDone = true;
            stalls++;
            run.proc.kill('SIGSTOP');
            await sleep(50);
            const last = run.lines[run.lines.length - 1];
            const pos = last?.cp ? positionOf(last.cp) : positionOf(m.cp);
            await waitFallOff(pos + 101, `round ${round} stall`);
            if (opts.verbose) log(`  stall: pos=${pos} lines=${run.lines.length} log=${JSON.stringify(await oldestScn())}`);
            if (!run.exited()) run.proc.kill('SIGCONT');
            base = Date.now();
            awaitRebootstrap = true; // the buffered messages first, then the link must bootstrap again
            stalling = false;
            seen = {};
            return;
          }
          if (awaitRebootstrap) return;
          if (target === 'snapshot' && ph === 'snapshot' && seen.snapshot > inPhase.snapshot) finish('snapshot');
          else if (target === 'catchup' && ph === 'catchup' && seen.catchup > inPhase.catchup) finish('catchup');
          // drain prints a message, then writes its checkpoint: a kill right after a line is seen
          // usually leaves the previous message persisted, so aim after a mid-window one.
          else if (target === 'window' && ph === 'online' && (run.lines.at(-2)?.cp?.windowOffset ?? -1) >= 0 && (seen.online ?? 0) > inPhase.window) finish('window');
        });
      });
      if (run.exited()) violations.push({ check: 'drain', detail: `round ${round}: drain exited by itself: ${run.stderr().trim().slice(0, 500)}` });
      run.proc.kill('SIGKILL');
      await run.done;
      for (const b of run.bad) violations.push({ check: 'drain', detail: `round ${round}: a line drain printed is not JSON: ${b}` });
      kills++;

      // What the consumer persisted: the file's checkpoint, and the printed message it belongs to.
      const fileCp = normCp(JSON.parse(readFileSync(cpFile, 'utf8'))[queue], 'file');
      const fileText = cpText(fileCp);
      const printed = run.lines;
      let j = -1;
      for (let i = printed.length - 1; i >= 0; i--) if (printed[i].cpText === fileText) { j = i; break; }
      if (j === -1 && fileText !== cpText(before)) {
        violations.push({ check: 'checkpoint-file', detail: `round ${round}: the checkpoint file ${fileText} is neither the one before the run nor one of the ${printed.length} messages printed` });
      }
      if (printed.length - 1 - j > 1) violations.push({ check: 'checkpoint-file', detail: `round ${round}: drain printed ${printed.length - 1 - j} messages after the one whose checkpoint is in the file (at most one may be unpersisted)` });
      const applied = opts.tamper ? opts.tamper(round, printed.slice(0, j + 1)) : printed.slice(0, j + 1);
      const firstMsg = printed[0];
      if (beforePhase === 'online' && before.windowOffset >= 0 && applied.length && (applied[0].cmd === 'publish' || applied[0].cmd === 'delete')) midWindowResumes++;
      if (fellOff && firstMsg && !(firstMsg.cmd === 'group_begin' && firstMsg.cp?.snapshot_offset === undefined)) {
        violations.push({ check: 'falloff', detail: `round ${round}: restarted at ${cpText(before)} after the log dropped its position, but the first message was ${firstMsg.cmd} ${firstMsg.cpText}, not a fresh group_begin` });
      }
      applied.forEach((m, i) => consumer.apply(m, `round ${round} line ${i + 1}`, i === 0));
      const ph: Phase = applied.length === 0 ? 'connecting' : phaseOf(consumer.persisted);
      landed[ph]++;
      if (applied.length && consumer.persisted.windowOffset >= 0) { midWindow++; if (ph === 'online') onlineMidWindow++; }
      log(`round ${round}: target=${target}${fallOff ? ' (after fall-off)' : ''}${stall ? ' (stall)' : ''} printed=${printed.length} applied=${applied.length} landed=${ph}${applied.length && consumer.persisted.windowOffset >= 0 ? ' mid-window' : ''} at ${fileText} state=${consumer.state.size}`);
    }

    // The end: stop the publisher, let drain run to completion, compare with the SOW.
    await publisher.stop();
    for (const p of publisher.problems) violations.push({ check: 'publisher', detail: p });
    const last = startDrain(url, cpFile, queue, ['-t', '2']);
    running.push(last);
    const lastTimer = setTimeout(() => last.proc.kill('SIGKILL'), 60000);
    const res = await last.done;
    clearTimeout(lastTimer);
    if (res.code !== 0) violations.push({ check: 'drain', detail: `final drain exited ${res.code ?? res.signal}: ${last.stderr().trim().slice(0, 500)}` });
    for (const b of last.bad) violations.push({ check: 'drain', detail: `final drain: a line is not JSON: ${b}` });
    const lastApplied = opts.tamper ? opts.tamper(0, last.lines) : last.lines;
    lastApplied.forEach((m, i) => consumer.apply(m, `final drain line ${i + 1}`, i === 0));
    const fileCp = normCp(JSON.parse(readFileSync(cpFile, 'utf8'))[queue], 'file');
    if (cpText(fileCp) !== cpText(consumer.persisted)) violations.push({ check: 'checkpoint-file', detail: `after the final drain the file holds ${cpText(fileCp)}, the last message carried ${cpText(consumer.persisted)}` });

    const q = await sowQuery(url, queue);
    if (q.error) violations.push({ check: 'sow-query', detail: q.error });
    headScn = q.scn;
    finalRecords = q.records.size;
    const head = (await oldestScn()).head;
    if (head !== q.scn) violations.push({ check: 'sow-query', detail: `the sow query ended at scn ${q.scn}, $management says the head is ${head}` });
    if (consumer.pos !== head || consumer.mode !== 'online') violations.push({ check: 'final-position', detail: `the consumer applied up to scn ${consumer.pos} (${consumer.mode}); the head is ${head}` });
    for (const [key, rec] of q.records) {
      const mine = consumer.state.get(key);
      if (!mine) violations.push({ check: 'final-state', detail: `key ${key}: the SOW has scn ${rec.scn} ${show(rec.body)}, the consumer has no record` });
      else if (mine.scn !== rec.scn || !sameJson(mine.body, rec.body)) violations.push({ check: 'final-state', detail: `key ${key}: the SOW has scn ${rec.scn} ${show(rec.body)}, the consumer scn ${mine.scn} ${show(mine.body)}` });
    }
    for (const [key, mine] of consumer.state) if (!q.records.has(key)) violations.push({ check: 'final-state', detail: `key ${key}: the consumer has scn ${mine.scn} ${show(mine.body)}, the SOW has no record` });
    for (const key of keys) {
      const want = publisher.expected.get(key) ?? null;
      const got = q.records.get(key)?.body ?? null;
      if (!sameJson(want, got)) violations.push({ check: 'publisher-model', detail: `key ${key}: the publisher's ops leave ${show(want)}, the SOW has ${show(got)}` });
    }
    if (requireCoverage) {
      for (const p of ['snapshot', 'catchup', 'online'] as const) if (!landed[p]) violations.push({ check: 'coverage', detail: `no kill landed in ${p} over ${kills} kills` });
      if (txShare > 0 && !midWindow) violations.push({ check: 'coverage', detail: `no kill landed mid-window over ${kills} kills` });
      if (txShare > 0 && !midWindowResumes) violations.push({ check: 'coverage', detail: 'no restart resumed in the middle of a window' });
      if (!consumer.stats.fresh.catchup) violations.push({ check: 'coverage', detail: 'the consumer never fell off the log during catch-up' });
    }
  } finally {
    for (const d of running) if (!d.exited()) { try { d.proc.kill('SIGCONT'); d.proc.kill('SIGKILL'); } catch { /* gone */ } }
    if (publisher) { try { await publisher.stop(); } catch { /* already stopped */ } }
    if (mgmtConn) await mgmtConn.close();
    if (broker) {
      broker.proc.kill('SIGTERM');
      const code = await Promise.race([broker.exited, sleep(10000).then(() => 'timeout' as const)]);
      if (code === 'timeout') { broker.proc.kill('SIGKILL'); await broker.exited; }
    }
    rmSync(work, { recursive: true, force: true });
  }
  violations.push(...consumer.violations);
  const s = consumer.stats;
  const summary = `kills=${kills} snapshot=${landed.snapshot} catchup=${landed.catchup} online=${landed.online} connecting=${landed.connecting} mid-window=${midWindow} mid-window-resumes=${midWindowResumes}`
    + ` fresh-bootstraps=${s.fresh.initial + s.fresh.online + s.fresh.snapshot + s.fresh.catchup} (fell off: online=${s.fresh.online} snapshot=${s.fresh.snapshot} catchup=${s.fresh.catchup} in-stream=${s.fresh.inStream}) snapshot-resumes=${s.snapshotResumes} incremental=${s.incremental} tombstones=${s.tombstones} stalls=${stalls}`
    + ` events=${s.events} rows=${s.rows} rows-after-start=${s.rowsAfterStart} ops=${publisher?.ops ?? 0} txns=${publisher?.txns ?? 0} records=${finalRecords} head=${headScn} violations=${violations.length}`;
  for (const v of violations.slice(0, 30)) log(`  VIOLATION [${v.check}] ${v.detail}`);
  log(summary);
  return { kills, landed, midWindow, midWindowResumes, fresh: { ...s.fresh }, snapshotResumes: s.snapshotResumes, incremental: s.incremental, tombstones: s.tombstones, stalls, events: s.events, rows: s.rows, rowsAfterStart: s.rowsAfterStart, publisherOps: publisher?.ops ?? 0, finalRecords, headScn, violations, summary };
}

/** A `sow` query through `drain --sow -p json` (the tool a user would run): key → record, and the group_end SCN. */
async function sowQuery(url: string, queue: string): Promise<{ records: Map<string, { scn: number; body: unknown }>; scn: number; error?: string }> {
  const proc = spawn(process.execPath, [path.join(ROOT, 'bin/drain.js'), '-b', url, '-p', 'json', '-t', '0', '--sow', queue], { stdio: ['ignore', 'pipe', 'pipe'], cwd: ROOT });
  let out = '', err = '';
  proc.stdout!.on('data', (d: Buffer) => { out += d.toString(); });
  proc.stderr!.on('data', (d: Buffer) => { err += d.toString(); });
  const t = setTimeout(() => proc.kill('SIGKILL'), 30000);
  const code = await new Promise<number | null>((res) => proc.once('close', (c) => res(c)));
  clearTimeout(t);
  const records = new Map<string, { scn: number; body: unknown }>();
  let scn = -1;
  let ended = false;
  for (const line of out.split('\n')) {
    if (!line) continue;
    const m = parsePrinted(line);
    if (m.cmd === 'sow') records.set(m.key ?? '', { scn: m.scn ?? -1, body: m.body });
    if (m.cmd === 'group_end') { scn = m.scn ?? -1; ended = true; }
  }
  const error = code !== 0 ? `drain --sow exited ${code}: ${err.trim()}` : !ended ? 'drain --sow printed no group_end' : undefined;
  return { records, scn, error };
}

function parseArgs(argv: string[]): DrainKillOptions {
  const o: DrainKillOptions = { rounds: 20, seed: Date.now() % 1e9 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = () => { const x = argv[++i]; if (x === undefined) throw new Error(`${a} needs a value`); return x; };
    const int = (name: string, min: number) => { const n = Number(v()); if (!Number.isInteger(n) || n < min) throw new Error(`${name} must be an integer >= ${min}`); return n; };
    if (a === '--rounds') o.rounds = int(a, 1);
    else if (a === '--seed') o.seed = int(a, 0);
    else if (a === '--keys') o.keys = int(a, 1);
    else if (a === '--rate') o.rate = int(a, 1);
    else if (a === '--max-count') o.maxCount = int(a, 1);
    else if (a === '--tx') { o.txShare = Number(v()); if (!(o.txShare >= 0 && o.txShare <= 1)) throw new Error('--tx must be between 0 and 1'); }
    else if (a === '--url') o.url = v();
    else if (a === '--queue') o.queue = v();
    else if (a === '--no-stalls') o.stalls = false;
    else if (a === '--no-coverage') o.requireCoverage = false;
    else if (a === '--verbose') o.verbose = true;
    else if (a === '--help' || a === '-h') {
      process.stdout.write('drain-kill --rounds N --seed S [--keys 300] [--rate 150] [--max-count 300] [--tx 0.3] [--url URL] [--queue NAME] [--no-stalls] [--no-coverage] [--verbose]\n');
      process.exit(0);
    } else throw new Error(`unknown option ${a}`);
  }
  return o;
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  let opts: DrainKillOptions;
  try { opts = parseArgs(process.argv.slice(2)); } catch (e) { process.stderr.write(`drain-kill: ${(e as Error).message}\n`); process.exit(2); }
  process.stdout.write(`drain-kill seed=${opts.seed}\n`);
  try {
    const res = await runDrainKill(opts);
    process.exit(res.violations.length ? 1 : 0);
  } catch (e) {
    process.stderr.write(`drain-kill: ${(e as Error).stack ?? (e as Error).message}\n`);
    process.exit(2);
  }
}
