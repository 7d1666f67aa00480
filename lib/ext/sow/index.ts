/**
 * State of the world (semantics.md 2, 4, 5) as an extension through the core's points: the
 * `sow.key` queue argument and the SOW structure, the command filters (`tidemark:command`,
 * `:bookmark`, `:options`), the sow / sow_and_subscribe / subscribe commands (and what they
 * mean on plain queues: not-found, empty group then live, live), `SOW-DELETE`, and the
 * background expiry of records with a TTL. History (`history`), replay from a bookmark
 * (`replay`) and checkpoints with durable subscriptions (`checkpoints`) are extensions of
 * their own built on this one: they claim their links first and open them through
 * `openSowLink`. docs/sow.md.
 */
import type { Extension, FilterSpec } from '../../core/extensions.js';
import type { Queue } from '../../core/queue/queue.js';
import type { BrokerContext } from '../../core/broker-context.js';
import { ListStructure } from '../../core/queue/list-structure.js';
import { TidemarkError, Conditions } from '../../core/errors.js';
import { encodeMessage } from '../../codec/message-bytes.js';
import { typed } from '../../codec/amqp.js';
import { toStr } from '../../address/index.js';
import { compileFilter } from '../../filter/index.js';
import { MessageEnv } from '../../core/queue/filter-env.js';
import { decodeMessage } from '../../codec/message-bytes.js';
import { SowStructure } from './sow-structure.js';
import { parseKeySpec } from './sow-key.js';
import { parseBookmark } from './bookmark.js';
import { parseCommand, parseOptions } from './options.js';
import { MarkerSink } from './marker-sink.js';
import { COMMAND, BOOKMARK, OPTIONS, commandOf, openSowLink } from './links.js';
import { logger } from '../../core/log.js';

const log = logger('sow');

export { COMMAND, BOOKMARK, OPTIONS, commandOf, openSowLink };

/** Annotations of an entry of a plain queue delivered on a command link (wire.md 4.2). */
export function listAnnotations(e: { scn: number; ts: number }): Record<string, unknown> {
  return { 'x-opt-tm-cmd': typed.symbol('publish'), 'x-opt-tm-scn': typed.ulong(e.scn), 'x-opt-tm-ts': typed.timestamp(e.ts) };
}

/** A pre-settled marker message (group_begin, group_end, completed) on a plain queue's command link. */
export function listMarker(markers: MarkerSink, cmd: string, scn?: number, queryId?: string): void {
  markers.marker(encodeMessage({ message_annotations: {
    'x-opt-tm-cmd': typed.symbol(cmd),
    ...(scn !== undefined ? { 'x-opt-tm-scn': typed.ulong(scn) } : {}),
    // wire.md 4.2: the query id goes on group_begin and group_end (never on completed)
    ...(queryId !== undefined && cmd !== 'completed' ? { 'x-opt-tm-query-id': queryId } : {}),
  }, body: null }));
}

/**
 * A background task over every SOW queue, every `ms` (expiry here, the log trim in replay,
 * the history sweep in history). A failing step is logged and retried on the next tick.
 * `due` is asked first, synchronously: with thousands of idle queues, a step (and its
 * promises) per queue per second was ~45 ms of CPU a second for 20k SOW queues.
 */
export function everySowQueue(b: BrokerContext, ms: number, what: string, due: (s: SowStructure, now: number) => boolean, step: (s: SowStructure, now: number) => Promise<unknown>): NodeJS.Timeout {
  const timer = setInterval(() => {
    const now = b.clock.now();
    for (const q of b.nodes.list()) {
      const s = q.structure;
      if (s instanceof SowStructure && due(s, now)) step(s, now).catch((err) => log.error(`${what} failed`, { queue: q.name, err }));
    }
  }, ms);
  timer.unref();
  return timer;
}

export function sowExtension(opts: { expiryIntervalMs?: number } = {}): Extension {
  let timer: NodeJS.Timeout | undefined;
  /** Which of the extensions that act on a bookmark are enabled (set at start). */
  let enabled = { history: false, replay: false };
  /** The largest record a delta may merge into (limits.maxMessageSize, set at start; queues are built before it). */
  const recordLimit = { maxBytes: Infinity };

  const filters: FilterSpec[] = [
    { symbol: COMMAND, parse: (v) => ({ data: parseCommand(v) }) },
    { symbol: BOOKMARK, parse: (v) => { if (typeof v !== 'string') throw new TidemarkError(Conditions.invalidField, 'tidemark:bookmark:string value must be a string'); return { data: parseBookmark(v) }; } },
    { symbol: OPTIONS, parse: (v) => ({ data: parseOptions(v) }) },
  ];

  /** A bookmark that reached this extension: the extension that answers it is not enabled. */
  function unanswerableBookmark(queue: Queue, command: string): TidemarkError {
    const historical = command === 'sow' || command === 'sow_and_subscribe';
    const ext = historical ? 'history' : 'replay';
    const on = historical ? enabled.history : enabled.replay;
    return new TidemarkError(Conditions.invalidField, on
      ? `a ${command} with a bookmark cannot be answered on queue ${queue.name}`
      : `a ${command} with a bookmark needs the ${ext} extension, which this broker does not enable (config.extensions)`);
  }

  return {
    name: 'sow',
    queueArguments: [
      { name: 'sow.key', strict: true, guardsData: true, parse: (v) => { const s = toStr('sow.key', v); parseKeySpec(s); return s; } },
    ],
    validateArguments(args) {
      if (args['sow.key'] !== undefined && (args['qpid.max_count'] !== undefined || args['qpid.max_size'] !== undefined)) {
        throw new Error('qpid.max_count/qpid.max_size do not apply to a SOW queue (use log.max_count / log.retention)');
      }
    },
    configureQueue({ queue, arguments: args }) {
      if (args['sow.key'] === undefined) return;
      const s = new SowStructure(queue, { key: parseKeySpec(args['sow.key'] as string), historyGranularity: 0 });
      s.recordLimit = recordLimit;
      s.openConsumerImpl = (st, req, sink) => {
        const c = commandOf(req);
        if (c.bookmark) throw unanswerableBookmark(queue, c.command);
        return openSowLink(st, req, sink, { command: c.command, options: c.options, completedMarker: false, annotate: req.annotate });
      };
      queue.structure = s;
    },
    filters,
    // A command on a plain queue browses it (see openConsumer): the attach reply says copy.
    browsesQueue: (_queue, req) => req.filters.has(COMMAND) || req.filters.has(BOOKMARK) || req.filters.has(OPTIONS),
    openConsumer(queue, req, sink) {
      if (queue.structure instanceof SowStructure) return queue.structure.openConsumer(req, sink);
      const hasCmd = req.filters.has(COMMAND) || req.filters.has(BOOKMARK) || req.filters.has(OPTIONS);
      if (!hasCmd) {
        // Only a content filter (the selector extension's, a tidemark: filter too): the link
        // keeps its mode, and its messages carry the annotations of wire.md 4.2.
        if (req.annotate && queue.structure instanceof ListStructure) return queue.structure.openConsumer(req, sink, { annotate: listAnnotations });
        return undefined;
      }
      // Commands on a queue without SOW.
      const { command, bookmark, options } = commandOf(req);
      if (command === 'sow') throw new TidemarkError(Conditions.notFound, `queue ${queue.name} is not a SOW queue (no sow.key): sow needs a state of the world`);
      if (!(queue.structure instanceof ListStructure)) return undefined;
      const markers = new MarkerSink(sink);
      const browse = { ...req, mode: 'copy' as const };
      if (command === 'sow_and_subscribe') {
        listMarker(markers, 'group_begin', undefined, options.query_id); listMarker(markers, 'group_end', queue.committedScn, options.query_id);
        return queue.structure.openConsumer(browse, markers, { startAfterScn: queue.committedScn, annotate: listAnnotations });
      }
      if (bookmark) throw unanswerableBookmark(queue, command);
      return queue.structure.openConsumer(browse, markers, { startAfterScn: queue.committedScn, annotate: listAnnotations });
    },
    managementOperations: {
      async 'SOW-DELETE'(req, b) {
        if (!req.name) throw new TidemarkError(Conditions.invalidField, 'SOW-DELETE needs application property name');
        const q = b.nodes.get(req.name);
        if (!q) throw new TidemarkError(Conditions.notFound, `no such queue: ${req.name}`);
        if (!(q.structure instanceof SowStructure)) throw new TidemarkError(Conditions.notFound, `queue ${req.name} is not a SOW queue`);
        const { filter, all } = sowDeleteRequest(req.body, req.name);
        const keys: string[] = [];
        if (all) for (const k of q.structure.records.keys()) keys.push(k);
        else {
          let f;
          try { f = compileFilter(filter!, 'content'); } catch (e) { throw new TidemarkError(Conditions.invalidField, `SOW-DELETE ${q.name}: filter: ${(e as Error).message}; nothing was deleted`); }
          for (const [k, r] of q.structure.records) if (f.matches(new MessageEnv(decodeMessage(r.bytes)))) keys.push(k);
        }
        const count = await q.structure.deleteKeys(keys);
        return { statusCode: 200, statusDescription: 'OK', body: { count } };
      },
    },
    start(b: BrokerContext) {
      recordLimit.maxBytes = b.config.limits.maxMessageSize;
      enabled = { history: b.extensions.has('history'), replay: b.extensions.has('replay') };
      timer = everySowQueue(b, opts.expiryIntervalMs ?? 1000, 'expiry', (s, now) => s.expiryDue(now), (s, now) => s.expireDue(now));
    },
    stop() { if (timer) clearInterval(timer); },
  };
}

/**
 * The body of a SOW-DELETE (docs/sow.md): a map with either `filter`, a non-empty content
 * filter, or `all: true`, which deletes every record. Anything else is refused and deletes
 * nothing. A missing or misspelt filter used to delete every record: a string body, a
 * `{Filter: ...}`, a data section, `{filter: null}` or `{filter: ""}` wiped the queue.
 */
export function sowDeleteRequest(body: unknown, queue: string): { filter?: string; all: boolean } {
  const bad = (why: string) => new TidemarkError(Conditions.invalidField, `SOW-DELETE ${queue}: ${why}; nothing was deleted`);
  const shape = Array.isArray(body) ? 'a list' : Buffer.isBuffer(body) || (body as any)?.typecode === 0x75 ? 'binary (a data section)' : typeof body === 'string' ? 'a string' : body === null ? 'null' : typeof body;
  if (body === null || typeof body !== 'object' || Array.isArray(body) || Buffer.isBuffer(body) || Object.getPrototypeOf(body) !== Object.prototype) {
    throw bad(`the body must be an amqp-value map, {filter: "<content filter>"} or {all: true}; got ${shape}`);
  }
  const m = body as Record<string, unknown>;
  const unknown = Object.keys(m).filter((k) => k !== 'filter' && k !== 'all');
  if (unknown.length) throw bad(`unknown key${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => JSON.stringify(k)).join(', ')} (known: filter, all)`);
  if (m.all !== undefined && typeof m.all !== 'boolean') throw bad(`all must be the boolean true, got ${JSON.stringify(m.all)}`);
  if (m.filter !== undefined) {
    if (typeof m.filter !== 'string' || m.filter.trim() === '') throw bad(`filter must be a non-empty content filter string, got ${m.filter === null ? 'null' : typeof m.filter === 'string' ? 'an empty string' : Array.isArray(m.filter) ? 'a list' : typeof m.filter}`);
    if (m.all === true) throw bad('give either filter or all: true, not both');
    return { filter: m.filter, all: false };
  }
  if (m.all !== true) throw bad('give filter (the records to delete) or all: true (every record)');
  return { all: true };
}

/** Runs one full retention pass now, the whole history swept (tests, tools). */
export async function runRetention(b: BrokerContext): Promise<void> {
  const now = b.clock.now();
  for (const q of b.nodes.list()) if (q.structure instanceof SowStructure) await q.structure.trim(now, true);
}

/** Expires every SOW record whose TTL has passed now (tests, tools); resolves with how many. */
export async function runExpiry(b: BrokerContext): Promise<number> {
  const now = b.clock.now();
  let n = 0;
  for (const q of b.nodes.list()) if (q.structure instanceof SowStructure) n += await q.structure.expireDue(now);
  return n;
}

/** One pass of the background task: expiry, then retention (tests, tools). */
export async function runSweeps(b: BrokerContext): Promise<number> {
  const n = await runExpiry(b);
  await runRetention(b);
  return n;
}

export { SowStructure };
