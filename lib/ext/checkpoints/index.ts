/**
 * Consumer checkpoints and durable subscriptions (semantics.md 8, wire.md 6), the Databus
 * model on AMQP: a receiver with `tidemark:checkpoint:map` gets a checkpoint on every
 * message and resumes from any of them with no gap and no duplicate (bootstrapping a SOW
 * queue from a snapshot when the log no longer reaches back); a receiver with source
 * durable = 2 / expiry-policy never has its position kept by the broker. Builds on `sow`
 * (SOW links, bootstrap snapshots, the log the positions point into).
 */
import type { Extension, ConsumerRequest, OpenNext } from '../../core/extensions.js';
import type { Queue } from '../../core/queue/queue.js';
import type { Consumer, DeliverySink } from '../../core/queue/delivery.js';
import type { BrokerContext } from '../../core/broker-context.js';
import type { Entry } from '../../core/queue/entry.js';
import type { FilterEnv } from '../../core/queue/filter-env.js';
import { MessageEnv } from '../../core/queue/filter-env.js';
import { decodeMessage } from '../../codec/message-bytes.js';
import { ListStructure } from '../../core/queue/list-structure.js';
import { TidemarkError, Conditions } from '../../core/errors.js';
import { SowStructure } from '../sow/sow-structure.js';
import { SowConsumer, type CheckpointPlan } from '../sow/sow-consumer.js';
import { commandOf, listAnnotations, listMarker, COMMAND, BOOKMARK, OPTIONS } from '../sow/index.js';
import { isLogBounded, oldestRetained, droppedByLogBound, noGaps } from '../replay/index.js';
import type { SowEvent } from '../sow/sow-structure.js';
import { MarkerSink } from '../sow/marker-sink.js';
import { parseCheckpoint, encodeCheckpoint, WindowTracker, type Checkpoint } from './checkpoint.js';
import { DurableSubscriptions, DurableSink, subscriptionKey, type Subscription } from './durable.js';
import { logger } from '../../core/log.js';

const log = logger('checkpoints');

export const CHECKPOINT = 'tidemark:checkpoint:map';


const durablesByBroker = new WeakMap<BrokerContext, DurableSubscriptions>();

/** The durable subscriptions a broker keeps (tools, tests). */
export function listSubscriptions(b: BrokerContext) { return durablesByBroker.get(b)?.list() ?? []; }

/**
 * Where a checkpoint resumes (semantics.md 8). `undefined` bootstrap = online from `position`.
 * Falling off the log (or windowScn = 0) bootstraps a SOW queue and is scn-not-found elsewhere.
 */
export function checkpointPlan(q: Queue, cp: Checkpoint, oldest: number, canBootstrap: boolean, deletes?: Pick<SowStructure, 'knowsDeletesAfter' | 'tombstoneFloor' | 'tombstonesSinceMs'>, ownQueue = false): CheckpointPlan & { position: number } {
  const tombstoneFloor = deletes?.tombstoneFloor ?? Infinity;
  // The consumer's last event is from this queue's time of remembering deletes (a checkpoint
  // without tsNsecs, or from a queue deleted and re-created since, cannot show it: full).
  // `ownQueue`: a durable subscription's position, which is this queue's.
  const sameQueue = deletes !== undefined && (ownQueue || (cp.tsNsecs !== undefined && cp.tsNsecs >= 0n && Number(cp.tsNsecs / 1_000_000n) >= deletes.tombstonesSinceMs));
  // Its last event (or snapshot) is older than this queue: its SCNs are an earlier queue's of
  // the name, whatever they say here (SCNs start again at 1). Only a full bootstrap is right.
  const created = q.def?.created;
  if (!ownQueue && created !== undefined && cp.tsNsecs !== undefined && cp.tsNsecs >= 0n && cp.tsNsecs < BigInt(Math.floor(created)) * 1_000_000n) {
    if (!canBootstrap) {
      throw new TidemarkError(Conditions.scnNotFound, `checkpoint is from before queue ${q.name} was created (tsNsecs ${cp.tsNsecs}, created ${new Date(created).toISOString()}): its positions are another queue's, and a queue without SOW cannot bootstrap`, { info: { 'oldest-scn': oldest, 'requested-scn': Math.max(0, cp.windowScn) } });
    }
    return { tracker: new WindowTracker({ prevScn: 0 }), skip: 0, bootstrap: {}, position: 0 };
  }
  refuseAhead(q, cp);
  const fellOff = (pos: number) => oldest > 0 && pos + 1 < oldest;
  /**
   * A bootstrap from scratch for a consumer whose state is that after SCN `had` (0: none).
   * When the queue knows every delete since then, an incremental one (semantics.md 8): the
   * records changed from had + 1 on, and tombstones; else a full one (since 0: the consumer
   * resets its state at group_begin).
   */
  const fresh = (had = 0): CheckpointPlan & { position: number } => {
    if (!canBootstrap) {
      throw new TidemarkError(Conditions.scnNotFound, `checkpoint position of ${q.name} is older than the retained log (oldest SCN ${oldest}); a queue without SOW cannot bootstrap`, { info: { 'oldest-scn': oldest, 'requested-scn': cp.windowScn } });
    }
    const since = sameQueue && deletes!.knowsDeletesAfter(had) ? had + 1 : 0;
    return { tracker: new WindowTracker({ prevScn: 0 }), skip: 0, bootstrap: since > 0 ? { since } : {}, position: 0 };
  };
  const since = cp.bootstrap_since_scn ?? 0;
  if (cp.consumption_mode === 'BOOTSTRAP_SNAPSHOT') {
    if (!canBootstrap) throw new TidemarkError(Conditions.invalidField, `tidemark:checkpoint:map: consumption_mode BOOTSTRAP_SNAPSHOT needs a SOW queue; ${q.name} has none`);
    // A snapshot resumes where it stopped; from scratch (the same since) when its start fell off
    // the log or its tombstones are gone. The consumer's state is then still that before `since`
    // plus some of the changes since: sending them all again from `since` is idempotent.
    if (fellOff(cp.bootstrap_start_scn!) || (since > 0 && since < tombstoneFloor)) return fresh(since > 0 ? since - 1 : 0);
    return { tracker: new WindowTracker({ prevScn: cp.bootstrap_start_scn! }), skip: 0, bootstrap: { start: cp.bootstrap_start_scn, resumeAfterKey: cp.snapshot_offset, ...(since > 0 ? { since } : {}) }, position: cp.bootstrap_start_scn! };
  }
  if (cp.consumption_mode === 'BOOTSTRAP_CATCHUP') {
    if (!canBootstrap) throw new TidemarkError(Conditions.invalidField, `tidemark:checkpoint:map: consumption_mode BOOTSTRAP_CATCHUP needs a SOW queue; ${q.name} has none`);
    const pos = cp.catchup_offset ?? cp.bootstrap_start_scn!;
    // Its state is the state after `pos` (the snapshot, then the events up to it): a restart
    // bootstraps the changes since (semantics.md 8: "since = the snapshot's progress").
    if (fellOff(pos)) return fresh(pos);
    return { tracker: new WindowTracker({ prevScn: cp.prevScn, windowScn: cp.windowScn, windowOffset: cp.windowOffset }), skip: 0, bootstrap: { start: cp.bootstrap_start_scn, target: cp.bootstrap_target_scn, position: pos, ...(since > 0 ? { since } : {}) }, position: pos };
  }
  if (cp.windowScn === -1) {
    const pos = oldest > 0 ? oldest - 1 : q.committedScn;
    return { tracker: new WindowTracker({ prevScn: pos }), skip: 0, position: pos };
  }
  if (cp.windowScn === 0 && canBootstrap) return fresh();
  const pos = cp.windowOffset === -1 ? cp.windowScn : Math.max(0, cp.prevScn);
  if (fellOff(pos)) return fresh(Math.max(0, cp.prevScn));
  // Mid-window: replay the window from its start and skip the `windowOffset` events already
  // consumed. The tracker starts before the window and counts the skipped events as they
  // pass (starting it at windowOffset counted them twice: the next checkpoints were ahead,
  // and a resume from one of them lost events).
  return { tracker: new WindowTracker({ prevScn: pos }), skip: cp.windowOffset === -1 ? 0 : cp.windowOffset, position: pos };
}

/** The SCN fields of a checkpoint, each checked against the queue's head. */
const SCN_FIELDS = ['windowScn', 'prevScn', 'bootstrap_since_scn', 'bootstrap_start_scn', 'bootstrap_target_scn', 'catchup_offset'] as const;

/**
 * Every SCN a checkpoint holds names an event the broker sent, so none can be past the head.
 * One that is (a checkpoint kept from a broker whose data was since replaced, say) would skip
 * the events up to it when they come: a catch-up at catchup_offset 1000 on a queue at SCN 5
 * went online after 1000, a snapshot from bootstrap_start_scn 1000 likewise. Refused, naming
 * the field, as an SCN bookmark ahead of the head is (bookmark.ts refuseBookmarkAhead); and so
 * are bootstrap positions that contradict each other (a catch-up target before its start, or
 * an offset past its target), which skip events the same way.
 */
function refuseAhead(q: Queue, cp: Checkpoint): void {
  const head = q.committedScn;
  for (const f of SCN_FIELDS) {
    const v = cp[f];
    if (v !== undefined && v > head) throw new TidemarkError(Conditions.invalidField, `tidemark:checkpoint:map: ${f} ${v} is ahead of the head of ${q.name} (${head}): the events up to it would be skipped`);
  }
  if (cp.consumption_mode === 'BOOTSTRAP_CATCHUP') {
    const start = cp.bootstrap_start_scn!, target = cp.bootstrap_target_scn!;
    if (target < start) throw new TidemarkError(Conditions.invalidField, `tidemark:checkpoint:map: bootstrap_target_scn ${target} is before bootstrap_start_scn ${start}`);
    if (cp.catchup_offset !== undefined && cp.catchup_offset > target) throw new TidemarkError(Conditions.invalidField, `tidemark:checkpoint:map: catchup_offset ${cp.catchup_offset} is past bootstrap_target_scn ${target}`);
  }
}

/**
 * A link with a checkpoint filter: checkpoints on every message from where it resumes.
 * `ownQueue`: the checkpoint is a durable subscription's position in this queue.
 */
function openCheckpointed(queue: Queue, req: ConsumerRequest, sink: DeliverySink, cp: Checkpoint, ownQueue = false): Consumer | undefined {
  const { command, options } = commandOf(req);
  if (queue.structure instanceof SowStructure) {
    const s = queue.structure;
    // (The rows still there, not logFloor: a checkpoint resumes from any event the log still
    // holds, which spares it a bootstrap; a bookmark's answer is what log.max_count says.)
    const plan = checkpointPlan(queue, cp, s.oldestLogScn, true, s, ownQueue);
    return new SowConsumer(s, req, sink, { command: 'subscribe', options, completedMarker: false, annotate: req.annotate, checkpoint: plan, replayAfter: plan.position });
  }
  // A plain queue: online only (every entry is a window of one). Its sow / sow_and_subscribe
  // answers are the sow extension's (not-found, empty group then live).
  if (!(queue.structure instanceof ListStructure) || command === 'sow' || command === 'sow_and_subscribe') return undefined;
  const plan = checkpointPlan(queue, cp, oldestRetained(queue, queue.structure), false, undefined, ownQueue);
  const tracker = plan.tracker;
  // Falling behind the log bound while it reads is what falling off before the attach is (no
  // gap: semantics.md 8); it used to skip what was dropped under it.
  const gaps = noGaps(queue.structure, req, (position, oldest) => `the checkpoint reader of ${queue.name} is at SCN ${position}, and the log bound dropped the messages after it before they were read (oldest SCN ${oldest}): a queue without SOW cannot bootstrap, so the link is detached rather than go on with a gap`);
  return gaps.opened(queue.structure.openConsumer({ ...req, mode: 'copy' }, new MarkerSink(sink, gaps.rule), {
    startAfterScn: plan.position,
    annotate: (e) => {
      tracker.pass(e.scn, undefined, e.ts);
      return { ...listAnnotations(e), 'x-opt-tm-checkpoint': encodeCheckpoint(tracker.online()) };
    },
  }));
}

/** A link with a Tidemark command filter (wire.md 4), a checkpoint included. */
function isCommandLink(req: ConsumerRequest): boolean {
  return req.filters.has(COMMAND) || req.filters.has(BOOKMARK) || req.filters.has(OPTIONS) || req.filters.has(CHECKPOINT);
}

/** Its owner, or a user with manage on its queue, sees and ends a durable subscription (docs/security.md). */
function mayManage(b: BrokerContext, user: string, sub: Subscription): boolean {
  return sub.user === user || b.extensions.authorize(user, 'manage', sub.queue);
}

/**
 * A durable sow_and_subscribe whose events depend on what it delivered before (`oof`
 * notices, a `top_n` page) resumes with a new snapshot rather than the events since its
 * position: which records it holds is not kept, and without it the resumed link sent no
 * `oof` and every event, in the page or not.
 */
function resumesBySnapshot(req: ConsumerRequest): boolean {
  const { command, options } = commandOf(req);
  return command === 'sow_and_subscribe' && (options.oof === true || options.top_n !== undefined);
}

/** The position a durable subscription is at has fallen off the log that begins at `oldest`. */
function refuseFallenOff(queue: Queue, req: ConsumerRequest, position: number, oldest: number): void {
  if (oldest > 0 && position + 1 < oldest) {
    throw new TidemarkError(Conditions.scnNotFound, `durable subscription ${req.containerId}/${req.linkName} is at SCN ${position}, older than the retained log of ${queue.name} (oldest SCN ${oldest}): the events between are gone; end the subscription (SUBSCRIPTION-DELETE) to start a new one`, { info: { 'oldest-scn': oldest, 'requested-scn': position } });
  }
}

/**
 * A durable subscription resumed after `position`: what its link's filters ask for, as the
 * first attach had it (checkpoints, `completed` after a bookmark's replay, annotations), from
 * there. A position the log no longer holds is scn-not-found, or with a checkpoint filter on a
 * SOW queue a bootstrap, as such a checkpoint gets. (The resume used to be a bare consumer:
 * no checkpoints, no `completed`, no annotations on a plain queue, and after a restart, or
 * always on a plain queue, the events after a gap as if none were missing.)
 */
function resumeDurable(queue: Queue, req: ConsumerRequest, sink: DeliverySink, position: number): Consumer | undefined {
  if (req.filters.has(CHECKPOINT)) {
    const consumer = openCheckpointed(queue, req, sink, { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: position, prevScn: position, windowOffset: -1 }, true);
    if (consumer) return consumer;
  }
  const { bookmark, options } = commandOf(req);
  // (a bookmark only said where the subscription began; its replay still ends with completed)
  const completed = bookmark !== undefined;
  if (queue.structure instanceof SowStructure) {
    refuseFallenOff(queue, req, position, queue.structure.oldestLogScn);
    return new SowConsumer(queue.structure, { ...req, filters: new Map(req.filters) }, sink, { command: 'subscribe', options, replayAfter: position, completedMarker: completed, annotate: req.annotate });
  }
  if (queue.structure instanceof ListStructure) {
    const list = queue.structure;
    // Only log.* makes a plain queue's messages a log that readers fall off; a browser of a ring
    // or TTL queue reads what is there, as in qpidd.
    if (isLogBounded(list)) refuseFallenOff(queue, req, position, oldestRetained(queue, list));
    const markers = new MarkerSink(sink);
    return list.openConsumer({ ...req, mode: 'copy' }, markers, {
      startAfterScn: position,
      annotate: req.annotate ? listAnnotations : undefined,
      onCaughtUp: completed ? () => listMarker(markers, 'completed', queue.committedScn) : undefined,
    });
  }
  return undefined;
}

type Predicate = (env: FilterEnv) => boolean;

/**
 * The values of a link's message-selecting filters, by symbol, as kept in its subscription
 * (Subscription.selectors); undefined when one of them is not text (not kept: the broker
 * then skips nothing for the subscription while it is detached).
 */
function selectorsOf(req: ConsumerRequest): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  for (const [symbol, parsed] of req.filters) {
    if (!parsed.predicate) continue;
    let v: any;
    try { v = JSON.parse(req.filterTexts?.get(symbol) ?? 'null'); } catch { return undefined; }
    if (typeof v === 'string') out[symbol] = v;
    else if (v && v.type === 'Buffer' && Array.isArray(v.data)) out[symbol] = Buffer.from(v.data).toString('utf8'); // (as the filter reads a binary value)
    else return undefined;
  }
  return out;
}

/** Whether an event passes every predicate; a predicate that throws counts as a match (nothing is skipped on a doubt). */
function matchesAll(preds: Predicate[], env: FilterEnv): boolean {
  try { for (const p of preds) if (!p(env)) return false; } catch { return true; }
  return true;
}

/** A durable subscription's filters as one text, bookmark and checkpoint left out (they only say where it starts). */
function subscriptionFilters(req: ConsumerRequest): string {
  const texts = req.filterTexts ?? new Map<string, string>();
  return [...texts].filter(([symbol]) => symbol !== BOOKMARK && symbol !== CHECKPOINT).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([symbol, text]) => `${symbol}=${text}`).join(' ');
}

export function checkpointsExtension(): Extension {
  const durables = new DurableSubscriptions();
  /** The link attached to each durable subscription now, by subscription key (latin1): ends it with that error (taken over, or the subscription deleted). */
  const attached = new Map<string, (error: TidemarkError) => void>();
  /** The sink of the link attached to each subscription now, by id. */
  const sinks = new Map<string, DurableSink>();
  /** Each subscription's predicates: its link's, or rebuilt from its record (null: not known). */
  const predicateCache = new WeakMap<Subscription, Predicate[] | null>();
  /** Structures whose removals or events move detached subscriptions (watch). */
  const watched = new WeakSet<object>();
  let broker: BrokerContext | undefined;

  function predicatesOf(sub: Subscription, queue: Queue): Predicate[] | null {
    const c = predicateCache.get(sub);
    if (c !== undefined) return c;
    let preds: Predicate[] | null = [];
    if (sub.filters !== '') {
      if (!sub.selectors || !broker) preds = null;
      else {
        for (const [symbol, value] of Object.entries(sub.selectors)) {
          let p: Predicate | undefined;
          try { p = broker.extensions.filter(symbol)?.parse(value, { queue }).predicate; } catch { p = undefined; }
          if (!p) { preds = null; break; }
          preds.push(p);
        }
      }
    }
    predicateCache.set(sub, preds);
    return preds;
  }

  /** A subscription that is this queue's, not attached, at a position: one a removal or an event may move. */
  function detachedAt(id: string, queue: Queue): Subscription | undefined {
    if (sinks.has(id)) return undefined;
    const sub = durables.getById(id);
    if (!sub || sub.position === null || (sub.queueCreated !== undefined && sub.queueCreated !== queue.def.created)) return undefined;
    return sub;
  }

  /**
   * A detached subscription's position moves over events its filter skips, as its link's would
   * (DurableSink.passed), where the log is about to lose them: on a plain queue when the entry
   * right after the position leaves (the log bound, or any other removal), on a SOW queue as
   * events commit while it is at the head. Without it a subscription whose filter matches
   * little was refused on its next attach once log.max_count such events had passed, though it
   * missed nothing. Only an event right after the position moves it (nothing between is
   * unknown), and never one its filter may match; with filters not known (a record from before
   * they were kept, a filter that is not text) nothing moves.
   */
  function watch(queue: Queue): void {
    const st = queue.structure;
    if (watched.has(st)) return;
    if (st instanceof ListStructure) {
      // Only a log-bounded plain queue refuses a position behind its oldest message.
      if (!isLogBounded(st)) return;
      watched.add(st);
      st.onRemoved.push((e) => listRemoved(queue, e));
    } else if (st instanceof SowStructure) {
      watched.add(st);
      watchSow(queue, st);
    }
  }

  function listRemoved(queue: Queue, e: Entry): void {
    if (!e.committed) return; // a failed publish's own entry, never an event
    const ids = durables.idsOf(queue.name);
    if (!ids?.size) return;
    let env: FilterEnv | undefined;
    const matches = (preds: Predicate[] | null) => preds === null || preds.length === 0 || matchesAll(preds, env ??= MessageEnv.ofBytes(e.bytes));
    for (const id of ids) {
      const live = sinks.get(id);
      if (live) {
        // The attached link's reader may not have reached it: gone by the log bound, it is lost to the link.
        const sub = durables.getById(id);
        if (sub && droppedByLogBound(e)) live.dropped(e.scn, () => matches(predicatesOf(sub, queue)));
        continue;
      }
      const sub = detachedAt(id, queue);
      if (!sub || e.scn !== sub.position! + 1 || matches(predicatesOf(sub, queue))) continue;
      sub.position = e.scn;
      durables.touch(id, sub);
    }
  }

  function watchSow(queue: Queue, s: SowStructure): void {
    // The SCN of the last committed event: a subscription at it has nothing between it and the next.
    let prev = queue.committedScn;
    s.onCommitted.push((ev) => {
      const ids = durables.idsOf(queue.name);
      if (ids?.size) sowEvent(queue, ids, prev, ev);
      prev = ev.scn;
    });
  }

  /** A committed SOW event `ev`, the one after `prev`: detached subscriptions at `prev` whose filter skips it pass it. */
  function sowEvent(queue: Queue, ids: ReadonlySet<string>, prev: number, ev: SowEvent): void {
    let env: FilterEnv | undefined;
    for (const id of ids) {
      const sub = detachedAt(id, queue);
      if (!sub || sub.position! < prev || sub.position! >= ev.scn) continue;
      const preds = predicatesOf(sub, queue);
      // (a resumed link sends a delete, as any event, when the record's last state matches)
      if (preds === null || preds.length === 0 || matchesAll(preds, env ??= new MessageEnv(ev.view ??= decodeMessage(ev.bytes)))) continue;
      sub.position = ev.scn;
      durables.touch(id, sub);
    }
  }

  /** The link's own consumer (checkpointed, or whatever the extensions below open). */
  function open(queue: Queue, req: ConsumerRequest, sink: DeliverySink, next: OpenNext): Consumer {
    const cp = req.filters.get(CHECKPOINT)?.data as Checkpoint | undefined;
    return (cp && openCheckpointed(queue, req, sink, cp)) || next(req, sink);
  }

  /**
   * A durable subscription: resume after its stored position, or start one.
   *
   * One subscription is one link: a second attach with the same container-id and link name
   * while the first is attached takes the subscription over, and the first link is detached
   * with `amqp:link:stolen`. Two links used to share it, both receiving every event and both
   * moving one position. Taking over rather than refusing (precondition-failed): AMQP 2.6.1
   * makes a link name unique between two containers, and the link-error `stolen` is "the link
   * has been attached elsewhere, causing the existing attachment to be forcibly closed"; Qpid
   * Broker-J does exactly this ("Link is being stolen by connection ..."). It also lets a
   * consumer whose connection died without a close (no detach yet, until the idle time-out)
   * resume at once. The position stays exact: the old link's accepted deliveries still move
   * it, the new link resumes after it, and nothing is skipped (at worst delivered twice).
   */
  function openDurable(queue: Queue, req: ConsumerRequest, sink: DeliverySink, next: OpenNext): Consumer {
    // The key is container-id NUL link name: a NUL in the container-id would make two
    // (container, link) pairs one subscription.
    if (req.containerId.includes('\u0000')) throw new TidemarkError(Conditions.invalidField, `container-id ${JSON.stringify(req.containerId)} holds a NUL character: it cannot name a durable subscription`);
    const key = subscriptionKey(req.containerId, req.linkName);
    const id = key.toString('latin1');
    let sub = durables.get(key);
    // (container-id, link name) are the client's to choose: another user naming them gets
    // neither the subscription nor what queue it reads.
    if (sub && sub.user !== undefined && sub.user !== req.user) throw new TidemarkError(Conditions.unauthorized, `durable subscription ${req.containerId}/${req.linkName} belongs to another user`);
    if (sub && sub.queue !== queue.name) throw new TidemarkError(Conditions.preconditionFailed, `durable subscription ${req.containerId}/${req.linkName} belongs to queue ${sub.queue}, not ${queue.name}`);
    // A position in an earlier queue of this name means nothing in this one (its SCNs began again).
    if (sub && sub.queueCreated !== undefined && sub.queueCreated !== queue.def.created) { durables.delete(key); sub = undefined; }
    // Filters changed on a re-attach would apply from the old position: records that match
    // only now, or lie before it, would never come, and a `sow` would stay open as a
    // subscribe. Refused as a changed address is (AMQP 2.6.3 lets a broker keep its terminus).
    const filters = subscriptionFilters(req);
    if (sub && sub.filters !== undefined && sub.filters !== filters) {
      throw new TidemarkError(Conditions.preconditionFailed, `durable subscription ${req.containerId}/${req.linkName} was made with filters ${sub.filters || '(none)'}, and this attach asks for ${filters || '(none)'}: attach with the same filters, or end the subscription (detach with closed=true, or SUBSCRIPTION-DELETE) to make a new one`);
    }
    // (records from before filters, or selectors, were kept take this attach's)
    if (sub && (sub.filters === undefined || sub.selectors === undefined)) {
      sub.filters = filters;
      const selectors = selectorsOf(req);
      if (selectors) sub.selectors = selectors;
      durables.save(key, sub);
    }
    // A new subscription is stored once its link is open: a refused attach leaves none.
    const fresh = !sub;
    if (!sub) sub = { queue: queue.name, position: null, created: queue.ctx.clock.now(), user: req.user, queueCreated: queue.def.created, filters, selectors: selectorsOf(req) };
    predicateCache.set(sub, req.predicates);
    watch(queue);
    const dsink = new DurableSink(sink, durables, key, sub);
    // A `sow` is answered again (a query has no position to resume), and a sow_and_subscribe
    // with oof or a page gets a new snapshot (above).
    const resumes = sub.position !== null && commandOf(req).command !== 'sow' && !resumesBySnapshot(req);
    const inner = (resumes && resumeDurable(queue, req, dsink, sub.position!)) || open(queue, req, dsink, next);
    if (fresh) durables.save(key, sub);
    // the new link is open: the old one, if any, goes
    attached.get(id)?.(new TidemarkError(Conditions.linkStolen, `durable subscription ${req.containerId}/${req.linkName} on queue ${queue.name} was attached again (connection ${req.connectionId}); this link is detached`));
    sinks.set(id, dsink);
    // Detached: its position is the broker's to move again (watch), and what its link passed is written now.
    const detached = () => { if (sinks.get(id) === dsink) sinks.delete(id); durables.flush(id); };
    let stolen = false;
    const steal = (error: TidemarkError) => {
      stolen = true;
      if (attached.get(id) === steal) attached.delete(id);
      inner.close();
      detached();
      sink.close(error);
    };
    attached.set(id, steal);
    return {
      onCredit: () => { if (!stolen) inner.onCredit(); },
      onDrain: () => { if (!stolen) inner.onDrain(); },
      close: (o) => {
        if (stolen) return; // the subscription is the new link's now, whatever this detach says
        if (attached.get(id) === steal) attached.delete(id);
        inner.close(o);
        // A client's detach with closed=true ends it; one answering the broker's detach with an
        // error (scn-not-found) does not: the subscription stays where it was, to be told again.
        if (o?.linkClosed && !dsink.closedWithError) durables.delete(key);
        detached();
      },
    };
  }

  return {
    name: 'checkpoints',
    requires: ['sow'],
    filters: [{ symbol: CHECKPOINT, parse: (v) => ({ data: parseCheckpoint(v) }) }],
    // A checkpointed link reads the log: it never consumes (the reply says copy).
    browsesQueue: (_queue, req) => req.filters.has(CHECKPOINT),
    openConsumer(queue, req, sink, next) {
      // Durable where the broker can keep a position: SOW and browse-only queues, command links.
      if (req.durable && (queue.structure instanceof SowStructure || queue.browseOnly || isCommandLink(req))) return openDurable(queue, req, sink, next);
      const cp = req.filters.get(CHECKPOINT)?.data as Checkpoint | undefined;
      return cp ? openCheckpointed(queue, req, sink, cp) : undefined;
    },
    managementOperations: {
      async 'SUBSCRIPTION-QUERY'(req, b) {
        return { statusCode: 200, statusDescription: 'OK', body: durables.list().filter((s) => mayManage(b, req.user, s)) };
      },
      async 'SUBSCRIPTION-DELETE'(req, b) {
        // Strings only: a list or map used to be turned into text ("1,2") and named another subscription.
        const body = req.body;
        if (body === null || typeof body !== 'object' || Object.getPrototypeOf(body) !== Object.prototype) { // (a list, binary, data sections)
          return { statusCode: 400, statusDescription: 'SUBSCRIPTION-DELETE body must be a map {container, link}' };
        }
        for (const f of ['container', 'link'] as const) {
          if (body[f] !== undefined && typeof body[f] !== 'string') return { statusCode: 400, statusDescription: `SUBSCRIPTION-DELETE: ${f} must be a string` };
        }
        const container = String(body.container ?? ''), link = String(body.link ?? req.name ?? '');
        const key = subscriptionKey(container, link);
        const sub = durables.get(key);
        // Another user's subscription on a queue this user may not manage: as if it did not exist.
        if (!sub || !mayManage(b, req.user, sub) || !durables.delete(key)) return { statusCode: 404, statusDescription: `no durable subscription ${container ? `${container}/` : ''}${link} (container ${JSON.stringify(container)}, link ${JSON.stringify(link)})` };
        // Its link, if attached, ends with it (it ran on untracked, and its next attach began anew).
        attached.get(key.toString('latin1'))?.(new TidemarkError(Conditions.resourceDeleted, `durable subscription ${container}/${link} on queue ${sub.queue} was deleted (SUBSCRIPTION-DELETE by ${req.user}); this link is detached`));
        return { statusCode: 204, statusDescription: 'No Content' };
      },
    },
    async start(b) {
      broker = b;
      await durables.load(b.store, b.committer);
      // Subscriptions whose queue did not survive the restart (a non-durable one) end with it,
      // as those of a deleted queue do: a queue of that name made later is another queue.
      for (const s of durables.list()) {
        const q = b.nodes.get(s.queue);
        if (q && (s.queueCreated === undefined || s.queueCreated === q.def.created)) continue;
        durables.delete(subscriptionKey(s.container, s.link));
        log.info('durable subscription ended: its queue is gone', { container: s.container, link: s.link, queue: s.queue });
      }
      for (const s of durables.list()) { const q = b.nodes.get(s.queue); if (q) watch(q); }
      durablesByBroker.set(b, durables);
      b.nodes.onDeleted.push((q) => durables.deleteForQueue(q.name));
    },
    stop() { durables.stop(); },
  };
}
