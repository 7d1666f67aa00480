/**
 * The console's AMQP client: SOW queries, historical queries and the live tail go to the
 * broker's own AMQP listener with rhea, through the same source filters any client uses
 * (wire.md 4: tidemark:command, :content-filter, :bookmark, :options), so the console
 * exercises the public contract rather than a private read path. One connection, opened on
 * first use (ANONYMOUS, from loopback), shared by every request; each query is one receiver.
 * When `auth.anonymous` is false the API answers 503 before using this client (api.ts,
 * contentGate). rhea prints a protocol error of a connection (e.g. "SASL layer not enabled",
 * the broker asking for SASL) with console.error unless something listens for
 * `protocol_error`: this client listens and logs it, so stderr stays JSON lines.
 */
import rhea from 'rhea';
import { jsonBody } from '../../codec/json-body.js';
import { logger } from '../../core/log.js';

const log = logger('http');
const r: any = rhea;

export interface QueryRecord {
  /** x-opt-tm-cmd: `sow` for snapshot rows; `publish`, `delete`, `oof` for events. */
  cmd: string;
  key?: string;
  scn?: number;
  /** x-opt-tm-ts, ms since epoch. */
  ts?: number;
  /** The body as JSON when it is JSON (wire.md 3), else its text. */
  body: unknown;
  subject?: string;
  properties?: Record<string, unknown>;
}

export interface QueryFilters {
  command: 'sow' | 'subscribe';
  filter?: string;
  bookmark?: string;
  options?: Record<string, unknown>;
}

/** A refusal of the broker (attach detached with an error), with its AMQP condition. */
export class AmqpRefusal extends Error {
  constructor(readonly condition: string, description: string) { super(description); }
}

function filterMap(f: QueryFilters): Record<string, unknown> {
  const d = (desc: string, v: unknown) => r.types.described_nc(r.types.wrap_symbol(desc), v);
  const out: Record<string, unknown> = { command: d('tidemark:command:symbol', r.types.wrap_symbol(f.command)) };
  if (f.filter) out.content = d('tidemark:content-filter:string', r.types.wrap_string(f.filter));
  if (f.bookmark) out.bookmark = d('tidemark:bookmark:string', r.types.wrap_string(f.bookmark));
  if (f.options && Object.keys(f.options).length) out.options = d('tidemark:options:map', r.types.wrap_map(f.options));
  return out;
}

function plainValue(v: unknown): unknown {
  if (typeof v === 'bigint') return Number(v);
  if (v instanceof Date) return v.getTime();
  if (Buffer.isBuffer(v)) return v.toString('base64');
  if (v && typeof v === 'object') {
    const o = v as any;
    if (o.typecode !== undefined && o.content !== undefined) return plainValue(o.content);
    if (Array.isArray(v)) return v.map(plainValue);
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(o)) out[k] = plainValue(x);
    return out;
  }
  return v;
}

export function toRecord(m: any): QueryRecord {
  const ann = m.message_annotations ?? {};
  const j = jsonBody(m);
  let body: unknown;
  if (j.ok) body = j.value;
  else if (m.body && typeof m.body === 'object' && m.body.typecode === 0x75) body = Buffer.from(m.body.content).toString('utf8');
  else body = plainValue(m.body);
  const ts = ann['x-opt-tm-ts'];
  return {
    cmd: String(ann['x-opt-tm-cmd'] ?? 'message'),
    key: ann['x-opt-tm-key'] !== undefined ? String(ann['x-opt-tm-key']) : undefined,
    scn: ann['x-opt-tm-scn'] !== undefined ? Number(ann['x-opt-tm-scn']) : undefined,
    ts: ts === undefined ? undefined : ts instanceof Date ? ts.getTime() : Number(ts),
    body,
    subject: m.subject,
    properties: m.application_properties ? (plainValue(m.application_properties) as Record<string, unknown>) : undefined,
  };
}

function errorOf(e: any): { condition: string; description: string } {
  const pick = (v: any) => (v && typeof v === 'object' && 'value' in v ? v.value : v);
  if (!e) return { condition: 'amqp:internal-error', description: 'link closed' };
  return { condition: String(pick(e.condition) ?? 'amqp:internal-error'), description: String(pick(e.description) ?? 'link closed') };
}

/** Options of a query: how long to wait, and a budget that ends the collecting early. */
export interface QueryOptions {
  timeoutMs?: number;
  /**
   * Stop once the records collected weigh more than this (by `sizeOf`): the link is closed
   * before the group end and the result says `truncated`. At least one record is kept.
   */
  maxBytes?: number;
  sizeOf?: (r: QueryRecord) => number;
}

export interface QueryResult { records: QueryRecord[]; groupEnd?: number; truncated?: boolean; bytes?: number }

/** A running tail: `stop` closes its link; `resume` grants credit again after its reader was behind. */
export interface Tail { stop(): void; resume(): void }

/** What a tail's reader did with an event: the bytes it queued, and whether it is now behind (no more credit until resume). */
export interface TailWrite { bytes: number; behind: boolean }

/** Credit a tail keeps on its link while its reader keeps up: at most this many events are in flight. */
export const TAIL_CREDIT = 50;
/**
 * Bytes of events a tail lets be in flight: its credit is this over the largest event lately
 * seen (1 to TAIL_CREDIT), so a reader that falls behind holds about this much, whatever the
 * events weigh. By count alone, 50 events of 330 KB or more passed the stream's 16 MiB cap
 * and a reader a little slower than the publisher was ended as not reading.
 */
export const TAIL_BYTES = 2 * 1024 * 1024;

/** A user name and password the broker accepts for the console (BrokerContext.consoleLogin). */
export interface Login { username: string; password: string }

function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host.startsWith('127.') || host === '::1' || host.startsWith('::ffff:127.');
}

export class SelfClient {
  readonly #url: () => string | undefined;
  readonly #login: () => Login | undefined;
  #conn?: Promise<any>;
  #closed = false;
  /**
   * What each open query and tail of the current connection does when that connection drops:
   * rhea (reconnect off) sends no link event then, so without this a tail never ended and a
   * query waited for its time-out.
   */
  readonly #onDrop = new Map<any, Set<(err: Error) => void>>();

  /**
   * `url` returns the broker's AMQP URL (known only once its listener is up). `login` returns
   * the credentials to use when that URL is not a loopback address (ANONYMOUS would be
   * refused there with `auth.anonymous: "loopback"`); undefined: ANONYMOUS.
   */
  constructor(url: () => string | undefined, login: () => Login | undefined = () => undefined) { this.#url = url; this.#login = login; }

  #connection(): Promise<any> {
    if (this.#closed) return Promise.reject(new Error('console client closed'));
    if (this.#conn) return this.#conn;
    const url = this.#url();
    if (!url) return Promise.reject(new Error('the AMQP listener is not up yet'));
    const u = new URL(url);
    // A wildcard bind address is reached over loopback.
    let host = u.hostname.replace(/^\[|\]$/g, '');
    if (host === '0.0.0.0') host = '127.0.0.1';
    if (host === '::') host = '::1';
    // Bound to one address that is not loopback, the broker sees this connection come from
    // that address, not from loopback: ANONYMOUS is refused there unless `auth.anonymous` is
    // true, so the console logs in with the broker's internal console login instead.
    const login = isLoopbackHost(host) ? undefined : this.#login();
    const how = login ? 'the console logs in with its internal login' : 'the console connects as ANONYMOUS from loopback';
    const container = r.create_container({ id: `tidemark-console-${process.pid}` });
    const p = new Promise<any>((resolve, reject) => {
      const c = container.connect({ host, port: Number(u.port), reconnect: false, idle_time_out: 0, ...(login ? { username: login.username, password: login.password } : {}) });
      const fail = (ctx: any) => {
        this.#conn = undefined;
        reject(new Error('console could not connect to ' + url + ': ' + (ctx?.connection?.error?.description ?? ctx?.error?.message ?? 'disconnected') + ` (${how})`));
      };
      c.once('connection_open', () => {
        c.removeListener('disconnected', fail);
        c.removeListener('connection_error', fail);
        // The tail's credit goes out in small flow frames: without TCP_NODELAY each could wait
        // for the broker's delayed ACK (the broker sets it on its side too).
        try { c.socket?.setNoDelay?.(true); } catch { /* not a TCP socket */ }
        // The broker closing the connection (a close frame: rhea then sends no 'disconnected')
        // or the socket going away: either way every link of it is gone.
        const dropped = (ctx: any) => {
          if (this.#conn === p) this.#conn = undefined;
          const e = ctx?.connection?.error ?? ctx?.error;
          const why = e?.description ?? e?.message ?? (e?.condition ? String(e.condition) : 'the connection closed');
          const handlers = this.#onDrop.get(c);
          this.#onDrop.delete(c);
          if (!handlers?.size) return;
          log.warn('console connection lost', { url, why: String(why), open: handlers.size });
          const err = new Error(`the console's AMQP connection to the broker was lost (${why}); the next request opens a new one`);
          for (const h of handlers) { try { h(err); } catch (x) { log.warn('console link handler failed', { err: x }); } }
        };
        c.on('disconnected', dropped);
        c.on('connection_close', dropped);
        c.on('connection_error', dropped);
        resolve(c);
      });
      c.once('disconnected', fail);
      c.once('connection_error', fail);
      c.on('error', (err: any) => log.debug('console connection error', { err: String(err?.message ?? err) }));
      // Without a listener rhea writes the error and the bytes read to stderr (not JSON); the
      // socket is ended and `disconnected` rejects the pending request.
      c.on('protocol_error', (err: any) => log.warn('console connection protocol error', { url, err: String(err?.message ?? err) }));
    });
    this.#conn = p;
    return p;
  }

  /** Registers what a link does if its connection drops; returns the function that unregisters it. */
  #track(c: any, onDrop: (err: Error) => void): () => void {
    let set = this.#onDrop.get(c);
    if (!set) { set = new Set(); this.#onDrop.set(c, set); }
    set.add(onDrop);
    return () => { this.#onDrop.get(c)?.delete(onDrop); };
  }

  /**
   * Runs a `sow` command (optionally at a bookmark) and returns the records between the group
   * markers, or the first ones up to `opts.maxBytes` (then `truncated`).
   */
  async query(address: string, f: Omit<QueryFilters, 'command'>, options: QueryOptions | number = {}): Promise<QueryResult> {
    const opts: QueryOptions = typeof options === 'number' ? { timeoutMs: options } : options;
    const timeoutMs = opts.timeoutMs ?? 15000;
    const c = await this.#connection();
    return new Promise<QueryResult>((resolve, reject) => {
      const records: QueryRecord[] = [];
      let bytes = 0;
      let settled = false;
      const rcv = c.open_receiver({ source: { address, filter: filterMap({ ...f, command: 'sow' }), distribution_mode: 'copy' }, credit_window: 0, autoaccept: true });
      const finish = (err?: Error, groupEnd?: number, truncated?: boolean) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        untrack();
        try { rcv.close(); } catch { /* already closed */ }
        if (err) reject(err); else resolve({ records, groupEnd, truncated: truncated ?? false, bytes });
      };
      const untrack = this.#track(c, (err) => finish(err));
      const timer = setTimeout(() => finish(new Error(`query on ${address} timed out after ${timeoutMs} ms`)), timeoutMs);
      rcv.on('receiver_open', () => rcv.add_credit(500));
      rcv.on('message', (ctx: any) => {
        if (settled) return;
        const rec = toRecord(ctx.message);
        if (rec.cmd === 'group_end') { finish(undefined, rec.scn); return; }
        if (rec.cmd === 'sow') {
          if (opts.maxBytes !== undefined) {
            const n = (opts.sizeOf ?? ((x: QueryRecord) => JSON.stringify(x.body ?? null).length))(rec);
            if (records.length > 0 && bytes + n > opts.maxBytes) { finish(undefined, undefined, true); return; }
            bytes += n;
          }
          records.push(rec);
        }
        if (rcv.credit < 100) rcv.add_credit(500);
      });
      const closed = () => { const e = errorOf(rcv.error); finish(new AmqpRefusal(e.condition, e.description)); };
      rcv.on('receiver_close', closed);
      rcv.on('receiver_error', closed);
    });
  }

  /**
   * Follows a queue's events (`subscribe` from now, as a browser). Resolves with the tail once
   * the broker has attached the link, so that a refusal (ACL, no such queue, no link left on
   * the session) is the caller's to answer: it rejects with an AmqpRefusal then. `onEnd` is
   * called when an attached link ends, or its connection drops (an Error naming that).
   *
   * Credit is granted by hand, topped up as events arrive while `onRecord` says its reader
   * keeps up. Once it says `behind`, no more credit is granted until `resume()`: the broker keeps the events, not this process. The link holds one
   * credit until the first event's size is known, then about TAIL_BYTES of events (at most
   * TAIL_CREDIT).
   */
  async tail(address: string, onRecord: (r: QueryRecord) => TailWrite, onEnd: (err?: Error) => void, timeoutMs = 15000): Promise<Tail> {
    const c = await this.#connection();
    const rcv = c.open_receiver({ source: { address, filter: filterMap({ command: 'subscribe' }), distribution_mode: 'copy' }, credit_window: 0, autoaccept: true });
    let stopped = false;
    let attached = false;
    let paused = false;
    let untrack = () => {};
    // The largest event lately (a decaying maximum: one large event lowers the credit for a while).
    let largest = 0;
    const target = () => (largest === 0 ? 1 : Math.max(1, Math.min(TAIL_CREDIT, Math.floor(TAIL_BYTES / largest))));
    const topUp = () => {
      if (stopped || paused) return;
      const want = target();
      if (rcv.credit * 2 < want || rcv.credit === 0) { try { rcv.add_credit(want - rcv.credit); } catch { /* closed */ } }
    };
    const stop = () => { if (stopped) return; stopped = true; untrack(); try { rcv.close(); } catch { /* closed */ } };
    const handle: Tail = { stop, resume: () => { paused = false; topUp(); } };
    return new Promise<Tail>((resolve, reject) => {
      const timer = setTimeout(() => { stop(); reject(new Error(`no attach from the broker for ${address} within ${timeoutMs} ms`)); }, timeoutMs);
      rcv.on('message', (ctx: any) => {
        if (stopped) return;
        const w = onRecord(toRecord(ctx.message));
        largest = Math.max(w.bytes, largest * 0.95);
        if (w.behind) paused = true;
        topUp();
      });
      rcv.once('receiver_open', () => {
        // A refused attach is answered with a null source, then the detach that says why.
        const src = rcv.remote?.attach?.source;
        if (!src || src?.type?.name === 'Null') return;
        attached = true;
        clearTimeout(timer);
        topUp();
        resolve(handle);
      });
      const ended = (err: Error | undefined) => {
        if (stopped) return;
        stopped = true;
        untrack();
        if (!attached) { clearTimeout(timer); reject(err ?? new AmqpRefusal('amqp:internal-error', 'link closed')); return; }
        onEnd(err);
      };
      const closed = () => {
        const e = errorOf(rcv.error);
        ended(rcv.error || !attached ? new AmqpRefusal(e.condition, e.description) : undefined);
      };
      rcv.on('receiver_close', closed);
      rcv.on('receiver_error', closed);
      untrack = this.#track(c, (err) => ended(err));
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    const p = this.#conn;
    this.#conn = undefined;
    if (!p) return;
    let c: any;
    try { c = await p; } catch { return; }
    if (!c.is_open()) return;
    await new Promise<void>((res) => {
      const t = setTimeout(() => { try { c.socket?.destroy?.(); } catch { /* gone */ } res(); }, 1000);
      c.once('connection_close', () => { clearTimeout(t); res(); });
      c.once('disconnected', () => { clearTimeout(t); res(); });
      c.close();
    });
  }
}
