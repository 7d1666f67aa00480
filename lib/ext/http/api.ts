/**
 * The console's JSON API under /api/ (read-only: GET and HEAD only).
 *   GET /api/overview                       broker summary: URLs, connections, links, commit stats
 *   GET /api/queues                         every queue's management map (wire.md 7) + counters
 *   GET /api/queues/:name                   one queue
 *   GET /api/queues/:name/sow?filter=&order_by=&top_n=&skip_n=&at=
 *                                           a SOW query (historical with `at`, a bookmark), run over AMQP
 *   GET /api/queues/:name/history?key=K     one key's retained versions (the timeline)
 *   GET /api/queues/:name/events            live tail as Server-Sent Events (`subscribe` over AMQP)
 *   GET /api/queue[/sow|/history|/events]?name=NAME  the same, the name as a parameter (for "." and "..")
 * The last three return message content. The console reads it as ANONYMOUS from loopback
 * (over AMQP, and the history's direct storage read on its behalf), so they answer 503 when
 * `auth.anonymous` is false, and 403 to a request from off loopback when it is "loopback"
 * (contentGate); the history checks the ACL for `anonymous`
 * like an AMQP browser. Overview and queue statistics carry no content and are always served
 * (docs/observability.md).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { BrokerContext } from '../../core/broker-context.js';
import type { Queue } from '../../core/queue/queue.js';
import { jsonText } from '../../codec/json-body.js';
import { decodeMessage } from '../../codec/message-bytes.js';
import { readKeyHistory } from '../sow/history-read.js';
import { visibleQueues } from './metrics.js';
import { SelfClient, AmqpRefusal, toRecord, type Tail, type TailWrite, type QueryResult } from './self-client.js';
import { isLoopback } from '../../core/protocol/server.js';

/** Most records one SOW page returns. */
export const MAX_PAGE = 1000;

/**
 * Most JSON text of the records (or versions) one `/sow` or `/history` answer carries: past
 * it the page stops (`truncated: true`; at least one record is always sent). A page was
 * bounded by count only: 100 records of 1 MB made a 95 MB body, 300 of 1.9 MB a string V8
 * cannot build.
 */
export const MAX_PAGE_BYTES = 8 * 1024 * 1024;

/**
 * Most bytes a live event stream may have queued for its client before one more event is
 * written. The tail's AMQP credit stops while the response is over its high-water mark, and
 * is sized to its events (self-client.ts TAIL_BYTES), so a reader that stops reading holds
 * about TAIL_BYTES; credit granted while events were small can still bring large ones, and
 * past this the stream ends (`end` event, `unavailable`, "client not reading") and its socket
 * is closed. Checked before a write, so one event larger than this does not end a stream.
 */
export const MAX_STREAM_BUFFER = 16 * 1024 * 1024;

export class HttpError extends Error {
  constructor(readonly status: number, readonly code: string, message: string) { super(message); }
}

function jsonReplacer(_k: string, v: unknown): unknown {
  if (Buffer.isBuffer(v)) return v.toString('base64');
  if (v && typeof v === 'object' && (v as any).type === 'Buffer' && Array.isArray((v as any).data)) return Buffer.from((v as any).data).toString('base64');
  return v;
}

/** JSON text of an API answer: binary as base64; an integer a body held beyond 2^53 as its exact digits. */
function apiJson(v: unknown): string {
  return jsonText(v, jsonReplacer);
}

/** Live event streams (`/events`) open at once; each holds a link of the console's session. */
export const MAX_EVENT_STREAMS = 100;

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = apiJson(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' });
  res.end(res.req.method === 'HEAD' ? undefined : text);
}

export function queueJson(b: BrokerContext, q: Queue): Record<string, unknown> {
  const s = q.structure as { settings?: { historyWindow?: number; historyGranularity?: number } };
  return {
    ...b.queueInfo(q),
    kind: q.structure.kind,
    counters: { ...q.counters },
    history_window_ms: s.settings?.historyWindow ?? null,
  };
}

function intParam(u: URL, name: string, def: number | undefined, max: number, min = 0): number | undefined {
  const v = u.searchParams.get(name);
  if (v === null || v === '') return def;
  if (!/^\d+$/.test(v)) throw new HttpError(400, 'bad-request', `${name}: expected a non-negative integer, got ${JSON.stringify(v)}`);
  const n = Number(v);
  if (n > max) throw new HttpError(400, 'bad-request', `${name}: at most ${max}`);
  if (n < min) throw new HttpError(400, 'bad-request', `${name}: at least ${min}, got ${n}`);
  return n;
}

/** Why the content views are off; the answer of every one of them when `auth.anonymous` is false. */
export const CONTENT_OFF = 'message content is not served: auth.anonymous is false and the HTTP listener has no authentication; '
  + 'the console reads queues as ANONYMOUS from loopback (docs/observability.md). Queue statistics, /metrics and /healthz are still served';

/** Why a content view refuses a request from off loopback when `auth.anonymous` is "loopback". */
export const CONTENT_LOOPBACK_ONLY = 'message content is served only to clients on loopback: auth.anonymous is "loopback" and the HTTP listener has no authentication, '
  + 'so a remote client would read what a remote AMQP client needs a login for (docs/observability.md). Queue statistics, /metrics and /healthz are still served';

/**
 * Throws the 503 of the content views when the broker refuses ANONYMOUS altogether, and the
 * 403 when it allows ANONYMOUS only from loopback and the request does not come from there:
 * the console reads as `anonymous`, so the HTTP client gets what an AMQP client from its
 * address could read without a login, no more.
 */
export function contentGate(b: BrokerContext, remoteAddress: string | undefined): void {
  const anon = b.config.auth.anonymous;
  if (anon === false) throw new HttpError(503, 'unavailable', CONTENT_OFF);
  if (anon === 'loopback' && !isLoopback(remoteAddress)) throw new HttpError(403, 'forbidden', CONTENT_LOOPBACK_ONLY);
}

/**
 * The HTTP status of a broker refusal, by its AMQP condition (docs/observability.md lists the
 * table). Anything not listed is 503: the broker did not serve the view now, and `error` says
 * why (an unlisted condition was a 502 no document named).
 */
const STATUS_OF_CONDITION: Record<string, number> = {
  'amqp:invalid-field': 400,
  'amqp:decode-error': 400,
  'amqp:unauthorized-access': 403,
  'amqp:not-allowed': 403,
  'amqp:not-found': 404,
  'amqp:resource-deleted': 404,
  'tidemark:scn-not-found': 410,
  'amqp:internal-error': 500,
  'amqp:resource-limit-exceeded': 503,
};

export function statusOf(condition: string): number {
  return STATUS_OF_CONDITION[condition] ?? 503;
}

/** The HTTP error for a failed query or tail: the broker's refusal by its condition, else 503 (the broker is not reachable). */
function queryError(e: unknown): HttpError {
  if (e instanceof AmqpRefusal) return new HttpError(statusOf(e.condition), e.condition, e.message);
  return new HttpError(503, 'unavailable', (e as Error).message);
}

/** The data of an `end` event: the AMQP condition and why, as the JSON errors have them. */
function endEvent(err?: Error): { error: string | null; description: string } {
  if (err instanceof AmqpRefusal) return { error: err.condition, description: err.message };
  return { error: err ? 'unavailable' : null, description: err?.message ?? 'the stream ended' };
}

export class Api {
  readonly #b: BrokerContext;
  readonly #client: SelfClient;
  readonly #streams = new Set<ServerResponse>();
  /** The peer address of a request (a seam for tests: the content gate depends on it). */
  readonly #remote: (req: IncomingMessage) => string | undefined;

  constructor(b: BrokerContext, client: SelfClient, remote: (req: IncomingMessage) => string | undefined = (req) => req.socket.remoteAddress) {
    this.#b = b; this.#client = client; this.#remote = remote;
  }

  /** Live event streams open now. */
  get streams(): number { return this.#streams.size; }

  #queue(name: string): Queue {
    const q = this.#b.nodes.get(name);
    if (!q || q.def.temporary || q.deleted) throw new HttpError(404, 'not-found', `no such queue: ${name}`);
    return q;
  }

  /** Handles a request under /api/; `parts` are the decoded path segments after `api`. */
  async handle(req: IncomingMessage, res: ServerResponse, u: URL, parts: string[]): Promise<void> {
    const b = this.#b;
    if (parts.length === 1 && parts[0] === 'overview') {
      const c = b.committer.stats;
      return sendJson(res, 200, {
        amqp: b.urls, http: b.httpUrl, now: b.clock.now(), uptime_s: Math.round(process.uptime()),
        connections: b.stats.connections, links: b.stats.links, queues: visibleQueues(b).length,
        extensions: b.extensions.all.map((e) => e.name), read_only: true,
        commit: { batches: c.batches, groups: c.groups, max_groups: c.maxGroups, mean_latency_ms: c.batches ? c.totalLatencyMs / c.batches : 0 },
      });
    }
    // /api/queue[/sow|/history|/events]?name=NAME: the same views with the name as a query
    // parameter. Browsers (and fetch, curl) resolve "." and ".." path segments, "%2e" too,
    // before sending, so a page cannot reach the queues "." and ".." by the path form.
    if (parts[0] === 'queue' && parts.length <= 2) {
      const name = u.searchParams.get('name');
      if (name === null || name === '') throw new HttpError(400, 'bad-request', `${u.pathname} needs ?name=QUEUE`);
      parts = ['queues', name, ...parts.slice(1)];
    }
    if (parts[0] !== 'queues') throw new HttpError(404, 'not-found', `no such endpoint: ${u.pathname}`);
    if (parts.length === 1) return sendJson(res, 200, visibleQueues(b).map((q) => queueJson(b, q)));
    const q = this.#queue(parts[1]);
    if (parts.length === 2) return sendJson(res, 200, queueJson(b, q));
    if (parts.length !== 3) throw new HttpError(404, 'not-found', `no such endpoint: ${u.pathname}`);
    if (parts[2] === 'sow' || parts[2] === 'history' || parts[2] === 'events') contentGate(b, this.#remote(req));
    switch (parts[2]) {
      case 'sow': return this.#sow(res, u, q);
      case 'history': return this.#history(res, u, q);
      case 'events': return this.#events(req, res, q);
      default: throw new HttpError(404, 'not-found', `no such endpoint: ${u.pathname}`);
    }
  }

  async #sow(res: ServerResponse, u: URL, q: Queue): Promise<void> {
    const top = intParam(u, 'top_n', 20, MAX_PAGE, 1)!; // 0 gave an empty page with more: true
    const skip = intParam(u, 'skip_n', 0, Number.MAX_SAFE_INTEGER)!;
    const orderBy = u.searchParams.get('order_by')?.trim() || undefined;
    const filter = u.searchParams.get('filter')?.trim() || undefined;
    const at = u.searchParams.get('at')?.trim() || undefined;
    // One more than a page tells whether there is a next page.
    const options: Record<string, unknown> = { top_n: top + 1 };
    if (skip) options.skip_n = skip;
    if (orderBy) options.order_by = orderBy;
    const started = performance.now();
    let r: QueryResult;
    // Only the broker's answer maps to a condition: a failure to build or send the JSON is
    // not a 503 "unavailable" (it was, with V8's "Invalid string length" as the reason).
    try {
      r = await this.#client.query(q.name, { filter, bookmark: at, options }, { maxBytes: MAX_PAGE_BYTES, sizeOf: (x) => apiJson(x).length });
    } catch (e) {
      throw queryError(e);
    }
    const records = r.records.slice(0, top);
    // Cut by the byte budget: fewer than top_n records, the next page starts after them
    // (skip_n + records.length), and group_end_scn is unknown (the group end was not read).
    const truncated = r.truncated === true && r.records.length <= top;
    sendJson(res, 200, {
      queue: q.name, filter: filter ?? null, order_by: orderBy ?? null, at: at ?? null, top_n: top, skip_n: skip,
      group_end_scn: r.groupEnd ?? null, more: r.records.length > top || r.truncated === true, truncated,
      ...(truncated ? { max_bytes: MAX_PAGE_BYTES } : {}),
      records, elapsed_ms: Math.round((performance.now() - started) * 10) / 10,
    });
  }

  async #history(res: ServerResponse, u: URL, q: Queue): Promise<void> {
    const key = u.searchParams.get('key');
    if (key === null || key === '') throw new HttpError(400, 'bad-request', 'history needs ?key=');
    // A direct storage read: the ACL the AMQP path applies to the console's ANONYMOUS reader
    // (browse; consume implies it) is checked here, before anything is read.
    if (!this.#b.extensions.authorize('anonymous', 'browse', q.name)) {
      throw new HttpError(403, 'amqp:unauthorized-access', `user anonymous may not browse queue ${q.name} (the console reads as anonymous)`);
    }
    // The stored bytes bound what is read; the JSON text of the bodies bounds what is sent.
    const h = await readKeyHistory(q, key, { limit: intParam(u, 'limit', 1000, 10000), maxBytes: MAX_PAGE_BYTES });
    // As the sow view answers it (the broker's not-found for a sow command on a plain queue).
    if (!h) throw new HttpError(404, 'amqp:not-found', `queue ${q.name} is not a SOW queue (no sow.key)`);
    const now = this.#b.clock.now();
    // Newest first until the budget is spent (at least one), then oldest first again.
    const versions: Array<{ scn: number; ts: number; op: string; body: unknown }> = [];
    let bytes = 0;
    let truncated = h.truncated;
    for (let i = h.versions.length - 1; i >= 0; i--) {
      const v = h.versions[i];
      const out = { scn: v.scn, ts: v.ts, op: v.op, body: v.op === 'delete' ? null : toRecord(decodeMessage(v.bytes)).body };
      const n = apiJson(out).length;
      if (versions.length > 0 && bytes + n > MAX_PAGE_BYTES) { truncated = true; break; }
      bytes += n;
      versions.push(out);
    }
    versions.reverse();
    sendJson(res, 200, {
      queue: q.name, key, now, window_ms: h.windowMs ?? null, window_start: h.windowMs !== undefined ? now - h.windowMs : null,
      truncated, versions,
    });
  }

  async #events(req: IncomingMessage, res: ServerResponse, q: Queue): Promise<void> {
    // Each stream is a link on the console's one AMQP session: unbounded, a local process
    // opening a thousand took every link the session may have, and every sow view failed.
    if (this.#streams.size >= MAX_EVENT_STREAMS) {
      throw new HttpError(503, 'too-many-streams', `${MAX_EVENT_STREAMS} live event streams are open (the most the console serves at once): close one and retry`);
    }
    this.#streams.add(res); // counted from the attach on: a stream waiting for it holds a link too
    let tail: Tail | undefined;
    let started = false;
    let ended = false;
    let heartbeat: NodeJS.Timeout | undefined;
    const end = () => {
      if (ended) return;
      ended = true;
      clearInterval(heartbeat); this.#streams.delete(res); tail?.stop();
      if (started && !res.writableEnded) res.end();
    };
    res.on('close', end);
    // Flow control: while the response is over its high-water mark (the client reads slower
    // than events come), the tail grants no more AMQP credit; 'drain' grants it again.
    res.on('drain', () => tail?.resume());
    // Records that come with the attach reply wait for the headers.
    const early: string[] = [];
    let endedWith: Error | null | undefined;
    const finish = (err?: Error) => {
      if (ended) return;
      if (!started) { endedWith = err ?? null; return; }
      res.write(`event: end\ndata: ${JSON.stringify(endEvent(err))}\n\n`);
      end();
    };
    /** Queues one event; what it queued and whether the client is behind (for the tail's credit). */
    const write = (chunk: string): TailWrite => {
      if (ended) return { bytes: chunk.length, behind: true };
      if (!started) { early.push(chunk); return { bytes: chunk.length, behind: false }; }
      if (res.writableLength > MAX_STREAM_BUFFER) {
        // Bounded even with large events: the client is not reading. Tell it (if it ever
        // reads again), then let go of the socket and what it holds.
        finish(new Error(`client not reading: over ${MAX_STREAM_BUFFER} bytes of events queued for this stream`));
        const t = setTimeout(() => res.destroy(), 5000);
        t.unref();
        res.once('finish', () => clearTimeout(t));
        return { bytes: chunk.length, behind: true };
      }
      return { bytes: chunk.length, behind: !res.write(chunk) };
    };
    try {
      // The 200 and `ready` wait for the attach: a refused link answers its condition's status
      // with the JSON error, as /sow does (a 200 then `end` left the console retrying forever).
      tail = await this.#client.tail(q.name, (r) => write(`event: record\ndata: ${apiJson(r)}\n\n`), finish);
    } catch (e) {
      this.#streams.delete(res);
      ended = true;
      throw queryError(e);
    }
    if (ended) { tail.stop(); return; } // the client went away meanwhile
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    started = true;
    // HEAD: the headers GET would get (the link was attached, so the status is the same), no stream.
    if (req.method === 'HEAD') { end(); return; }
    res.write('retry: 3000\n\n');
    res.write(`event: ready\ndata: ${JSON.stringify({ queue: q.name, scn_head: q.committedScn })}\n\n`);
    for (const chunk of early.splice(0)) write(chunk);
    if (ended) return;
    if (endedWith !== undefined) { finish(endedWith ?? undefined); return; }
    heartbeat = setInterval(() => res.write(': keep-alive\n\n'), 15000);
    heartbeat.unref();
  }

  /** Ends every open event stream (listener stop). */
  closeStreams(): void { for (const s of [...this.#streams]) { try { s.end(); } catch { /* gone */ } } this.#streams.clear(); }
}
