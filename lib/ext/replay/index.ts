/**
 * Replay (semantics.md 7): the transaction log of a queue, bounded by `log.retention` and
 * `log.max_count` and trimmed in the background, and `subscribe` from a bookmark (`0`, an
 * SCN, an instant, `now`): the logged events after it, then `completed`, then live, with
 * `bookmark_not_found` deciding what a bookmark older than the log gets (wire.md 5). On a
 * SOW queue the events come from its log (through the `sow` extension's consumer); on a
 * plain queue from the entries it still holds.
 */
import type { Extension, ConsumerRequest } from '../../core/extensions.js';
import type { Queue } from '../../core/queue/queue.js';
import type { DeliverySink } from '../../core/queue/delivery.js';
import { ListStructure, type ListConsumer } from '../../core/queue/list-structure.js';
import type { Entry } from '../../core/queue/entry.js';
import { TidemarkError, Conditions } from '../../core/errors.js';
import { toDurationMs, toInt } from '../../address/index.js';
import { SowStructure } from '../sow/sow-structure.js';
import { commandOf, openSowLink, type LinkCommand } from '../sow/links.js';
import { listAnnotations, listMarker, everySowQueue } from '../sow/index.js';
import { openAtBookmark, refuseBookmarkAhead, type Bookmark } from '../sow/bookmark.js';
import { MarkerSink } from '../sow/marker-sink.js';
import type { CommandOptions } from '../sow/options.js';

/** Where a replay starts, per bookmark_not_found when the bookmark is older than the log. */
/**
 * Where a replay starts: after this SCN; `undefined` for the live end (`now`, or a bookmark
 * that fell off with bookmark_not_found=now), taken when the link starts sending, so that
 * nothing committed in between is replayed before `completed` ("now: nothing old", wire.md 5).
 */
export function replayStart(q: Queue, bm: Bookmark, resolvedScn: number, options: CommandOptions, oldest: number): number | undefined {
  // `0` (and bookmark_not_found=epoch) means everything retained: start before the oldest event.
  const epoch = oldest > 0 ? oldest - 1 : 0;
  if (bm.kind === 'now') return undefined;
  if (bm.kind === 'epoch') return epoch;
  const mode = options.bookmark_not_found ?? (bm.kind === 'scn' ? 'fail' : 'now');
  if (oldest > 0 && resolvedScn + 1 < oldest) {
    if (mode === 'fail') {
      throw new TidemarkError(Conditions.scnNotFound, `bookmark ${bm.kind === 'scn' ? bm.scn : bm.text} is older than the retained log of ${q.name} (oldest SCN ${oldest})`, { info: { 'oldest-scn': oldest, 'requested-scn': resolvedScn } });
    }
    return mode === 'epoch' ? epoch : undefined;
  }
  return resolvedScn;
}

/** Plain queues whose messages log.max_count / log.retention bound. */
const boundedLists = new WeakSet<ListStructure>();
/** Entries the log bound chose to drop (log.max_count at admission, log.retention's trim). */
const boundDrops = new WeakSet<Entry>();
/**
 * Per bounded plain queue, the newest message the log bound dropped: a time after it and
 * before the oldest message held resolves to it (wire.md 5), not to "older than the log".
 * In memory only: after a restart such a time is older than the log again (bookmark_not_found
 * decides) until the bound drops another message.
 */
const logCuts = new WeakMap<ListStructure, { scn: number; ts: number }>();

/**
 * Per bounded plain queue, its readers that must never skip (noGaps) and have a filter: a
 * message the bound drops ahead of one is tested against it, so that only a message it would
 * have delivered makes it fall off. Readers without a filter need no test (any drop ahead of
 * them is a gap: ListStructure.logFloor), and with none of these a drop costs a size check.
 */
const filteredNoGap = new WeakMap<ListStructure, Set<ListConsumer>>();
/** Filtered no-gap readers ahead of which the bound dropped a message they would have delivered. */
const missedByBound = new WeakSet<ListConsumer>();

/**
 * The rule of a reader of a plain queue that must never skip (a checkpoint or replay reader,
 * semantics.md 7-8, wire.md 6): when the log bound drops messages after its position before
 * it reads them, its link is detached with `tidemark:scn-not-found` and the attach check's
 * info, once it has sent everything before the gap (the core's cursor asks at that point,
 * DeliverySink.fellOff). It used to skip them, as a ring browser does, and only its next
 * attach said it had fallen off. `rule` goes to the reader's sink (MarkerSink), `opened` takes
 * the consumer once open. `describe` words the error.
 */
export function noGaps(list: ListStructure, req: ConsumerRequest, describe: (position: number, oldest: number) => string): { rule: (position: number, oldest: number) => TidemarkError | undefined; opened: (c: ListConsumer) => ListConsumer } {
  const filtered = req.predicates.length > 0;
  let consumer: ListConsumer | undefined;
  return {
    rule(position, oldest) {
      if (filtered && !(consumer && missedByBound.has(consumer))) return undefined; // what went was not this link's
      return new TidemarkError(Conditions.scnNotFound, describe(position, oldest), { info: { 'oldest-scn': oldest, 'requested-scn': position } });
    },
    opened(c) {
      consumer = c;
      if (filtered) {
        const set = filteredNoGap.get(list);
        if (set) {
          // Closed readers leave here too, not only when the bound next drops a message: a
          // queue whose bound drops nothing for a while kept every closed link (with its
          // session and connection) until then.
          for (const o of set) if (o.closed) set.delete(o);
          set.add(c);
        }
      }
      return c;
    },
  };
}

/** Whether a removed entry was dropped by its queue's log bound (not consumed, expired, replaced or purged). */
export function droppedByLogBound(e: Entry): boolean { return boundDrops.has(e); }

/** Whether a plain queue's messages are its log bounded by log.* (readers of a position before them have fallen off, decisions.md). */
export function isLogBounded(list: ListStructure): boolean { return boundedLists.has(list); }

/**
 * The oldest SCN a plain queue still holds (where its log begins); past the head when it holds
 * none of what was committed, so that every older position has fallen off (an empty queue
 * said 0, "nothing trimmed", and such a reader waited for live messages: a silent gap).
 */
export function oldestRetained(queue: Queue, list: ListStructure): number {
  return list.stats().oldestScn || (queue.committedScn > 0 ? queue.committedScn + 1 : 0);
}

/**
 * The SCN of the last message at or before `ms`: one the plain queue still holds, else the
 * newest the log bound dropped when it is that old (the messages it held were all newer);
 * 0 when none is known (older than the log, or than the first message).
 */
function lastAtOrBefore(list: ListStructure, ms: number): number {
  let scn = 0;
  for (const e of list.list.live()) { if (e.ts > ms) break; scn = e.scn; }
  if (scn === 0) {
    const cut = logCuts.get(list);
    if (cut && cut.ts <= ms) return cut.scn;
  }
  return scn;
}

export function replayExtension(opts: { trimIntervalMs?: number } = {}): Extension {
  let timer: NodeJS.Timeout | undefined;
  let listTimer: NodeJS.Timeout | undefined;
  /** Plain queues with a log.retention, ms. */
  const listRetention = new Map<ListStructure, number>();

  /**
   * The log of a plain queue is its messages: log.max_count keeps the newest N (the oldest
   * leave as a ring drops them, consumed or not), log.retention drops messages older than the
   * duration. A reader whose position is older has fallen off (scn-not-found, wire.md 6).
   */
  function boundList(list: ListStructure, retention: number | undefined, maxCount: number | undefined): void {
    if (maxCount !== undefined || retention !== undefined) {
      boundedLists.add(list);
      const filtered = new Set<ListConsumer>();
      filteredNoGap.set(list, filtered);
      list.onRemoved.push((e) => {
        if (!boundDrops.has(e)) return;
        // Readers that must not skip and are behind this SCN have fallen off (noGaps).
        list.raiseLogFloor(e.scn);
        const cut = logCuts.get(list);
        if (!cut || e.scn > cut.scn) logCuts.set(list, { scn: e.scn, ts: e.ts });
        if (filtered.size > 0) {
          for (const c of filtered) {
            if (c.closed) filtered.delete(c);
            else if (e.scn > c.lastScn && !missedByBound.has(c) && c.matches(e)) missedByBound.add(c);
          }
        }
      });
    }
    if (maxCount !== undefined) {
      list.admission.push({
        admit(l) {
          const drop = [];
          let count = l.depth;
          for (const e of l.live()) { if (count + 1 <= maxCount) break; drop.push(e); boundDrops.add(e); count--; }
          return drop;
        },
        // Kept, it would make the entry's later consumption or replacement look like the bound's drop.
        dropUndone(e) { boundDrops.delete(e); },
      });
    }
    if (retention !== undefined) listRetention.set(list, retention);
  }

  function openOnSow(s: SowStructure, req: ConsumerRequest, sink: DeliverySink, c: LinkCommand & { bookmark: Bookmark }, resolved: number | undefined) {
    const replayAfter = replayStart(s.queue, c.bookmark, resolved ?? 0, c.options, s.logFloor);
    return openSowLink(s, req, sink, { command: 'subscribe', options: c.options, replayAfter, completedMarker: true, annotate: req.annotate });
  }

  /** A plain queue replays the entries it still holds (browsed), then stays live. */
  function openOnList(queue: Queue, list: ListStructure, req: ConsumerRequest, sink: DeliverySink, c: LinkCommand & { bookmark: Bookmark }) {
    refuseBookmarkAhead(queue, c.bookmark);
    const gaps = noGaps(list, req, (position, oldest) => `the replay of ${queue.name} is at SCN ${position}, and the log bound dropped the messages after it before they were read (oldest SCN ${oldest}): the link is detached rather than go on with a gap`);
    const markers = new MarkerSink(sink, gaps.rule);
    const bm = c.bookmark;
    // A time resolves to the last message at or before it, held or the newest the bound dropped;
    // none known (0), with older ones gone, is older than the retained log, and
    // bookmark_not_found decides (it used to replay them all).
    const resolved = bm.kind === 'time' ? lastAtOrBefore(list, bm.ms) : bm.kind === 'scn' ? bm.scn : 0;
    const start = replayStart(queue, bm, resolved, c.options, oldestRetained(queue, list)) ?? queue.committedScn;
    return gaps.opened(list.openConsumer({ ...req, mode: 'copy' }, markers, {
      startAfterScn: start, annotate: listAnnotations, onCaughtUp: () => listMarker(markers, 'completed', queue.committedScn),
    }));
  }

  return {
    name: 'replay',
    requires: ['sow'],
    queueArguments: [
      { name: 'log.retention', strict: true, parse: (v) => toDurationMs('log.retention', v) },
      { name: 'log.max_count', strict: true, parse: (v) => toInt('log.max_count', v, { min: 1 }) },
    ],
    configureQueue({ queue, arguments: args }) {
      const retention = args['log.retention'] as number | undefined, maxCount = args['log.max_count'] as number | undefined;
      if (queue.structure instanceof SowStructure) queue.structure.boundLog(retention, maxCount);
      else if (queue.structure instanceof ListStructure) boundList(queue.structure, retention, maxCount);
    },
    openConsumer(queue, req, sink) {
      const c = commandOf(req);
      if (!c.bookmark || (c.command !== 'subscribe' && c.command !== 'default')) return undefined;
      const withBookmark = { ...c, bookmark: c.bookmark };
      if (queue.structure instanceof SowStructure) {
        const s = queue.structure;
        return openAtBookmark(queue, c.bookmark, sink, (scn) => openOnSow(s, req, sink, withBookmark, scn));
      }
      if (queue.structure instanceof ListStructure) return openOnList(queue, queue.structure, req, sink, withBookmark);
      return undefined;
    },
    start(b) {
      timer = everySowQueue(b, opts.trimIntervalMs ?? 1000, 'log retention', (s) => s.logBounded, (s, now) => s.trimLog(now));
      listTimer = setInterval(() => {
        const now = b.clock.now();
        for (const [list, ms] of listRetention) {
          if (b.nodes.get(list.queue.name)?.structure !== list) { listRetention.delete(list); continue; } // deleted
          trimListByAge(list, now - ms, now);
        }
      }, opts.trimIntervalMs ?? 1000);
      listTimer.unref();
    },
    stop() { if (timer) clearInterval(timer); if (listTimer) clearInterval(listTimer); },
  };
}

/**
 * Drops a plain queue's committed messages older than `horizon` (oldest first: entries are in
 * arrival order). With `now`, what has expired by then leaves as expired first: an expiry is
 * not the log bound's drop, and raises no log floor (noGaps).
 */
export function trimListByAge(list: ListStructure, horizon: number, now?: number): number {
  if (now !== undefined) list.sweep(now);
  // Collect first (removing splices the list under its iterator), and only the due front:
  // copying the whole list every second cost a pass over every queued message.
  const due: Entry[] = [];
  for (const e of list.list.live()) {
    if (e.ts >= horizon || !e.committed) break;
    due.push(e);
  }
  for (const e of due) { boundDrops.add(e); list.removeEntry(e, 'dropped'); }
  return due.length;
}

/** Filtered no-gap readers a bounded plain queue holds (tests: closed ones must not pile up). */
export function filteredReaders(list: ListStructure): number { return filteredNoGap.get(list)?.size ?? 0; }
