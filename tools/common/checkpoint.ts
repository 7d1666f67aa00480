/**
 * `drain --checkpoint FILE`: the checkpoint file (a JSON object, queue name → checkpoint),
 * written atomically, and the conversions between the checkpoint map on the wire (wire.md 6)
 * and JSON.
 *
 * Integer fields are longs on the wire. rhea decodes a long beyond 2^53 as its 8 bytes (a
 * Buffer), so such a value (in practice `tsNsecs`, nanoseconds since the epoch) becomes a
 * decimal string in JSON, in the file and in `drain -p json`; smaller ones are JSON numbers.
 * Going back, every integer field is sent as a long, exactly (a decimal string through
 * BigInt), and the string fields (`consumption_mode`, `snapshot_offset`: a SOW key, which
 * may well look like a number) always as strings.
 */
import { existsSync, readFileSync, readdirSync, openSync, writeSync, fsyncSync, closeSync, renameSync, unlinkSync } from 'node:fs';
import path from 'node:path';
import { ToolError, errorMessage } from './cli.js';
import { r } from './connection.js';
import { toPlain } from './format.js';

/** Checkpoint fields that are longs (wire.md 6). */
export const CHECKPOINT_INTEGER_FIELDS = ['windowScn', 'prevScn', 'windowOffset', 'tsNsecs', 'bootstrap_since_scn', 'bootstrap_start_scn', 'bootstrap_target_scn', 'catchup_offset'];
/** Checkpoint fields that are strings, whatever they look like. */
export const CHECKPOINT_STRING_FIELDS = ['consumption_mode', 'snapshot_offset'];

export const FLEXIBLE_CHECKPOINT = { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: -1, prevScn: -1, windowOffset: -1 };

const INTEGER_TEXT = /^-?\d+$/;
const LONG_MIN = -(2n ** 63n);
const LONG_MAX = 2n ** 63n - 1n;

/** A decoded long as a JSON value: a number when it is exact as one, else a decimal string. */
export function longPlain(v: unknown): unknown {
  let n: bigint | undefined;
  if (typeof v === 'bigint') n = v;
  else if ((Buffer.isBuffer(v) || v instanceof Uint8Array) && v.length === 8) n = Buffer.from(v).readBigInt64BE(0);
  else if (v && typeof v === 'object' && 'value' in (v as any) && !Array.isArray(v)) return longPlain((v as any).value);
  if (n === undefined) return toPlain(v);
  return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n.toString();
}

/** A received checkpoint (`x-opt-tm-checkpoint`) as JSON-safe data: integer fields as longPlain, the rest as toPlain. */
export function checkpointPlain(v: unknown): unknown {
  if (!v || typeof v !== 'object' || Array.isArray(v) || Buffer.isBuffer(v) || v instanceof Date) return toPlain(v);
  const entries = v instanceof Map ? [...v.entries()].map(([k, val]) => [String(k), val] as const) : Object.entries(v as Record<string, unknown>);
  const out: Record<string, unknown> = {};
  for (const [k, val] of entries) out[k] = CHECKPOINT_INTEGER_FIELDS.includes(k) ? longPlain(val) : toPlain(val);
  return out;
}

/** A long for the wire from a JSON number or decimal string, exact beyond 2^53. */
export function wrapLong(field: string, v: number | string): unknown {
  let n: bigint;
  try { n = BigInt(v); } catch { throw new ToolError(`--checkpoint: ${field} must be an integer, got ${JSON.stringify(v)}`); }
  if (n < LONG_MIN || n > LONG_MAX) throw new ToolError(`--checkpoint: ${field} does not fit a long: ${v}`);
  if (n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER)) return r.types.wrap_long(Number(n));
  const buf = Buffer.alloc(8);
  buf.writeBigInt64BE(n);
  return r.types.wrap_long(buf);
}

/** A checkpoint read from the file, typed for the wire: integer fields as longs, string fields as strings. */
export function typedCheckpoint(cp: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(cp)) {
    if (v === null || v === undefined) continue;
    if (CHECKPOINT_STRING_FIELDS.includes(k)) out[k] = String(v);
    else if (CHECKPOINT_INTEGER_FIELDS.includes(k)) {
      if ((typeof v === 'number' && Number.isInteger(v)) || (typeof v === 'string' && INTEGER_TEXT.test(v))) out[k] = wrapLong(k, v);
      else throw new ToolError(`--checkpoint: ${k} must be an integer, got ${JSON.stringify(v)}`);
    } else if (typeof v === 'number' && Number.isInteger(v)) out[k] = wrapLong(k, v);
    else out[k] = v; // a field this drain does not know: as it is (the broker names it if it objects)
  }
  return out;
}

export function readCheckpoints(file: string): Record<string, unknown> {
  // Where the file is to be written must exist before the first message is read, not after.
  const dir = path.dirname(path.resolve(file));
  if (!existsSync(dir)) throw new ToolError(`--checkpoint: the directory of ${file} (${dir}) does not exist`);
  if (!existsSync(file)) return {};
  let data: unknown;
  try { data = JSON.parse(readFileSync(file, 'utf8')); } catch (e) {
    throw new ToolError(`--checkpoint: cannot read ${file}: ${errorMessage(e)}`);
  }
  if (!data || typeof data !== 'object' || Array.isArray(data)) throw new ToolError(`--checkpoint: ${file} must hold a JSON object (queue -> checkpoint)`);
  return data as Record<string, unknown>;
}

/** The temporary file drain writes before renaming it over FILE. */
export function tmpName(file: string, pid = process.pid): string {
  return `${file}.tmp-${pid}`;
}

function alive(pid: number): boolean {
  try { process.kill(pid, 0); return true; } catch (e) { return (e as NodeJS.ErrnoException).code === 'EPERM'; }
}

/**
 * Removes the `FILE.tmp-<pid>` files that drains killed between writing and renaming left
 * behind (those of processes that no longer run; a live drain's is left alone). Returns
 * the names removed.
 */
export function removeStaleTmp(file: string, isAlive: (pid: number) => boolean = alive): string[] {
  const dir = path.dirname(path.resolve(file));
  const prefix = `${path.basename(file)}.tmp-`;
  let names: string[];
  try { names = readdirSync(dir); } catch { return []; }
  const removed: string[] = [];
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const pid = name.slice(prefix.length);
    if (!/^\d+$/.test(pid) || (Number(pid) !== process.pid && isAlive(Number(pid)))) continue;
    try { unlinkSync(path.join(dir, name)); removed.push(name); } catch { /* gone already, or not ours to remove */ }
  }
  return removed;
}

/** Writes the checkpoint file atomically: temporary file, fsync, rename, fsync the directory. */
export function writeCheckpoints(file: string, data: Record<string, unknown>): void {
  commitCheckpoints(prepareCheckpoints(file, data));
}

/** A checkpoint file written and synced under its temporary name, not yet in place. */
export interface PreparedCheckpoints { file: string; tmp: string }

/**
 * The slow half of writeCheckpoints (write and fsync the temporary file), so that a consumer
 * can do its own work between it and the fast half, commitCheckpoints (one rename): what it
 * did and the file then change together, but for the microseconds of that rename.
 */
export function prepareCheckpoints(file: string, data: Record<string, unknown>): PreparedCheckpoints {
  const tmp = tmpName(file);
  const fd = openSync(tmp, 'w');
  try {
    writeSync(fd, JSON.stringify(data, null, 2) + '\n');
    fsyncSync(fd);
  } finally { closeSync(fd); }
  return { file, tmp };
}

/** Puts a prepared file in place (rename) and makes the rename durable (fsync the directory). */
export function commitCheckpoints(p: PreparedCheckpoints): void {
  renameSync(p.tmp, p.file);
  try {
    const dfd = openSync(path.dirname(path.resolve(p.file)), 'r');
    try { fsyncSync(dfd); } finally { closeSync(dfd); }
  } catch { /* some systems cannot fsync a directory */ }
}

/** Drops a prepared file (what it recorded did not happen). */
export function abandonCheckpoints(p: PreparedCheckpoints): void {
  try { unlinkSync(p.tmp); } catch { /* gone already */ }
}
