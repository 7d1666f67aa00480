/**
 * Bookmarks (wire.md 5): `0` (epoch), `now` (live end), `N` (after SCN N), or an instant as
 * `YYYYMMDDTHHMMSS[.ffffff]Z` (AMPS form) or ISO-8601 with `Z`; and their resolution to an
 * SCN through the queue's time index (used by the history and replay extensions).
 */
import { TidemarkError, Conditions } from '../../core/errors.js';
import type { Queue } from '../../core/queue/queue.js';
import type { Consumer, DeliverySink } from '../../core/queue/delivery.js';
import { queuePrefix, prefixEnd, readScn, scnKey, CoreTables } from '../../core/storage/keyspace.js';
import { eventTs } from '../../core/engine/event-record.js';
import { TIME, timeKey } from './tables.js';

export type Bookmark = { kind: 'epoch' } | { kind: 'now' } | { kind: 'scn'; scn: number } | { kind: 'time'; ms: number; text: string };

export function parseBookmark(text: string): Bookmark {
  const t = text.trim();
  if (t === '0') return { kind: 'epoch' };
  if (t.toLowerCase() === 'now') return { kind: 'now' };
  if (/^\d+$/.test(t)) {
    // A decimal SCN is its value: leading zeros change nothing, and `00` is `0`, the epoch (it
    // was SCN 0, which a historical sow_and_subscribe refused as older than the window).
    const n = Number(t);
    if (!Number.isSafeInteger(n)) throw new TidemarkError(Conditions.invalidField, `bookmark ${t}: SCN too large`);
    return n === 0 ? { kind: 'epoch' } : { kind: 'scn', scn: n };
  }
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(?:\.(\d{1,9}))?Z$/.exec(t)
    ?? /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?Z$/.exec(t);
  if (m) return { kind: 'time', ms: instant(t, m), text: t };
  throw bad(t);
}

/**
 * The instant a time bookmark names. Every field is checked against the calendar: Date.UTC and
 * Date.parse roll an out-of-range field over (month 13 became January of the next year,
 * 30 February became 2 March, 24:00 the next day), which silently moved the bookmark.
 */
function instant(t: string, m: RegExpExecArray): number {
  const [, y, mo, d, h, mi, s, frac] = m;
  const Y = +y, M = +mo, D = +d, H = +h, Mi = +mi, S = s === undefined ? 0 : +s;
  const out = (field: string, v: string | undefined, range: string) => bad(t, `${field} ${v} is out of range (${range})`);
  if (M < 1 || M > 12) throw out('month', mo, '01-12');
  const days = new Date(Date.UTC(2000, M, 0)).getUTCDate() - (M === 2 && !leap(Y) ? 1 : 0);
  if (D < 1 || D > days) throw out('day', d, `01-${days} in ${y}-${mo}`);
  if (H > 23) throw out('hour', h, '00-23');
  if (Mi > 59) throw out('minute', mi, '00-59');
  if (S > 59) throw out('second', s, '00-59');
  const date = new Date(0);
  date.setUTCFullYear(Y, M - 1, D); // (Date.UTC reads years 0-99 as 1900-1999)
  date.setUTCHours(H, Mi, S, 0);
  return date.getTime() + (frac ? Math.floor(Number('0.' + frac) * 1000) : 0);
}

function leap(y: number): boolean { return (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0; }

function bad(t: string, why?: string): TidemarkError {
  return new TidemarkError(Conditions.invalidField, `malformed bookmark ${JSON.stringify(t)}: ${why ? why + '; ' : ''}expected 0, now, an SCN, YYYYMMDDTHHMMSS[.ffffff]Z or ISO-8601 with Z`);
}

/**
 * SCN of the last event at or before `ms` (0 when no retained event is that old), from the
 * time index. The index is sparse (a row for the first event of each new timestamp, see
 * SowStructure.prepare), so the answer is the event before the first indexed one that is
 * newer than `ms`, or the newest committed event when none is: committed before the index
 * reads, so each event up to it has its index row seen by them (as SowStructure#trimLog reads
 * it). Read after them, it counted events committed meanwhile, newer than `ms` (a time
 * bookmark at "now" under a running publisher answered with states after it).
 * A past `ms` waits first for the events being written: they arrived (a SCN and a time are
 * given together, in order) before now, maybe at or before `ms`, and the answer is then exact.
 * (The first event newer than `ms` always has an index row: its time is new.)
 */
export async function scnAtTime(q: Queue, ms: number): Promise<number> {
  const store = q.ctx.store;
  const prefix = queuePrefix(TIME, q.id);
  if (ms < q.ctx.clock.now() && q.headScn > q.committedScn) await new Promise<void>((resolve) => q.ctx.committer.whenWritten(resolve));
  const committed = q.committedScn;
  const atOrBefore = await store.all({ gte: prefix, lt: timeKey(q.id, ms + 1, 0), reverse: true, limit: 1, keysOnly: true });
  if (atOrBefore.length === 0) return 0;
  const after = await store.all({ gte: timeKey(q.id, ms + 1, 0), lt: prefixEnd(prefix), limit: 1, keysOnly: true });
  return after.length ? readScn(after[0][0], 13) - 1 : committed;
}

/**
 * Arrival time (ms) of event `scn`, or undefined when nothing retained says. From its log row
 * when the log still holds it; else from the time index (rows in SCN order as in time order):
 * the time of the newest indexed event at or before `scn`, found by a binary search over time,
 * one seek a step. `before`, when the index has no row that old: the time of its oldest row,
 * which `scn` is not newer than.
 */
export async function timeAtScn(q: Queue, scn: number): Promise<{ ms: number } | { before: number } | undefined> {
  const store = q.ctx.store;
  const row = await store.get(scnKey(CoreTables.log, q.id, scn));
  if (row) return { ms: eventTs(row) };
  const prefix = queuePrefix(TIME, q.id), end = prefixEnd(prefix);
  let found: number | undefined;
  let lo = 0, hi = q.ctx.clock.now() + 1; // the answer's time lies in [lo, hi)
  for (let steps = 0; lo < hi && steps < 128; steps++) {
    const mid = Math.floor((lo + hi) / 2);
    const [first] = await store.all({ gte: timeKey(q.id, mid, 0), lt: timeKey(q.id, hi, 0), limit: 1, keysOnly: true });
    if (!first || readScn(first[0], 13) > scn) { hi = mid; continue; } // every row from mid on is newer
    found = readScn(first[0], 5);
    lo = found + 1;
  }
  if (found !== undefined) return { ms: found };
  const [oldest] = await store.all({ gte: prefix, lt: end, limit: 1, keysOnly: true });
  return oldest ? { before: readScn(oldest[0], 5) } : undefined;
}

/**
 * Opens a consumer once `ready` resolves: the consumer returned meanwhile keeps the credit
 * that arrives, and closes the link if `ready` or `open` fails.
 */
export function openWhenReady<T>(sink: DeliverySink, ready: Promise<T>, open: (v: T) => Consumer): Consumer {
  let inner: Consumer | undefined; let closed = false;
  ready.then((v) => {
    if (closed) return;
    try { inner = open(v); inner.onCredit(); }
    catch (e) { sink.close(e instanceof TidemarkError ? e : new TidemarkError(Conditions.internal, String(e))); }
  }, (err) => sink.close(err instanceof TidemarkError ? err : new TidemarkError(Conditions.internal, String(err))));
  return { onCredit: () => inner?.onCredit(), onDrain: () => inner?.onDrain(), close: (o) => { closed = true; inner?.close(o); } };
}

/**
 * An SCN bookmark past the queue's head names an event that does not exist yet: accepting it
 * would silently skip the events up to it when they come (a bookmark kept from a broker whose
 * data was since replaced, say). Refused, as a checkpoint ahead of the head is.
 */
export function refuseBookmarkAhead(q: Queue, bm: Bookmark): void {
  if (bm.kind === 'scn' && bm.scn > q.committedScn) {
    throw new TidemarkError(Conditions.invalidField, `bookmark ${bm.scn} is ahead of queue ${q.name}: its newest event is SCN ${q.committedScn}`);
  }
}

/**
 * Opens a consumer at a bookmark: `open` gets the bookmark's SCN. A time bookmark is resolved
 * through the time index first, so the consumer returned meanwhile keeps the credit that
 * arrives and closes the link if opening fails.
 */
export function openAtBookmark(q: Queue, bm: Bookmark, sink: DeliverySink, open: (scn: number | undefined) => Consumer): Consumer {
  refuseBookmarkAhead(q, bm);
  if (bm.kind !== 'time') return open(bm.kind === 'scn' ? bm.scn : undefined);
  return openWhenReady(sink, scnAtTime(q, bm.ms), open);
}
