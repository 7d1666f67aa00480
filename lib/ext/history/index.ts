/**
 * History (semantics.md 6): a SOW queue keeps superseded versions for `sow.history.window`
 * (at most one per `sow.history.granularity`), purged by a background sweep; a `sow` or
 * `sow_and_subscribe` with a bookmark answers with the state at that point. Builds on the
 * `sow` extension: the versions are written by its structure in each event's batch, and the
 * historical snapshot is streamed by its consumer (historical-scan.ts). docs/sow.md.
 */
import type { Extension } from '../../core/extensions.js';
import type { Queue } from '../../core/queue/queue.js';
import { TidemarkError, Conditions } from '../../core/errors.js';
import { toDurationMs } from '../../address/index.js';
import { SowStructure } from '../sow/sow-structure.js';
import { commandOf, openSowLink } from '../sow/links.js';
import { everySowQueue } from '../sow/index.js';
import { openAtBookmark, openWhenReady, refuseBookmarkAhead, scnAtTime, timeAtScn, type Bookmark } from '../sow/bookmark.js';
import type { SowPlan } from '../sow/sow-consumer.js';
import type { LinkCommand } from '../sow/links.js';
import type { ConsumerRequest } from '../../core/extensions.js';
import type { DeliverySink } from '../../core/queue/delivery.js';

/**
 * The oldest SCN a historical `sow_and_subscribe` may start from now: the newest event before
 * the window's start (the state after it lasted into the window: every version it needs is
 * kept), and no older than the log covers (SCN floor - 1: the replay starts at the floor).
 */
async function oldestAnswerable(s: SowStructure): Promise<number> {
  const q = s.queue;
  const start = q.ctx.clock.now() - s.settings.historyWindow!;
  const beforeStart = await scnAtTime(q, start - 1);
  const floor = s.logFloor;
  return Math.max(beforeStart, floor > 0 ? floor - 1 : 0);
}

export function historyExtension(opts: { sweepIntervalMs?: number } = {}): Extension {
  let timer: NodeJS.Timeout | undefined;

  /**
   * The historical answer at the bookmark's SCN `resolved` (undefined for `0` / `now`).
   * `beforeWindow`: the point is older than the history window, whose superseded versions may
   * be purged, so no state it answered with could be trusted to have existed.
   */
  function openHistorical(s: SowStructure, req: ConsumerRequest, sink: DeliverySink, c: LinkCommand & { bookmark: Bookmark }, resolved: number | undefined, beforeWindow: boolean) {
    const q = s.queue;
    const bm = c.bookmark;
    const S = bm.kind === 'now' ? q.committedScn : bm.kind === 'epoch' ? 0 : resolved ?? 0;
    const plan: SowPlan = { command: c.command, options: c.options, completedMarker: false, annotate: req.annotate };
    // A point older than the window answers with nothing (semantics.md 6).
    plan.historicalScn = beforeWindow ? -1 : S;
    if (c.command === 'sow_and_subscribe') {
      // semantics.md 6: it needs history coverage of its starting point, or there is no state
      // to replay from: refused at attach, before any marker.
      if (beforeWindow) {
        // Its `oldest-scn` is the oldest SCN a bookmark may name here now (oldestAnswerable):
        // it was the log floor, which history need not reach ({oldest-scn: 1, requested-scn: 1}
        // while the log held SCN 1).
        return openWhenReady(sink, oldestAnswerable(s), (oldest) => {
          throw new TidemarkError(Conditions.scnNotFound, `bookmark ${bm.kind === 'time' ? bm.text : S} is older than the history window of ${q.name} (${s.settings.historyWindow} ms): no state to start a sow_and_subscribe from (the oldest SCN it can start from is ${oldest})`, { info: { 'oldest-scn': oldest, 'requested-scn': S } });
        });
      }
      const floor = s.logFloor;
      if (floor > 0 && S + 1 < floor) throw new TidemarkError(Conditions.scnNotFound, `the log of ${q.name} no longer covers SCN ${S} (oldest ${floor})`, { info: { 'oldest-scn': floor, 'requested-scn': S } });
      plan.completedMarker = true;
    }
    return openSowLink(s, req, sink, plan);
  }

  return {
    name: 'history',
    requires: ['sow'],
    queueArguments: [
      { name: 'sow.history.window', strict: true, parse: (v) => toDurationMs('sow.history.window', v) },
      { name: 'sow.history.granularity', strict: true, parse: (v) => toDurationMs('sow.history.granularity', v) },
    ],
    validateArguments(args) {
      if (args['sow.key'] === undefined) {
        for (const k of ['sow.history.window', 'sow.history.granularity']) if (args[k] !== undefined) throw new Error(`${k} needs sow.key: history is kept per SOW key`);
      }
    },
    configureQueue({ queue, arguments: args }) {
      const window = args['sow.history.window'] as number | undefined;
      if (window === undefined || !(queue.structure instanceof SowStructure)) return;
      queue.structure.keepHistory(window, (args['sow.history.granularity'] as number | undefined) ?? 0);
    },
    openConsumer(queue: Queue, req, sink) {
      if (!(queue.structure instanceof SowStructure)) return undefined;
      const c = commandOf(req);
      if (!c.bookmark || (c.command !== 'sow' && c.command !== 'sow_and_subscribe')) return undefined;
      const s = queue.structure;
      if (!s.hasHistory) throw new TidemarkError(Conditions.invalidField, `queue ${queue.name} keeps no history (sow.history.window): a ${c.command} with a bookmark cannot be answered`);
      const withBookmark = { ...c, bookmark: c.bookmark };
      const bm = c.bookmark;
      const cutoff = () => queue.ctx.clock.now() - s.settings.historyWindow!;
      if (bm.kind === 'scn') {
        // The state after event S lasted until event S + 1 arrived. If that was before the
        // window, versions current at S may be purged: answered as a time that old is. The
        // head's state is current, however old its event.
        refuseBookmarkAhead(queue, bm);
        if (bm.scn >= queue.committedScn) return openHistorical(s, req, sink, withBookmark, bm.scn, false);
        return openWhenReady(sink, timeAtScn(queue, bm.scn + 1), (t) => {
          const ms = t === undefined ? undefined : 'ms' in t ? t.ms : t.before;
          return openHistorical(s, req, sink, withBookmark, bm.scn, ms !== undefined && ms < cutoff());
        });
      }
      return openAtBookmark(queue, bm, sink, (scn) => openHistorical(s, req, sink, withBookmark, scn, bm.kind === 'time' && bm.ms < cutoff()));
    },
    start(b) {
      timer = everySowQueue(b, opts.sweepIntervalMs ?? 1000, 'history purge', (s, now) => s.historyDue(now), (s, now) => s.sweepHistory(now));
    },
    stop() { if (timer) clearInterval(timer); },
  };
}
