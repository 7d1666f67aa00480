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

export interface QueryResult { records: QueryRecord[]; groupEnd?: number }

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

export class SelfClient {
  readonly #url: () => string | undefined;
  #conn?: Promise<any>;
  #closed = false;

  /** `url` returns the broker's AMQP URL (known only once its listener is up). */
  constructor(url: () => string | undefined) { this.#url = url; }

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
    const container = r.create_container({ id: `tidemark-console-${process.pid}` });
    const p = new Promise<any>((resolve, reject) => {
      const c = container.connect({ host, port: Number(u.port), reconnect: false, idle_time_out: 0 });
      const fail = (ctx: any) => {
        this.#conn = undefined;
        reject(new Error('console could not connect to ' + url + ': ' + (ctx?.connection?.error?.description ?? ctx?.error?.message ?? 'disconnected') + ' (the console connects as ANONYMOUS from loopback)'));
      };
      c.once('connection_open', () => {
        c.removeListener('disconnected', fail);
        c.on('disconnected', () => { if (this.#conn === p) this.#conn = undefined; });
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

  /** Runs a `sow` command (optionally at a bookmark) and returns the records between the group markers. */
  async query(address: string, f: Omit<QueryFilters, 'command'>, timeoutMs = 15000): Promise<QueryResult> {
    const c = await this.#connection();
    return new Promise<QueryResult>((resolve, reject) => {
      const records: QueryRecord[] = [];
      let settled = false;
      const rcv = c.open_receiver({ source: { address, filter: filterMap({ ...f, command: 'sow' }), distribution_mode: 'copy' }, credit_window: 0, autoaccept: true });
      const finish = (err?: Error, groupEnd?: number) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        try { rcv.close(); } catch { /* already closed */ }
        if (err) reject(err); else resolve({ records, groupEnd });
      };
      const timer = setTimeout(() => finish(new Error(`query on ${address} timed out after ${timeoutMs} ms`)), timeoutMs);
      rcv.on('receiver_open', () => rcv.add_credit(500));
      rcv.on('message', (ctx: any) => {
        const rec = toRecord(ctx.message);
        if (rec.cmd === 'group_end') { finish(undefined, rec.scn); return; }
        if (rec.cmd === 'sow') records.push(rec);
        if (rcv.credit < 100) rcv.add_credit(500);
      });
      const closed = () => { const e = errorOf(rcv.error); finish(new AmqpRefusal(e.condition, e.description)); };
      rcv.on('receiver_close', closed);
      rcv.on('receiver_error', closed);
    });
  }

  /**
   * Follows a queue's events (`subscribe` from now, as a browser). Resolves with the stop
   * function once the broker has attached the link, so that a refusal (ACL, no such queue, no
   * link left on the session) is the caller's to answer: it rejects with an AmqpRefusal then.
   * `onEnd` is called when an attached link ends.
   */
  async tail(address: string, onRecord: (r: QueryRecord) => void, onEnd: (err?: Error) => void, timeoutMs = 15000): Promise<() => void> {
    const c = await this.#connection();
    const rcv = c.open_receiver({ source: { address, filter: filterMap({ command: 'subscribe' }), distribution_mode: 'copy' }, credit_window: 100, autoaccept: true });
    let stopped = false;
    let attached = false;
    const stop = () => { if (stopped) return; stopped = true; try { rcv.close(); } catch { /* closed */ } };
    return new Promise<() => void>((resolve, reject) => {
      const timer = setTimeout(() => { stop(); reject(new Error(`no attach from the broker for ${address} within ${timeoutMs} ms`)); }, timeoutMs);
      rcv.on('message', (ctx: any) => { if (!stopped) onRecord(toRecord(ctx.message)); });
      rcv.once('receiver_open', () => {
        // A refused attach is answered with a null source, then the detach that says why.
        const src = rcv.remote?.attach?.source;
        if (!src || src?.type?.name === 'Null') return;
        attached = true;
        clearTimeout(timer);
        resolve(stop);
      });
      const closed = () => {
        if (stopped) return;
        stopped = true;
        const e = errorOf(rcv.error);
        if (!attached) { clearTimeout(timer); reject(new AmqpRefusal(e.condition, e.description)); return; }
        onEnd(rcv.error ? new AmqpRefusal(e.condition, e.description) : undefined);
      };
      rcv.on('receiver_close', closed);
      rcv.on('receiver_error', closed);
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
