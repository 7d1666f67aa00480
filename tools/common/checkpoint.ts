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
import { existsSync, readFileSync, readdirSync, openSync, writeSync, fsyncSync, closeSync, renameSync, unlinkSync, linkSync, statSync } from 'node:fs';
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

/** The lock file drain holds while it rewrites FILE: `FILE.lock`, holding the holder's pid. */
export function lockName(file: string): string {
  return `${file}.lock`;
}

/** How long a drain waits for another's lock before it gives up (a lock is held for one write: milliseconds). */
export const LOCK_WAIT_MS = 10000;
/** A lock file with no pid in it this old is one whose drain was killed between creating and writing it. */
const EMPTY_LOCK_STALE_MS = 2000;

export interface LockOptions { isAlive?: (pid: number) => boolean; waitMs?: number }

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Takes `FILE.lock` (created exclusively, holding our pid), waiting for another drain's with
 * a bounded retry. A lock whose process is gone (a drain killed while it held it) is taken
 * over: renamed aside first, and put back if, read again, it turns out to be a live drain's
 * taken meanwhile, so two drains never both hold it. Returns the lock's name.
 */
export function takeLock(file: string, opts: LockOptions = {}): string {
  const isAlive = opts.isAlive ?? alive;
  const lock = lockName(file);
  const deadline = Date.now() + (opts.waitMs ?? LOCK_WAIT_MS);
  for (let pause = 1; ; pause = Math.min(pause * 2, 20)) {
    try {
      const fd = openSync(lock, 'wx');
      try { writeSync(fd, `${process.pid}\n`); } finally { closeSync(fd); }
      return lock;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw new ToolError(`--checkpoint: cannot create the lock file ${lock}: ${errorMessage(e)}`);
    }
    let text: string;
    let ageMs: number;
    try { text = readFileSync(lock, 'utf8'); ageMs = Date.now() - statSync(lock).mtimeMs; } catch { continue; } // released meanwhile
    const pid = /^\d+$/.test(text.trim()) ? Number(text.trim()) : undefined;
    const stale = pid === undefined ? ageMs > EMPTY_LOCK_STALE_MS : pid === process.pid || !isAlive(pid);
    if (stale) { takeOver(lock, text); continue; }
    if (Date.now() >= deadline) {
      throw new ToolError(`--checkpoint: ${file} stayed locked by ${pid === undefined ? 'another drain' : `process ${pid}`} for ${((opts.waitMs ?? LOCK_WAIT_MS) / 1000)}s (${lock}); if no drain is running, remove ${lock}`);
    }
    sleepSync(pause);
  }
}

/** Removes a stale lock (its text as read), unless it has been replaced by a live one meanwhile. */
function takeOver(lock: string, text: string): void {
  const aside = `${lock}.stale-${process.pid}`;
  try { renameSync(lock, aside); } catch { return; } // gone already
  let now: string | undefined;
  try { now = readFileSync(aside, 'utf8'); } catch { /* ignore */ }
  if (now !== text) {
    // a live drain's lock, taken after we read the stale one: give it back (link: never over a newer one)
    try { linkSync(aside, lock); } catch { /* another lock is in place */ }
  }
  try { unlinkSync(aside); } catch { /* ignore */ }
}

/** Releases a lock taken by takeLock. */
export function releaseLock(lock: string): void {
  try { unlinkSync(lock); } catch { /* gone already */ }
}

/** The checkpoints in FILE now ({} when there is no file), for a rewrite under the lock. */
function currentCheckpoints(file: string): Record<string, unknown> {
  let text: string;
  try { text = readFileSync(file, 'utf8'); } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw new ToolError(`--checkpoint: cannot read ${file}: ${errorMessage(e)}`);
  }
  let data: unknown;
  try { data = JSON.parse(text); } catch (e) { throw new ToolError(`--checkpoint: cannot read ${file}: ${errorMessage(e)}`); }
  if (!data || typeof data !== 'object' || Array.isArray(data)) throw new ToolError(`--checkpoint: ${file} must hold a JSON object (queue -> checkpoint)`);
  return data as Record<string, unknown>;
}

/**
 * Sets the checkpoints of `entries` (queue → checkpoint) in FILE atomically, keeping every
 * other queue's entry as the file has it now: temporary file, fsync, rename, fsync the
 * directory, under the lock.
 */
export function writeCheckpoints(file: string, entries: Record<string, unknown>, opts: LockOptions = {}): void {
  commitCheckpoints(prepareCheckpoints(file, entries, opts));
}

/** A checkpoint file written and synced under its temporary name, not yet in place; its lock is held. */
export interface PreparedCheckpoints { file: string; tmp: string; lock: string; /** committed or abandoned: the lock is released */ done?: boolean }

/**
 * The slow half of writeCheckpoints, so that a consumer can do its own work between it and
 * the fast half, commitCheckpoints (one rename): what it did and the file then change
 * together, but for the microseconds of that rename. It takes FILE's lock (several drains,
 * each on its own queue, may share one file), reads the file as it is now, replaces the
 * entries of `entries` only, and writes and fsyncs the result under the temporary name. The
 * lock is held until commitCheckpoints or abandonCheckpoints: call one of them at once.
 */
export function prepareCheckpoints(file: string, entries: Record<string, unknown>, opts: LockOptions = {}): PreparedCheckpoints {
  const lock = takeLock(file, opts);
  const tmp = tmpName(file);
  try {
    const data = { ...currentCheckpoints(file), ...entries };
    const fd = openSync(tmp, 'w');
    try {
      writeSync(fd, JSON.stringify(data, null, 2) + '\n');
      fsyncSync(fd);
    } finally { closeSync(fd); }
  } catch (e) {
    try { unlinkSync(tmp); } catch { /* not written */ }
    releaseLock(lock);
    throw e;
  }
  return { file, tmp, lock };
}

/** Puts a prepared file in place (rename), makes the rename durable (fsync the directory), releases the lock. */
export function commitCheckpoints(p: PreparedCheckpoints): void {
  if (p.done) return;
  p.done = true;
  try {
    renameSync(p.tmp, p.file);
    try {
      const dfd = openSync(path.dirname(path.resolve(p.file)), 'r');
      try { fsyncSync(dfd); } finally { closeSync(dfd); }
    } catch { /* some systems cannot fsync a directory */ }
  } finally { releaseLock(p.lock); }
}

/** Drops a prepared file (what it recorded did not happen) and releases the lock. */
export function abandonCheckpoints(p: PreparedCheckpoints): void {
  if (p.done) return; // (its lock may be another drain's by now)
  p.done = true;
  try { unlinkSync(p.tmp); } catch { /* gone already */ }
  releaseLock(p.lock);
}
