/**
 * State of the world, history and replay (semantics.md 2, 4-7) as one extension through
 * the core's points: queue arguments (`sow.key`, `sow.history.*`, `log.*`), the SOW
 * structure, attach filters (`tidemark:command`, `:bookmark`, `:options`), commands on plain
 * queues (empty group then live, replay by SCN), `SOW-DELETE`, statistics, and a background
 * task for retention and record expiry (TTL on queues without history). docs/sow.md.
 */
import type { Extension, FilterSpec, ConsumerRequest } from '../../core/extensions.js';
import type { Queue } from '../../core/queue/queue.js';
import type { DeliverySink, Consumer } from '../../core/queue/delivery.js';
import type { BrokerContext } from '../../core/broker-context.js';
import { ListStructure } from '../../core/queue/list-structure.js';
import { TidemarkError, Conditions } from '../../core/errors.js';
import { encodeMessage } from '../../codec/message-bytes.js';
import { typed } from '../../codec/amqp.js';
import { toStr, toDurationMs, toInt } from '../../address/index.js';
import { compileFilter } from '../../filter/index.js';
import { MessageEnv } from '../../core/queue/filter-env.js';
import { decodeMessage } from '../../codec/message-bytes.js';
import { queuePrefix, prefixEnd, readScn } from '../../core/storage/keyspace.js';
import { SowStructure } from './sow-structure.js';
import { SowConsumer, type SowPlan } from './sow-consumer.js';
import { parseKeySpec } from './sow-key.js';
import { parseBookmark, type Bookmark } from './bookmark.js';
import { parseCommand, parseOptions, type Command, type CommandOptions } from './options.js';
import { parseCheckpoint, encodeCheckpoint, WindowTracker, type Checkpoint } from './checkpoint.js';
import type { CheckpointPlan } from './sow-consumer.js';
import { DurableSubscriptions, DurableSink, subscriptionKey } from './durable.js';
import { MarkerSink } from './marker-sink.js';
import { TIME, timeKey } from './tables.js';
import { logger } from '../../core/log.js';

const log = logger('sow');

export const COMMAND = 'tidemark:command:symbol';
export const BOOKMARK = 'tidemark:bookmark:string';
export const OPTIONS = 'tidemark:options:map';
export const CHECKPOINT = 'tidemark:checkpoint:map';

const duration = (name: string) => (v: unknown) => toDurationMs(name, v);

/**
 * SCN of the last event at or before `ms` (0 when no retained event is that old), from the
 * time index. The index is sparse (a row for the first event of each new timestamp, see
 * SowStructure.prepare), so the answer is the event before the first indexed one that is
 * newer than `ms`, or the newest committed event when none is.
 */
async function scnAtTime(q: Queue, ms: number): Promise<number> {
  const store = q.ctx.store;
  const prefix = queuePrefix(TIME, q.id);
  const atOrBefore = await store.all({ gte: prefix, lt: timeKey(q.id, ms + 1, 0), reverse: true, limit: 1, keysOnly: true });
  if (atOrBefore.length === 0) return 0;
  const after = await store.all({ gte: timeKey(q.id, ms + 1, 0), lt: prefixEnd(prefix), limit: 1, keysOnly: true });
  return after.length ? readScn(after[0][0], 13) - 1 : q.committedScn;
}

const durablesByBroker = new WeakMap<BrokerContext, DurableSubscriptions>();

/** The durable subscriptions a broker keeps (tools, tests). */
export function listSubscriptions(b: BrokerContext) { return durablesByBroker.get(b)?.list() ?? []; }

export function sowExtension(opts: { retentionIntervalMs?: number } = {}): Extension {
  let timer: NodeJS.Timeout | undefined;
  let broker: BrokerContext | undefined;
  const durables = new DurableSubscriptions();
  /** Open SOW links by connection and link name, for `replace`. */
  const live = new Map<string, { consumer: SowConsumer; sink: DeliverySink }>();
  const linkId = (connection: string, link: string) => `${connection}\u0000${link}`;

  const filters: FilterSpec[] = [
    { symbol: COMMAND, parse: (v) => ({ data: parseCommand(v) }) },
    { symbol: BOOKMARK, parse: (v) => { if (typeof v !== 'string') throw new TidemarkError(Conditions.invalidField, 'tidemark:bookmark:string value must be a string'); return { data: parseBookmark(v) }; } },
    { symbol: OPTIONS, parse: (v) => ({ data: parseOptions(v) }) },
    { symbol: CHECKPOINT, parse: (v) => ({ data: parseCheckpoint(v) }) },
  ];

  /**
   * Where a checkpoint resumes (semantics.md 8). `undefined` bootstrap = online from `position`.
   * Falling off the log (or windowScn = 0) bootstraps a SOW queue and is scn-not-found elsewhere.
   */
  function checkpointPlan(q: Queue, cp: Checkpoint, oldest: number, canBootstrap: boolean): CheckpointPlan & { position: number } {
    const fellOff = (pos: number) => oldest > 0 && pos + 1 < oldest;
    const fresh = (): CheckpointPlan & { position: number } => {
      if (!canBootstrap) {
        throw new TidemarkError(Conditions.scnNotFound, `checkpoint position of ${q.name} is older than the retained log (oldest SCN ${oldest}); a queue without SOW cannot bootstrap`, { info: { 'oldest-scn': oldest, 'requested-scn': cp.windowScn } });
      }
      return { tracker: new WindowTracker({ prevScn: 0 }), skip: 0, bootstrap: {}, position: 0 };
    };
    if (cp.consumption_mode === 'BOOTSTRAP_SNAPSHOT') {
      if (!canBootstrap) throw new TidemarkError(Conditions.invalidField, `tidemark:checkpoint:map: consumption_mode BOOTSTRAP_SNAPSHOT needs a SOW queue; ${q.name} has none`);
      if (fellOff(cp.bootstrap_start_scn!)) return fresh();
      return { tracker: new WindowTracker({ prevScn: cp.bootstrap_start_scn! }), skip: 0, bootstrap: { start: cp.bootstrap_start_scn, resumeAfterKey: cp.snapshot_offset }, position: cp.bootstrap_start_scn! };
    }
    if (cp.consumption_mode === 'BOOTSTRAP_CATCHUP') {
      if (!canBootstrap) throw new TidemarkError(Conditions.invalidField, `tidemark:checkpoint:map: consumption_mode BOOTSTRAP_CATCHUP needs a SOW queue; ${q.name} has none`);
      const pos = cp.catchup_offset ?? cp.bootstrap_start_scn!;
      if (fellOff(pos)) return fresh();
      return { tracker: new WindowTracker({ prevScn: cp.prevScn, windowScn: cp.windowScn, windowOffset: cp.windowOffset }), skip: 0, bootstrap: { start: cp.bootstrap_start_scn, target: cp.bootstrap_target_scn, position: pos }, position: pos };
    }
    if (cp.windowScn === -1) {
      const pos = oldest > 0 ? oldest - 1 : q.committedScn;
      return { tracker: new WindowTracker({ prevScn: pos }), skip: 0, position: pos };
    }
    if (cp.windowScn > q.committedScn) throw new TidemarkError(Conditions.invalidField, `tidemark:checkpoint:map: windowScn ${cp.windowScn} is ahead of the head of ${q.name} (${q.committedScn})`);
    if (cp.windowScn === 0 && canBootstrap) return fresh();
    const pos = cp.windowOffset === -1 ? cp.windowScn : Math.max(0, cp.prevScn);
    if (fellOff(pos)) return fresh();
    // Mid-window: replay the window from its start and skip the `windowOffset` events already
    // consumed. The tracker starts before the window and counts the skipped events as they
    // pass (starting it at windowOffset counted them twice: the next checkpoints were ahead,
    // and a resume from one of them lost events).
    return { tracker: new WindowTracker({ prevScn: pos }), skip: cp.windowOffset === -1 ? 0 : cp.windowOffset, position: pos };
  }

  function plan(q: Queue, req: ConsumerRequest): { command: Command | 'default'; bookmark?: Bookmark; options: CommandOptions } {
    const command = (req.filters.get(COMMAND)?.data as Command | undefined) ?? 'default';
    const bookmark = req.filters.get(BOOKMARK)?.data as Bookmark | undefined;
    const options = (req.filters.get(OPTIONS)?.data as CommandOptions | undefined) ?? {};
    void q;
    return { command, bookmark, options };
  }

  /** Where a replay starts, per bookmark_not_found when the bookmark is older than the log. */
  function replayStart(q: Queue, bm: Bookmark, resolvedScn: number, options: CommandOptions, oldest: number): number {
    // `0` (and bookmark_not_found=epoch) means everything retained: start before the oldest event.
    const epoch = oldest > 0 ? oldest - 1 : 0;
    if (bm.kind === 'now') return q.committedScn;
    if (bm.kind === 'epoch') return epoch;
    const mode = options.bookmark_not_found ?? (bm.kind === 'scn' ? 'fail' : 'now');
    if (oldest > 0 && resolvedScn + 1 < oldest) {
      if (mode === 'fail') {
        throw new TidemarkError(Conditions.scnNotFound, `bookmark ${bm.kind === 'scn' ? bm.scn : bm.text} is older than the retained log of ${q.name} (oldest SCN ${oldest})`, { info: { 'oldest-scn': oldest, 'requested-scn': resolvedScn } });
      }
      return mode === 'epoch' ? epoch : q.committedScn;
    }
    return resolvedScn;
  }

  function openOnSow(s: SowStructure, req: ConsumerRequest, sink: DeliverySink, p: ReturnType<typeof plan>, resolvedScn?: number): SowConsumer {
    const q = s.queue;
    const { command, bookmark, options } = p;
    const sp: SowPlan = { command, options, completedMarker: false, annotate: req.annotate };
    const cp = req.filters.get(CHECKPOINT)?.data as Checkpoint | undefined;
    if (cp) {
      const plan = checkpointPlan(q, cp, s.oldestLogScn, true);
      sp.checkpoint = plan;
      sp.command = 'subscribe';
      sp.replayAfter = plan.position;
      return new SowConsumer(s, req, sink, sp);
    }
    if (bookmark) {
      if (command === 'subscribe' || command === 'default') {
        sp.replayAfter = replayStart(q, bookmark, resolvedScn ?? 0, options, s.oldestLogScn);
        sp.completedMarker = true;
        sp.command = 'subscribe';
      } else {
        if (!s.hasHistory) throw new TidemarkError(Conditions.invalidField, `queue ${q.name} keeps no history (sow.history.window): a ${command} with a bookmark cannot be answered`);
        const S = bookmark.kind === 'now' ? q.committedScn : bookmark.kind === 'epoch' ? 0 : resolvedScn ?? 0;
        if (bookmark.kind === 'time' && bookmark.ms < q.ctx.clock.now() - s.settings.historyWindow!) {
          sp.historicalScn = -1; // older than the window: empty result
        } else sp.historicalScn = S;
        if (command === 'sow_and_subscribe') {
          if (s.oldestLogScn > 0 && S + 1 < s.oldestLogScn) throw new TidemarkError(Conditions.scnNotFound, `the log of ${q.name} no longer covers SCN ${S} (oldest ${s.oldestLogScn})`, { info: { 'oldest-scn': s.oldestLogScn, 'requested-scn': S } });
          sp.completedMarker = true;
        }
      }
    }
    if (options.replace !== undefined) {
      // Replace (semantics.md 5): take over a link of this connection atomically.
      const old = live.get(linkId(req.connectionId, options.replace));
      if (!old) throw new TidemarkError(Conditions.notFound, `replace: no SOW link named ${options.replace} on this connection`);
      sp.replaceFrom = old.consumer.handOver();
      old.consumer.close();
      old.sink.close();
    }
    const consumer = new SowConsumer(s, req, sink, sp);
    const id = linkId(req.connectionId, req.linkName);
    live.set(id, { consumer, sink });
    const close = consumer.close.bind(consumer);
    consumer.close = () => { if (live.get(id)?.consumer === consumer) live.delete(id); close(); };
    return consumer;
  }

  /** The consumer for a request, durable or not; undefined leaves it to the queue's structure. */
  function openInner(queue: Queue, req: ConsumerRequest, sink: DeliverySink): Consumer | undefined {
    const p = plan(queue, req);
    const hasCmd = req.filters.has(COMMAND) || req.filters.has(BOOKMARK) || req.filters.has(OPTIONS) || req.filters.has(CHECKPOINT);
    if (queue.structure instanceof SowStructure) {
      const s = queue.structure;
      if (p.bookmark && (p.bookmark.kind === 'time' || p.bookmark.kind === 'scn')) {
        // Resolve the time asynchronously, then open; credit that arrives meanwhile is kept by the sink.
        const bm = p.bookmark;
        if (bm.kind === 'scn') return openOnSow(s, req, sink, p, bm.scn);
        let inner: SowConsumer | undefined; let closed = false;
        const pending = { onCredit: () => inner?.onCredit(), onDrain: () => inner?.onDrain(), close: () => { closed = true; inner?.close(); } };
        // Validate synchronously what can be validated.
        if ((p.command === 'sow' || p.command === 'sow_and_subscribe') && !s.hasHistory) throw new TidemarkError(Conditions.invalidField, `queue ${queue.name} keeps no history (sow.history.window): a ${p.command} with a bookmark cannot be answered`);
        scnAtTime(queue, bm.ms).then((scn) => {
          if (closed) return;
          try { inner = openOnSow(s, req, sink, p, scn); inner.onCredit(); }
          catch (e) { sink.close(e instanceof TidemarkError ? e : new TidemarkError(Conditions.internal, String(e))); }
        }, (err) => sink.close(new TidemarkError(Conditions.internal, String(err))));
        return pending;
      }
      return openOnSow(s, req, sink, p);
    }
    if (!hasCmd) return undefined;
    // Commands on a queue without SOW.
    if (p.command === 'sow') throw new TidemarkError(Conditions.notFound, `queue ${queue.name} is not a SOW queue (no sow.key): sow needs a state of the world`);
    if (!(queue.structure instanceof ListStructure)) return undefined;
    const markers = new MarkerSink(sink);
    const marker = (cmd: string, scn?: number) => markers.marker(encodeMessage({ message_annotations: { 'x-opt-tm-cmd': typed.symbol(cmd), ...(scn !== undefined ? { 'x-opt-tm-scn': typed.ulong(scn) } : {}) }, body: null }));
    const annotate = (e: { scn: number; ts: number }) => ({ 'x-opt-tm-cmd': typed.symbol('publish'), 'x-opt-tm-scn': typed.ulong(e.scn), 'x-opt-tm-ts': typed.timestamp(e.ts) });
    const browse = { ...req, mode: 'copy' as const };
    if (p.command === 'sow_and_subscribe') {
      marker('group_begin'); marker('group_end', queue.committedScn);
      return queue.structure.openConsumer(browse, markers, { startAfterScn: queue.committedScn, annotate });
    }
    const cp = req.filters.get(CHECKPOINT)?.data as Checkpoint | undefined;
    if (cp) {
      // Online only: every list entry is a window of one.
      const plan = checkpointPlan(queue, cp, queue.structure.stats().oldestScn, false);
      const tracker = plan.tracker;
      return queue.structure.openConsumer(browse, markers, {
        startAfterScn: plan.position,
        annotate: (e) => {
          tracker.pass(e.scn, undefined, e.ts);
          return { ...annotate(e), 'x-opt-tm-checkpoint': encodeCheckpoint(tracker.online()) };
        },
      });
    }
    // subscribe, optionally from a bookmark (SCN or epoch/now on a list queue).
    let start = queue.committedScn;
    let completed = false;
    if (p.bookmark) {
      completed = true;
      const oldest = queue.structure.stats().oldestScn;
      if (p.bookmark.kind === 'time') {
        let after = 0;
        for (const e of queue.structure.list.live()) { if (e.ts > p.bookmark.ms) break; after = e.scn; }
        start = after;
      } else start = replayStart(queue, p.bookmark, p.bookmark.kind === 'scn' ? p.bookmark.scn : 0, p.options, oldest);
    }
    return queue.structure.openConsumer(browse, markers, { startAfterScn: start, annotate, onCaughtUp: completed ? () => marker('completed', queue.committedScn) : undefined });
  }

  return {
    name: 'sow',
    queueArguments: [
      { name: 'sow.key', strict: true, parse: (v) => { const s = toStr('sow.key', v); parseKeySpec(s); return s; } },
      { name: 'sow.history.window', strict: true, parse: duration('sow.history.window') },
      { name: 'sow.history.granularity', strict: true, parse: duration('sow.history.granularity') },
      { name: 'log.retention', strict: true, parse: duration('log.retention') },
      { name: 'log.max_count', strict: true, parse: (v) => toInt('log.max_count', v, { min: 1 }) },
    ],
    validateArguments(args) {
      if (args['sow.key'] === undefined) {
        for (const k of ['sow.history.window', 'sow.history.granularity']) if (args[k] !== undefined) throw new Error(`${k} needs sow.key: history is kept per SOW key`);
      }
      if (args['sow.key'] !== undefined && (args['qpid.max_count'] !== undefined || args['qpid.max_size'] !== undefined)) {
        throw new Error('qpid.max_count/qpid.max_size do not apply to a SOW queue (use log.max_count / log.retention)');
      }
    },
    configureQueue({ queue, arguments: args }) {
      if (args['sow.key'] === undefined) return;
      const s = new SowStructure(queue, {
        key: parseKeySpec(args['sow.key'] as string),
        historyWindow: args['sow.history.window'] as number | undefined,
        historyGranularity: (args['sow.history.granularity'] as number | undefined) ?? 0,
        logRetention: args['log.retention'] as number | undefined,
        logMaxCount: args['log.max_count'] as number | undefined,
      });
      s.openConsumerImpl = (st, req, sink) => openOnSow(st, req, sink, plan(queue, req));
      queue.structure = s;
    },
    filters,
    openConsumer(queue, req, sink) {
      const hasCmd = req.filters.has(COMMAND) || req.filters.has(BOOKMARK) || req.filters.has(OPTIONS) || req.filters.has(CHECKPOINT);
      const isSow = queue.structure instanceof SowStructure;
      if (!req.durable || !(isSow || queue.browseOnly || hasCmd)) return openInner(queue, req, sink);
      // A durable subscription: resume after its stored position, or start one.
      const key = subscriptionKey(req.containerId, req.linkName);
      let sub = durables.get(key);
      if (sub && sub.queue !== queue.name) throw new TidemarkError(Conditions.preconditionFailed, `durable subscription ${req.containerId}/${req.linkName} belongs to queue ${sub.queue}, not ${queue.name}`);
      if (!sub) { sub = { queue: queue.name, position: null, created: queue.ctx.clock.now() }; durables.save(key, sub); }
      const dsink = new DurableSink(sink, durables, key, sub);
      let inner;
      if (sub.position !== null) {
        const resumed = { ...req, filters: new Map(req.filters) };
        if (queue.structure instanceof SowStructure) {
          inner = new SowConsumer(queue.structure, resumed, dsink, { command: 'subscribe', options: plan(queue, req).options, replayAfter: sub.position, completedMarker: false, annotate: req.annotate });
        } else if (queue.structure instanceof ListStructure) {
          inner = queue.structure.openConsumer({ ...req, mode: 'copy' }, dsink, { startAfterScn: sub.position });
        } else inner = openInner(queue, req, dsink);
      } else inner = openInner(queue, req, dsink);
      if (!inner) inner = queue.structure.openConsumer(req, dsink);
      const c = inner;
      return {
        onCredit: () => c.onCredit(),
        onDrain: () => c.onDrain(),
        close: (o) => { c.close(o); if (o?.linkClosed) durables.delete(key); },
      };
    },
    managementOperations: {
      async 'SUBSCRIPTION-QUERY'() {
        return { statusCode: 200, statusDescription: 'OK', body: durables.list() };
      },
      async 'SUBSCRIPTION-DELETE'(req) {
        const container = String(req.body?.container ?? ''), link = String(req.body?.link ?? req.name ?? '');
        if (!durables.delete(subscriptionKey(container, link))) return { statusCode: 404, statusDescription: `no durable subscription ${container}/${link}` };
        return { statusCode: 204, statusDescription: 'No Content' };
      },
      async 'SOW-DELETE'(req, b) {
        if (!req.name) throw new TidemarkError(Conditions.invalidField, 'SOW-DELETE needs application property name');
        const q = b.nodes.get(req.name);
        if (!q) throw new TidemarkError(Conditions.notFound, `no such queue: ${req.name}`);
        if (!(q.structure instanceof SowStructure)) throw new TidemarkError(Conditions.notFound, `queue ${req.name} is not a SOW queue`);
        const text = req.body?.filter;
        const keys: string[] = [];
        if (text === undefined || text === null || text === '') for (const k of q.structure.records.keys()) keys.push(k);
        else {
          let f;
          try { f = compileFilter(String(text), 'content'); } catch (e) { throw new TidemarkError(Conditions.invalidField, `filter: ${(e as Error).message}`); }
          for (const [k, r] of q.structure.records) if (f.matches(new MessageEnv(decodeMessage(r.bytes)))) keys.push(k);
        }
        const count = await q.structure.deleteKeys(keys);
        return { statusCode: 200, statusDescription: 'OK', body: { count } };
      },
    },
    async start(b) {
      broker = b;
      await durables.load(b.store, b.committer);
      durablesByBroker.set(b, durables);
      b.nodes.onDeleted.push((q) => durables.deleteForQueue(q.name));
      timer = setInterval(() => {
        const now = b.clock.now();
        for (const q of b.nodes.list()) {
          if (!(q.structure instanceof SowStructure)) continue;
          q.structure.expireDue(now).catch((err) => log.error('expiry failed', { queue: q.name, err }));
          q.structure.trim(now).catch((err) => log.error('retention failed', { queue: q.name, err }));
        }
      }, opts.retentionIntervalMs ?? 1000);
      timer.unref();
    },
    stop() { if (timer) clearInterval(timer); void broker; },
  };
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
