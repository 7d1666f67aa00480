/**
 * Consumer checkpoints (wire.md 6, semantics.md 8), after Databus's Checkpoint: the map a
 * consumer persists after each message and sends back to resume with no gap and no
 * duplicate at window granularity. A window is a transaction's events (contiguous SCNs,
 * identified by the last) or one plain publish.
 */
import { TidemarkError, Conditions } from '../../core/errors.js';
import { typed } from '../../codec/amqp.js';
import { wellFormed } from '../sow/sow-key.js';
import { encodeStringKeyedMap, encodeStringKeyedPairs, type EncodedValue } from '../../codec/message-bytes.js';

export const MODES = ['ONLINE_CONSUMPTION', 'BOOTSTRAP_SNAPSHOT', 'BOOTSTRAP_CATCHUP'] as const;
export type Mode = (typeof MODES)[number];

export interface Checkpoint {
  consumption_mode: Mode;
  /** SCN (last SCN) of the current window; -1 = flexible (start at the oldest retained event). */
  windowScn: number;
  /** SCN of the last fully consumed window; -1 = unknown. */
  prevScn: number;
  /** Events of window windowScn consumed; -1 = the whole window. */
  windowOffset: number;
  /** Broker time of the last consumed event, ns (a bigint: ns since 1970 pass 2^53). */
  tsNsecs?: bigint;
  bootstrap_since_scn?: number;
  bootstrap_start_scn?: number;
  bootstrap_target_scn?: number;
  /** Last SOW key sent in the snapshot phase (the snapshot resumes after it). */
  snapshot_offset?: string;
  /** Last SCN applied in the catch-up phase. */
  catchup_offset?: number;
}

const bad = (field: string, why: string) => new TidemarkError(Conditions.invalidField, `tidemark:checkpoint:map: ${field} ${why}`);

function unwrap(v: unknown): unknown { return v && typeof v === 'object' && 'value' in (v as any) && !Array.isArray(v) ? (v as any).value : v; }

function int(field: string, v: unknown, min: number, optional = false): number | undefined {
  v = unwrap(v);
  if (v === undefined || v === null) { if (optional) return undefined; throw bad(field, 'is missing'); }
  // rhea hands a long beyond 2^53 over as its 8 bytes.
  if (Buffer.isBuffer(v) && v.length === 8) v = v.readBigInt64BE(0);
  const n = typeof v === 'bigint' ? Number(v) : typeof v === 'string' && /^-?\d+$/.test(v) ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < min) throw bad(field, `must be an integer >= ${min}, got ${JSON.stringify(typeof v === 'bigint' ? v.toString() : v)}`);
  return n;
}

/** A long that may pass 2^53 (tsNsecs), exactly. */
function bigLong(field: string, v: unknown): bigint | undefined {
  v = unwrap(v);
  if (v === undefined || v === null) return undefined;
  let n: bigint | undefined;
  if (Buffer.isBuffer(v) && v.length === 8) n = v.readBigInt64BE(0); // rhea's form of a long beyond 2^53
  else if (typeof v === 'bigint') n = v;
  else if (typeof v === 'number' && Number.isInteger(v)) n = BigInt(v); // a client's double: as exact as it came
  else if (typeof v === 'string' && /^-?\d+$/.test(v)) n = BigInt(v);
  if (n === undefined || n < -1n) throw bad(field, `must be an integer >= -1, got ${JSON.stringify(typeof v === 'bigint' ? v.toString() : v)}`);
  return n;
}

/** Validates a received checkpoint (map or JSON text); errors name the field. */
export function parseCheckpoint(v: unknown): Checkpoint {
  if (typeof v === 'string') { try { v = JSON.parse(v); } catch { throw bad('value', 'must be a map or JSON text of one'); } }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw bad('value', 'must be a map');
  const m = v as Record<string, unknown>;
  const known = new Set(['consumption_mode', 'windowScn', 'prevScn', 'windowOffset', 'tsNsecs', 'bootstrap_since_scn', 'bootstrap_start_scn', 'bootstrap_target_scn', 'snapshot_offset', 'catchup_offset', 'bootstrap_snapshot_source_index', 'snapshot_source', 'catchup_source', 'bootstrap_start_tsnsecs']);
  for (const k of Object.keys(m)) if (!known.has(k)) throw bad(k, 'is not a checkpoint field');
  const mode = String(unwrap(m.consumption_mode) ?? 'ONLINE_CONSUMPTION') as Mode;
  if (!MODES.includes(mode)) throw bad('consumption_mode', `must be one of ${MODES.join(', ')}, got ${JSON.stringify(mode)}`);
  const cp: Checkpoint = {
    consumption_mode: mode,
    windowScn: int('windowScn', m.windowScn ?? -1, -1)!,
    prevScn: int('prevScn', m.prevScn ?? -1, -1)!,
    windowOffset: int('windowOffset', m.windowOffset ?? -1, -1)!,
    tsNsecs: bigLong('tsNsecs', m.tsNsecs),
    bootstrap_since_scn: int('bootstrap_since_scn', m.bootstrap_since_scn, 0, true),
    bootstrap_start_scn: int('bootstrap_start_scn', m.bootstrap_start_scn, 0, true),
    bootstrap_target_scn: int('bootstrap_target_scn', m.bootstrap_target_scn, -1, true),
    catchup_offset: int('catchup_offset', m.catchup_offset, -1, true),
  };
  const so = unwrap(m.snapshot_offset);
  if (so !== undefined && so !== null) {
    if (typeof so !== 'string') throw bad('snapshot_offset', 'must be a string (the last SOW key read)');
    // A SOW key is well-formed Unicode (sow-key.ts): an offset with a lone surrogate (possible in
    // JSON text) names no key, and as UTF-8 it would resume after U+FFFD instead.
    if (!wellFormed(so)) throw bad('snapshot_offset', 'is not well-formed Unicode, so it is no SOW key');
    cp.snapshot_offset = so;
  }
  if (mode === 'ONLINE_CONSUMPTION') {
    if (cp.windowScn === -1) {
      if (cp.tsNsecs !== undefined && cp.tsNsecs > 0) throw bad('tsNsecs', 'must be -1 or absent on a flexible checkpoint (windowScn = -1)');
    } else {
      if (cp.prevScn > cp.windowScn) throw bad('prevScn', `(${cp.prevScn}) must not exceed windowScn (${cp.windowScn})`);
      if (cp.windowOffset === -1 && cp.prevScn !== cp.windowScn && cp.prevScn !== -1) throw bad('prevScn', 'must equal windowScn when windowOffset = -1 (the window is fully consumed)');
    }
  } else {
    if (cp.bootstrap_start_scn === undefined) throw bad('bootstrap_start_scn', `is required in ${mode}`);
    if (mode === 'BOOTSTRAP_CATCHUP' && cp.bootstrap_target_scn === undefined) throw bad('bootstrap_target_scn', 'is required in BOOTSTRAP_CATCHUP');
  }
  return cp;
}

/** The fields in the order they go on the wire. */
const FIELDS: ReadonlyArray<keyof Checkpoint> = ['consumption_mode', 'windowScn', 'prevScn', 'windowOffset', 'tsNsecs', 'bootstrap_since_scn', 'bootstrap_start_scn', 'bootstrap_target_scn', 'catchup_offset', 'snapshot_offset'];

function longBytes(n: bigint): Buffer { const b = Buffer.allocUnsafe(8); b.writeBigInt64BE(n); return b; }

/** The checkpoint's fields as AMQP values (numbers as long, wire.md 6). */
function checkpointFields(cp: Checkpoint): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of FIELDS) {
    const v = cp[k];
    if (v === undefined) continue;
    out[k] = typeof v === 'number' ? typed.long(v) : typeof v === 'bigint' ? typed.long(longBytes(v)) : v;
  }
  return out;
}

/** `x-opt-tm-checkpoint` for a delivery built by rewriteMessage (every message of a checkpoint link). */
export function encodeCheckpoint(cp: Checkpoint): EncodedValue {
  return encodeStringKeyedMap(checkpointFields(cp));
}

/**
 * `x-opt-tm-checkpoint` of the records of a bootstrap snapshot from SCN `S`: only
 * snapshot_offset changes from one record to the next, so the rest is encoded once.
 */
export function snapshotCheckpointEncoder(S: number, since = 0, tsNsecs?: bigint): (lastKey: string) => EncodedValue {
  const head = encodeStringKeyedPairs(checkpointFields(snapshotCheckpoint(S, undefined, since, tsNsecs)));
  return (lastKey) => encodeStringKeyedMap({ snapshot_offset: lastKey }, head);
}

/**
 * The checkpoint after the snapshot record `lastKey` of a bootstrap from SCN `S` (undefined:
 * none yet); `since` > 0 for an incremental one (the records changed from `since` on);
 * `tsNsecs` the time the snapshot was taken.
 */
export function snapshotCheckpoint(S: number, lastKey: string | undefined, since = 0, tsNsecs?: bigint): Checkpoint {
  return { consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: S, prevScn: S, windowOffset: -1, tsNsecs, bootstrap_since_scn: since, bootstrap_start_scn: S, snapshot_offset: lastKey };
}

/** `x-opt-tm-checkpoint` for a message encoded by rhea (markers). */
export function checkpointMap(cp: Checkpoint): unknown {
  return typed.map(checkpointFields(cp));
}

/** Follows windows as events pass, to say what a consumer has consumed after each one. */
export class WindowTracker {
  /** Last fully consumed window. */
  prevScn: number;
  windowScn: number;
  windowOffset: number;
  /** Broker time of the last consumed event, ms (tsNsecs is made from it exactly). */
  #tsMs: number | undefined;

  constructor(start: { prevScn: number; windowScn?: number; windowOffset?: number }) {
    this.prevScn = start.prevScn;
    this.windowScn = start.windowScn ?? start.prevScn;
    this.windowOffset = start.windowOffset ?? -1;
  }

  /** Records that the event `scn` of window `w` (undefined = window of one) was consumed. */
  pass(scn: number, w: number | undefined, ts: number): void {
    const W = w ?? scn;
    if (W !== this.windowScn || this.windowOffset === -1) { this.windowScn = W; this.windowOffset = 0; }
    this.windowOffset++;
    if (scn >= W) { this.prevScn = W; this.windowOffset = -1; }
    this.#tsMs = ts;
  }

  /**
   * A bootstrap's state is the queue's as of its snapshot, taken at `ms`: its checkpoints carry
   * that time until an event gives its own, so they too tell this queue from an earlier one of
   * the name (checkpointPlan).
   */
  snapshotAt(ms: number): void { this.#tsMs = ms; }

  get tsNsecs(): bigint | undefined { return this.#tsMs === undefined ? undefined : BigInt(Math.round(this.#tsMs)) * 1_000_000n; }

  online(): Checkpoint {
    return { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: this.windowScn, prevScn: this.prevScn, windowOffset: this.windowOffset, tsNsecs: this.tsNsecs };
  }
}
