/** Small rhea helpers shared by the crash-test publishers and verifiers (tools/crash-test.ts). */
import rhea from 'rhea';
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const r: any = rhea;

/** mulberry32 */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

export const sleep = (ms: number) => new Promise<void>((res) => setTimeout(res, ms));

export function openConnection(port: number): Promise<any> {
  return new Promise((resolve, reject) => {
    const c = r.create_container({ id: 'crash-' + Math.random().toString(36).slice(2) });
    const conn = c.connect({ host: '127.0.0.1', port, reconnect: false });
    conn.once('connection_open', () => resolve(conn));
    conn.once('disconnected', (ctx: any) => reject(new Error('connect failed: ' + (ctx?.error?.message ?? 'disconnected'))));
    conn.on('error', () => { /* the broker is killed under us */ });
  });
}

/** Closes a connection, waiting (bounded) for the broker's close. */
export function closeConnection(conn: any): Promise<void> {
  return new Promise<void>((res) => {
    if (!conn.is_open()) { res(); return; }
    const t = setTimeout(res, 2000);
    conn.once('connection_close', () => { clearTimeout(t); res(); });
    conn.once('disconnected', () => { clearTimeout(t); res(); });
    conn.close();
  });
}

/** Resolves once the link is attached (sendable for a sender, receiver_open for a receiver); rejects on a refusal or a dead connection. */
export function attached(link: any, conn: any, event: 'sendable' | 'receiver_open'): Promise<any> {
  return new Promise((resolve, reject) => {
    let done = false;
    const ok = () => { if (!done) { done = true; resolve(link); } };
    const fail = (why: string) => () => { if (!done) { done = true; reject(new Error(why + ': ' + JSON.stringify(link.error ?? link.remote?.detach?.error ?? null))); } };
    link.once(event, ok);
    link.once(event === 'sendable' ? 'sender_close' : 'receiver_close', fail('link refused'));
    link.once(event === 'sendable' ? 'sender_error' : 'receiver_error', fail('link error'));
    conn.once('disconnected', fail('disconnected'));
  });
}

/** tidemark source filters (wire.md 4): command, bookmark. */
export function tmFilters(f: { command: string; bookmark?: string }): Record<string, unknown> {
  const d = (desc: string, v: any) => r.types.described_nc(r.types.wrap_symbol(desc), v);
  const out: Record<string, unknown> = { command: d('tidemark:command:symbol', r.types.wrap_symbol(f.command)) };
  if (f.bookmark !== undefined) out.bookmark = d('tidemark:bookmark:string', r.types.wrap_string(f.bookmark));
  return out;
}

/** A SOW event or record as received: command, key, SCN, JSON body. */
export interface SowMsg { cmd: string; key: string; scn: number; body: any }

export function sowMsg(message: any): SowMsg {
  const a = message?.message_annotations ?? {};
  return { cmd: String(a['x-opt-tm-cmd'] ?? ''), key: String(a['x-opt-tm-key'] ?? ''), scn: Number(a['x-opt-tm-scn'] ?? -1), body: jsonBody(message?.body) };
}

export function jsonBody(b: any): any {
  try {
    if (typeof b === 'string') return JSON.parse(b);
    if (b && b.typecode === 0x75) return JSON.parse(Buffer.from(b.content).toString('utf8'));
  } catch { return b; }
  return b ?? null;
}

/** Order-insensitive deep equality for JSON values. */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a as object), kb = Object.keys(b as object);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && sameJson((a as any)[k], (b as any)[k]));
}

export const show = (v: unknown) => (v === null || v === undefined ? 'absent' : JSON.stringify(v));

/**
 * Calls `finish` once `sentAll()` holds and the sender has no unsettled delivery left, or the
 * connection is gone (the broker was killed). Polls: rhea raises no event for "all settled".
 */
export function finishWhenSettled(conn: any, sender: any, sentAll: () => boolean, isFinished: () => boolean, finish: () => void): void {
  const poll = setInterval(() => {
    if (isFinished()) { clearInterval(poll); return; }
    const unsettled = Object.keys(sender.session?.outgoing?.deliveries?.entries ?? {}).length;
    if (sentAll() && (unsettled === 0 || !conn.is_open())) { clearInterval(poll); finish(); }
  }, 20);
}

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** A broker started as a child process (`node bin/tidemark.js`, from dist/: build first). */
export interface BrokerChild { proc: ChildProcess; url: string; port: number; exited: Promise<number | null>; output: () => string }

/** Starts `node bin/tidemark.js --port 0 --data DIR --no-http` and resolves once it listens. */
export function startBroker(dataDir: string): Promise<BrokerChild> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [path.join(ROOT, 'bin/tidemark.js'), '--port', '0', '--data', dataDir, '--no-http', '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let done = false;
    const exited = new Promise<number | null>((res) => proc.once('exit', (code) => res(code)));
    const timer = setTimeout(() => { if (!done) { done = true; proc.kill('SIGKILL'); reject(new Error('broker did not start: ' + out)); } }, 20000);
    proc.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /amqp:\/\/([\d.]+):(\d+)/.exec(out);
      if (m && !done) { done = true; clearTimeout(timer); resolve({ proc, url: `amqp://${m[1]}:${m[2]}`, port: Number(m[2]), exited, output: () => out }); }
    });
    proc.stderr!.on('data', (d: Buffer) => { out += d.toString(); });
    proc.once('exit', (code) => { if (!done) { done = true; clearTimeout(timer); reject(new Error(`broker exited ${code}: ${out}`)); } });
  });
}
