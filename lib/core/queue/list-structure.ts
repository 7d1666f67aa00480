/**
 * The list structure: standard, browse-only, ring, reject and last-value queues (QPID
 * semantics, semantics.md 1). Messages live in memory in SCN order and in the `log` table;
 * acquiring consumers compete, browsing consumers walk with cursors. Limit and LVQ policies
 * are admission policies contributed by extensions.
 */
import { TidemarkError, Conditions } from '../errors.js';
import { CoreTables, scnKey, queuePrefix, prefixEnd, readScn, writeU64 } from '../storage/keyspace.js';
import type { BatchOp } from '../storage/store.js';
import { encodeEvent, decodeEvent } from '../engine/event-record.js';
import { rewriteMessage, type HeaderFields } from '../../codec/message-bytes.js';
import { Entry } from './entry.js';
import { MessageList } from './message-list.js';
import { MinHeap } from '../min-heap.js';
import type { Queue, QueueStructure, PreparedEvent, QueueStats } from './queue.js';
import type { InboundMessage } from './inbound.js';
import type { Consumer, DeliverySink, Outcome } from './delivery.js';
import type { ConsumerRequest } from '../extensions.js';
import { MessageEnv, UnreadableMessage } from './filter-env.js';
import { FilterEnvCache } from './filter-env-cache.js';
import { ReleasedEntries } from './released-entries.js';
import { logger } from '../log.js';

const log = logger('queue');
/** Largest uint [AMQP 1.6.6]: where a redelivered message's delivery-count stays. */
const MAX_UINT = 0xffffffff;
/**
 * How long one dispatch may scan before it lets other work run (setImmediate) and goes on
 * from where each consumer's scan stopped: a selector attached to 50k queued messages tested
 * them all in one task (0.9-1.7 s during which no client was served). As the SOW streamed
 * snapshot's slices (sorted-answer.ts SLICE_MS).
 */
const SCAN_SLICE_MS = 8;
/**
 * Released entries one consumer keeps to look at again (ReleasedEntries); past this, what is
 * gone or taken is dropped, and if that is not enough its `skipTo` moves back to the lowest
 * instead (one rescan from there, in slices) and the set is emptied.
 */
const MAX_RELEASED_KEPT = 4096;

/**
 * The queue as admission sees it: without the entries an earlier prepared event already drops
 * (they leave when its batch is durable), so a full ring drops one entry per message, not
 * every earlier drop of the batch again.
 */
export interface AdmissionView {
  readonly depth: number;
  readonly bytes: number;
  live(): Iterable<Entry>;
}

/** Decides what happens when a message arrives: drop others (ring, LVQ) or refuse it (reject). */
export interface AdmissionPolicy {
  /**
   * Returns entries to remove to make room, or throws TidemarkError to refuse `incoming`. A
   * later policy may still refuse the message, or its batch fail: what admit() records about
   * the entries it returns must be undone in dropUndone.
   */
  admit(list: AdmissionView, incoming: Entry, msg: InboundMessage): Entry[] | void;
  /** An entry this policy asked to drop stays after all (a later policy refused, or the batch failed). */
  dropUndone?(e: Entry): void;
}

/** Options for a consumer on a list queue, beyond the link request. */
export interface ListConsumerOptions {
  /** Start browsing after this SCN (replay); default: the oldest message. */
  startAfterScn?: number;
  /** Extra annotations for each delivered entry (commands). */
  annotate?: (e: Entry) => Record<string, unknown>;
  /** Called once when the browse cursor first reaches the live end (replay `completed`). */
  onCaughtUp?: () => void;
  /** Called after an entry is delivered. */
  onDelivered?: (e: Entry) => void;
}

export class ListStructure implements QueueStructure {
  readonly kind = 'list';
  readonly queue: Queue;
  readonly list = new MessageList();
  readonly admission: AdmissionPolicy[] = [];
  /** Hooks run on each message that leaves the queue for good. */
  readonly onRemoved: Array<(e: Entry, reason: 'consumed' | 'expired' | 'dropped' | 'purged') => void> = [];
  /** Hooks run on each message added (publish and recovery). */
  readonly onAppended: Array<(e: Entry) => void> = [];
  readonly #consumers = new Set<ListConsumer>();
  /** Consumers with a filter (selector, subject, content): see prepare. */
  #filtering = 0;
  /** Filter envs of recently offered messages, shared by the filtering consumers (filter-env-cache.ts). */
  readonly #envs = new FilterEnvCache();
  #rr: ListConsumer[] = [];
  #rrIndex = 0;
  /** Lowest position that may hold an unacquired message, in list epoch #hintEpoch. */
  #hint = 0;
  #hintEpoch = 0;
  #dispatching = false;
  #again = false;
  /** See logFloor. */
  #logFloor = 0;

  /**
   * Derives a recovered entry's LVQ key from its bytes (set by the LVQ extension); when unset,
   * or it cannot read them, the key stored with the event is used.
   */
  recoverKey: ((bytes: Buffer) => string | undefined) | undefined;

  constructor(queue: Queue) { this.queue = queue; }

  /**
   * The newest SCN the queue's log bound dropped (0: none since the broker started), raised by
   * the extension that bounds the log (replay: log.max_count, log.retention). Expiry, LVQ
   * replacement, ring overflow, consumption and purges leave it: only the log bound makes a
   * browse cursor behind it a reader that fell off. The bound drops the oldest messages first,
   * so every message at or below it is gone. A browser whose sink has `fellOff` and whose
   * position is below it is asked what the gap means before it reads on (#nextBrowse).
   */
  get logFloor(): number { return this.#logFloor; }
  raiseLogFloor(scn: number): void { if (scn > this.#logFloor) this.#logFloor = scn; }

  get consumerCount(): number { return this.#consumers.size; }

  prepare(msg: InboundMessage, scn: number, windowEnd: number | undefined): PreparedEvent {
    // Limits count live messages: expired ones the 1 s sweep has not reached yet would make a
    // reject queue refuse while its statistics say it has room, and a ring drop a live message
    // instead of them. The sweep costs O(expired) (a heap).
    if (this.admission.length > 0) this.#sweepExpiries(this.queue.ctx.clock.now());
    const e = new Entry(scn, msg.bytes, msg.receivedAt);
    e.expiresAt = msg.expiresAt;
    // The view the publish decoded, for the filters about to test it: in a bounded cache, not on
    // the entry (kept on every queued entry, a deep queue held a decoded copy of each message).
    if (this.#filtering > 0) this.#envs.put(e, new MessageEnv(msg.message));
    const dropped: Entry[] = [];
    /** The policy that asked for each drop (parallel to `dropped`), told when its drop is undone. */
    const droppedBy: AdmissionPolicy[] = [];
    try {
      for (const p of this.admission) {
        const d = p.admit(this.#admissionView, e, msg);
        if (d) for (const x of d) if (!x.removed && !x.dropping) { x.dropping = true; dropped.push(x); droppedBy.push(p); this.#droppingCount++; this.#droppingBytes += x.size; }
      }
    } catch (err) {
      // A later policy refused the message (a reject limit after an LVQ replacement): the drops
      // earlier ones marked are undone, or the entries stayed `dropping` for good (out of the
      // admission view's depth and bytes, never replaceable again, yet kept in storage).
      this.#undoDrops(dropped, droppedBy);
      throw err;
    }
    const q = this.queue;
    const ops: BatchOp[] = [];
    if (q.durable) {
      ops.push({ type: 'put', key: scnKey(CoreTables.log, q.id, scn), value: encodeEvent({ ts: e.ts, exp: e.expiresAt, w: windowEnd, ...(e.lvqKey !== undefined ? { key: e.lvqKey } : {}) }, msg.bytes) });
      for (const d of dropped) ops.push({ type: 'del', key: scnKey(CoreTables.log, q.id, d.scn) });
      if (dropped.length) ops.push(this.#headOp());
    }
    // Entries this message displaces (ring overflow, LVQ replacement) leave when the batch that
    // deletes them is durable, not before: removing them here lost them from memory when the
    // batch failed (their deletes never written; nothing accepted may be lost). Until then
    // they still count, so later prepares in the batch see them (a second drop is a no-op).
    this.#append(e);
    return {
      ops,
      committed: () => { for (const d of dropped) { this.#undrop(d); this.#remove(d, 'dropped', false); } e.committed = true; this.dispatch(); },
      failed: () => {
        this.#undoDrops(dropped, droppedBy);
        this.#remove(e, 'dropped', false);
        // Its SCN may be given back (a refused transaction): no hole may hold it. No scan passes
        // an uncommitted entry, but one purged or expired while in flight may have been passed:
        // cursors past the new end come back to it, or the next publish (at this position) would wait.
        if (this.list.dropLast(e)) this.#clampCursors();
        // The displaced entries stay; re-announce them so indexes that pointed at `e` (the LVQ
        // key map) point back at them.
        for (const d of dropped) if (!d.removed) for (const h of this.onAppended) h(d);
      },
    };
  }

  #clampCursors(): void {
    const end = this.list.end;
    if (this.#hint > end) this.#hint = end;
    if (this.#admitFrom > end) this.#admitFrom = end;
    for (const c of this.#consumers) { if (c.skipTo > end) c.skipTo = end; if (c.pos > end) c.pos = end; }
  }

  #droppingCount = 0;
  #droppingBytes = 0;
  /**
   * Admission sees the queue without what earlier prepares of uncommitted batches already drop.
   * live() starts at #admitFrom, past the removed and dropping entries at the front: a full
   * ring walked over every drop still in flight on each publish (O(publishes in flight) per
   * message). A drop undone by a failed batch moves it back; a compaction resets it.
   */
  #admitFrom = 0;
  #admitEpoch = 0;
  readonly #admissionView: AdmissionView = (() => {
    const self = this; // eslint-disable-line @typescript-eslint/no-this-alias
    return {
      get depth() { return self.list.depth - self.#droppingCount; },
      get bytes() { return self.list.bytes - self.#droppingBytes; },
      *live() {
        if (self.#admitEpoch !== self.list.epoch) { self.#admitFrom = 0; self.#admitEpoch = self.list.epoch; }
        let leading = true;
        for (let pos = Math.max(self.#admitFrom, self.list.start); pos < self.list.end; pos++) {
          const x = self.list.at(pos)!;
          if (x.removed || x.dropping) { if (leading) self.#admitFrom = pos + 1; continue; }
          leading = false;
          yield x;
        }
      },
    };
  })();

  #undrop(d: Entry): void {
    if (!d.dropping) return;
    d.dropping = false;
    if (d.pos < this.#admitFrom) this.#admitFrom = d.pos;
    this.#droppingCount--; this.#droppingBytes -= d.size;
  }

  #headOp(): BatchOp {
    const v = Buffer.allocUnsafe(8);
    writeU64(v, this.queue.headScn + 1, 0);
    return { type: 'put', key: queuePrefix(CoreTables.head, this.queue.id), value: v };
  }

  async recover(): Promise<number> {
    const q = this.queue;
    const prefix = queuePrefix(CoreTables.log, q.id);
    const cursor = q.ctx.store.cursor({ gte: prefix, lt: prefixEnd(prefix) });
    let max = 0;
    const now = q.ctx.clock.now();
    const expired: BatchOp[] = [];
    try {
      for (;;) {
        const rows = await cursor.next(1000);
        if (rows.length === 0) break;
        for (const [k, v] of rows) {
          const scn = readScn(k, 5);
          max = Math.max(max, scn);
          const { meta, message } = decodeEvent(v);
          if (meta.exp !== undefined && meta.exp <= now) { expired.push({ type: 'del', key: k }); continue; }
          const e = new Entry(scn, Buffer.from(message), meta.ts);
          e.expiresAt = meta.exp;
          e.lvqKey = meta.key !== undefined && this.recoverKey ? this.recoverKey(e.bytes) ?? meta.key : meta.key;
          e.committed = true;
          this.#append(e);
        }
      }
    } finally { await cursor.close(); }
    const head = await q.ctx.store.get(queuePrefix(CoreTables.head, q.id));
    if (head) max = Math.max(max, readScn(head, 0) - 1);
    if (expired.length) {
      // The newest rows may be among those deleted: the head row keeps their SCNs from being
      // handed out again after the next restart (a durable subscription past them saw nothing).
      const v = Buffer.allocUnsafe(8);
      writeU64(v, max + 1, 0);
      expired.push({ type: 'put', key: queuePrefix(CoreTables.head, q.id), value: v });
      q.ctx.committer.addQuiet(expired);
    }
    return max;
  }

  #append(e: Entry): void {
    this.list.append(e);
    if (e.expiresAt !== undefined) {
      this.#expiries.push(e);
      this.#expiringLive++;
      // Consumed entries wait in the heap until their time comes: drop them once they dominate.
      if (this.#expiries.size > 1024 && this.#expiries.size > 2 * this.#expiringLive) this.#expiries.keep((x) => !x.removed);
    }
    for (const h of this.onAppended) h(e);
  }

  /**
   * Entries with a TTL by expiry time (lazy deletion: removed ones are skipped at the top), so
   * a sweep costs O(expired), not a pass over the queue: it runs every second and on every
   * stats() call, and a pass over 1M queued messages held the event loop ~35 ms each time.
   */
  readonly #expiries = new MinHeap<Entry>((e) => e.expiresAt!);
  /** Entries in the expiry heap, removed ones not yet dropped included (statistics, tests). */
  get expiryBacklog(): number { return this.#expiries.size; }
  /** Live entries that have a TTL (so the heap can tell when removed ones dominate). */
  #expiringLive = 0;
  /** Expired while a consumer held them acquired: they go once released (if not consumed). */
  readonly #expiredHeld = new Set<Entry>();

  async purge(): Promise<number> {
    let n = 0;
    for (const e of [...this.list.live()]) { this.#remove(e, 'purged', true); n++; }
    return n;
  }

  sweep(now: number): void {
    for (const e of this.#expiredHeld) {
      if (e.removed) this.#expiredHeld.delete(e);
      else if (!e.acquiredBy) this.#remove(e, 'expired', true);
    }
    this.#sweepExpiries(now);
  }

  /**
   * The heap part of sweep(): O(newly expired). Admission runs it on every publish; the walk of
   * expired entries consumers still hold stays with the 1 s sweep (50k of them made every
   * publish to a limited queue cost 210 µs).
   */
  #sweepExpiries(now: number): void {
    for (let e = this.#expiries.peek(); e !== undefined && e.expiresAt! <= now; e = this.#expiries.peek()) {
      this.#expiries.pop();
      if (e.removed) continue;
      if (e.acquiredBy) this.#expiredHeld.add(e);
      else this.#remove(e, 'expired', true);
    }
  }

  stats(): QueueStats {
    // Expired messages leave the statistics as soon as they expire, not at the next sweep.
    this.sweep(this.queue.ctx.clock.now());
    let oldest = 0;
    for (const e of this.list.live()) { oldest = e.scn; break; }
    return { depth: this.list.depth, bytes: this.list.bytes, oldestScn: oldest, consumers: this.#consumers.size };
  }

  close(error?: TidemarkError): void {
    if (this.#resume) { clearImmediate(this.#resume); this.#resume = undefined; }
    for (const c of [...this.#consumers]) c.sink.close(error);
  }

  /** Removes an entry for good; `persist` writes the delete (acks, expiry, purge). */
  #remove(e: Entry, reason: 'consumed' | 'expired' | 'dropped' | 'purged', persist: boolean): void {
    this.#undrop(e); // gone another way before the batch dropping it was durable
    if (!this.list.remove(e)) return;
    if (e.expiresAt !== undefined) { this.#expiringLive--; this.#expiredHeld.delete(e); }
    if (this.#envs.size > 0) this.#envs.delete(e);
    if (reason === 'expired') this.queue.counters.expired++;
    if (persist && this.queue.durable) {
      this.queue.ctx.committer.addQuiet([{ type: 'del', key: scnKey(CoreTables.log, this.queue.id, e.scn) }, this.#headOp()]);
    }
    for (const h of this.onRemoved) h(e, reason);
  }

  /** Removes an entry because something outside the list decided so (extensions). */
  removeEntry(e: Entry, reason: 'consumed' | 'expired' | 'dropped' | 'purged'): void { this.#remove(e, reason, true); }

  openConsumer(req: ConsumerRequest, sink: DeliverySink, opts: ListConsumerOptions = {}): ListConsumer {
    const c = new ListConsumer(this, req, sink, opts);
    this.#consumers.add(c);
    if (c.req.predicates.length) this.#filtering++;
    if (c.acquiring) this.#rr.push(c);
    return c;
  }

  /** @internal */
  detach(c: ListConsumer): void {
    // Filter envs are kept for filtering consumers only: the last one is gone.
    if (this.#consumers.delete(c) && c.req.predicates.length && --this.#filtering === 0) this.#envs.clear();
    this.#rr = this.#rr.filter((x) => x !== c);
    this.#drains.delete(c);
  }

  /** Filter envs kept for the filtering consumers (statistics, tests): 0 while none is attached. */
  get filterEnvsKept(): number { return this.#envs.size; }

  /** @internal The filter env of `e` for a consumer's test: kept for the next consumer, within the cache's bounds. */
  envOf(e: Entry): MessageEnv { return this.#envs.of(e); }

  /** Whether the entry at a position (this epoch) may still be taken: not gone, not acquired. */
  readonly #takeable = (pos: number): boolean => {
    const e = this.list.at(pos);
    return e !== undefined && !e.removed && !e.acquiredBy;
  };

  /** @internal a released entry is available again */
  released(e: Entry): void {
    this.#markReleased(e);
    this.dispatch();
  }

  /** @internal Entries a closing consumer held, available again: one dispatch for them all, not one each. */
  releasedAll(entries: Iterable<Entry>): void {
    for (const e of entries) this.#markReleased(e);
    this.dispatch();
  }

  /**
   * Makes `e` available again. Consumers whose scan has passed it (`skipTo` beyond it) keep it
   * to look at again first (ReleasedEntries) rather than moving `skipTo` back: that made each
   * release re-test everything after it, for every filtering consumer.
   */
  #markReleased(e: Entry): void {
    e.acquiredBy = null;
    if (e.removed) return;
    this.#hintInEpoch();
    if (e.pos < this.#hint) this.#hint = e.pos;
    const epoch = this.list.epoch;
    for (const c of this.#rr) {
      if (c.skipEpoch !== epoch || e.pos >= c.skipTo) continue; // (its scan has it ahead, or starts over)
      c.released.add(e.pos);
      if (c.released.size > MAX_RELEASED_KEPT) {
        c.released.prune(this.#takeable);
        if (c.released.size > MAX_RELEASED_KEPT) { c.skipTo = Math.min(c.skipTo, c.released.peek()!); c.released.clear(); }
      }
    }
  }

  /** @internal an acquired entry was accepted or rejected: gone */
  consumed(e: Entry): void {
    // Counted only when the accept removed it: one purged, dropped or expired meanwhile was not
    // "removed from the queue" by the consumer (tidemark_queue_acknowledged_total).
    if (!e.removed) this.queue.counters.acknowledged++;
    this.#remove(e, 'consumed', true);
  }

  #expired(e: Entry, now: number): boolean {
    if (e.expiresAt !== undefined && e.expiresAt <= now) {
      if (!e.acquiredBy) this.#remove(e, 'expired', true);
      return true;
    }
    return false;
  }

  /**
   * Next unacquired, committed, matching entry for an acquiring consumer. The queue's hint
   * skips what no consumer can take; the consumer's own `skipTo` also skips what it has
   * already turned down (a filter that does not match, modified undeliverable-here), so each
   * entry is tested once per consumer rather than on every dispatch: with a filter that
   * matched nothing, each publish to a 200k-deep queue used to test all 200k (11 ms each).
   * Entries released behind `skipTo` are looked at first (#markReleased); a compaction
   * renumbers positions, so the scan starts over from the hint. Undefined also when the
   * dispatch's slice is spent (#paused): the scan goes on from here in the next one.
   */
  #nextAvailable(c: ListConsumer, now: number): Entry | undefined {
    if (c.skipEpoch !== this.list.epoch) { c.skipTo = 0; c.skipEpoch = this.list.epoch; c.released.clear(); }
    // Released entries it had passed, lowest first: they come before anything from skipTo on.
    for (let p = c.released.peek(); p !== undefined; p = c.released.peek()) {
      if (this.#sliceSpent()) return undefined;
      c.released.pop();
      const e = this.list.at(p);
      if (e === undefined || e.removed || e.acquiredBy || !e.committed || this.#expired(e, now)) continue;
      if (e.excluded?.has(c) || !c.matches(e)) continue;
      return e;
    }
    this.#hintInEpoch();
    const end = this.list.end;
    const from = Math.max(this.#hint, this.list.start);
    let pos = Math.max(from, c.skipTo);
    // The hint only moves over a run that starts at it (entries before skipTo may be free for others).
    let advancing = pos === from;
    for (; pos < end; pos++) {
      if (this.#sliceSpent()) return undefined; // (skipTo and the hint say where it stopped)
      const e = this.list.at(pos)!;
      if (e.removed || e.acquiredBy) { if (advancing) this.#hint = pos + 1; c.skipTo = pos + 1; continue; }
      if (!e.committed) break;
      if (this.#expired(e, now)) { if (advancing) this.#hint = pos + 1; c.skipTo = pos + 1; continue; }
      advancing = false;
      c.skipTo = pos + 1; // taken now, or turned down for good
      if (e.excluded?.has(c)) continue;
      if (!c.matches(e)) continue;
      return e;
    }
    return undefined;
  }

  /** A compaction renumbered positions: the hint starts over from the front (it kept a stale, larger position and consumers stopped short). */
  #hintInEpoch(): void {
    if (this.#hintEpoch !== this.list.epoch) { this.#hint = this.list.start; this.#hintEpoch = this.list.epoch; }
  }

  /** Drops admission marked that stay after all (the message refused, or its batch failed): each policy that asked is told. */
  #undoDrops(dropped: Entry[], droppedBy: AdmissionPolicy[]): void {
    for (let i = 0; i < dropped.length; i++) { this.#undrop(dropped[i]!); droppedBy[i]!.dropUndone?.(dropped[i]!); }
  }

  /** Next entry for a browsing consumer, advancing its cursor. */
  #nextBrowse(c: ListConsumer, now: number): Entry | undefined {
    // One integer compare per read; the sink is asked only when the log bound dropped past it.
    if (this.#logFloor > c.lastScn && c.sink.fellOff !== undefined && this.#fellOff(c, now)) return undefined;
    if (c.epoch !== this.list.epoch) { c.pos = this.list.positionAfter(c.lastScn); c.epoch = this.list.epoch; }
    const end = this.list.end;
    let pos = Math.max(c.pos, this.list.start);
    for (; pos < end; pos++) {
      if (this.#sliceSpent()) break; // (c.pos says where it stopped)
      const e = this.list.at(pos)!;
      if (e.removed) continue;
      if (!e.committed) break;
      // An expired entry is passed for good (it can never be delivered): a consumer may still
      // hold it, and the log bound may drop it later, which must not read as a gap before
      // this reader (logFloor).
      c.pos = pos + 1;
      c.lastScn = e.scn;
      if (e.expiresAt !== undefined && e.expiresAt <= now) continue;
      if (!c.matches(e)) continue;
      return e;
    }
    c.pos = pos;
    return undefined;
  }

  /**
   * The log bound dropped messages after the browser `c`'s position before it read them (every
   * message up to logFloor is gone, so it has sent all it could before the gap). Its sink
   * decides: an error detaches the link (true: the reader stops, nothing more is sent, no
   * `passed`, no replay `completed`); none means nothing dropped was the link's, and the reader
   * passes over the gap.
   */
  #fellOff(c: ListConsumer, now: number): boolean {
    let oldest = this.queue.committedScn + 1;
    for (const e of this.list.live()) if (e.expiresAt === undefined || e.expiresAt > now) { oldest = e.scn; break; }
    const err = c.sink.fellOff!(c.lastScn, oldest);
    if (!err) { c.lastScn = this.#logFloor; return false; }
    log.info('reader fell behind the log bound: link detached', { queue: this.queue.name, link: c.sink.id, position: c.lastScn, oldest });
    c.close();
    c.sink.close(err);
    return true;
  }

  /** Scan steps taken in this dispatch (the clock is read every 64), and when its slice ends. */
  #work = 0;
  #deadline = 0;
  /** The dispatch stopped with its slice spent: it goes on in #resume. */
  #paused = false;
  #resume: NodeJS.Immediate | undefined;
  /** Consumers asked to drain: answered once a dispatch has run to its end (not when it paused). */
  readonly #drains = new Set<ListConsumer>();

  /** Whether this dispatch has scanned for its slice: then it stops (#paused) and goes on later. */
  #sliceSpent(): boolean {
    if (this.#paused) return true;
    if ((++this.#work & 63) !== 0 || performance.now() < this.#deadline) return false;
    this.#paused = true;
    return true;
  }

  /**
   * Delivers to every consumer with credit. Re-entrant calls coalesce. Scans take at most a
   * slice (SCAN_SLICE_MS); the rest goes on after other work has run, each consumer from where
   * its scan stopped, so delivery order is unchanged.
   */
  dispatch(): void {
    if (this.#dispatching) { this.#again = true; return; }
    this.#dispatching = true;
    this.#paused = false;
    this.#work = 0;
    this.#deadline = performance.now() + SCAN_SLICE_MS;
    try {
      this.list.holdPositions(() => this.#dispatchAll());
    } catch (err) {
      log.error('dispatch failed', { queue: this.queue.name, err });
      this.#paused = false;
    } finally {
      this.#dispatching = false;
    }
    if (this.#paused) {
      this.#resume ??= setImmediate(() => { this.#resume = undefined; this.dispatch(); });
    } else if (this.#drains.size > 0) {
      const drains = [...this.#drains];
      this.#drains.clear();
      for (const c of drains) c.sink.drained();
    }
  }

  /** @internal A drain asked of `c`: answered once everything available has been offered to it. */
  drain(c: ListConsumer): void {
    this.#drains.add(c);
    this.dispatch();
  }

  /** dispatch()'s rounds, with list positions held still (the scans remove as they go). */
  #dispatchAll(): void {
    do {
      this.#again = false;
      const now = this.queue.ctx.clock.now();
      for (const c of this.#consumers) {
        if (c.acquiring || c.closed) continue;
        while (c.sink.credit() > 0) {
          const e = this.#nextBrowse(c, now);
          if (this.#paused) return; // (not caught up: its scan stopped short)
          if (!e) { if (!c.closed) c.caughtUp(); break; }
          c.deliver(e, now);
        }
      }
      let progress = true;
      while (progress && this.#rr.length > 0) {
        progress = false;
        const n = this.#rr.length;
        const start = this.#rrIndex;
        for (let i = 0; i < n; i++) {
          const idx = (start + i) % n;
          const c = this.#rr[idx];
          if (c.closed || c.sink.credit() <= 0) continue;
          const e = this.#nextAvailable(c, now);
          if (this.#paused) { this.#rrIndex = idx; return; } // it goes on first
          if (!e) continue;
          e.acquiredBy = c;
          c.deliver(e, now);
          // Fairness: the next message starts with the consumer after this one.
          this.#rrIndex = (idx + 1) % n;
          progress = true;
        }
      }
    } while (this.#again);
  }
}

export class ListConsumer implements Consumer {
  readonly structure: ListStructure;
  readonly req: ConsumerRequest;
  readonly sink: DeliverySink;
  readonly acquiring: boolean;
  readonly opts: ListConsumerOptions;
  /** Browse cursor: next absolute position, and the SCN last passed (survives compaction). */
  pos: number;
  lastScn: number;
  epoch: number;
  /** Acquiring: the position before which this consumer has nothing to take (see #nextAvailable), and the list epoch it belongs to. */
  skipTo = 0;
  skipEpoch = 0;
  /** Acquiring: entries released behind skipTo, to look at again first (ListStructure #markReleased). */
  readonly released = new ReleasedEntries();
  closed = false;
  #caughtUp = false;
  /** Its filter threw, or a delivery to it could not be built: it matches nothing more while its link closes. */
  #filterFailed = false;
  readonly #unsettled = new Set<Entry>();
  /** Entries this consumer refused as undeliverable-here: it leaves their `excluded` sets at close. */
  readonly #excludedFrom = new Set<Entry>();
  #excludedPruneAt = 1024;

  constructor(structure: ListStructure, req: ConsumerRequest, sink: DeliverySink, opts: ListConsumerOptions) {
    this.structure = structure;
    this.req = req;
    this.sink = sink;
    this.opts = opts;
    this.acquiring = req.mode === 'move' && !structure.queue.browseOnly;
    this.lastScn = opts.startAfterScn ?? 0;
    this.pos = structure.list.positionAfter(this.lastScn);
    this.epoch = structure.list.epoch;
  }

  matches(e: Entry): boolean {
    if (this.#filterFailed) return false;
    const preds = this.req.predicates;
    if (preds.length === 0) return true;
    try {
      // Decoded as far as the filter reads (its head for a selector), shared with the consumers
      // that test it next, kept only within the cache's bounds (filter-env-cache.ts).
      const env = this.structure.envOf(e);
      for (const p of preds) if (!p(env)) return false;
    } catch (err) {
      // The message's bytes, not the filter: it does not match, and this link goes on (the
      // decode used to be outside this try: it ended the whole dispatch, on every dispatch).
      if (err instanceof UnreadableMessage) {
        log.warn('a filter could not read a message: taken as not matching', { queue: this.structure.queue.name, link: this.sink.id, scn: e.scn, err });
        return false;
      }
      // Thrown on, it ended the queue's dispatch: every other consumer went unserved. It ends this link only.
      this.#filterFailed = true;
      log.error('filter failed: link detached', { queue: this.structure.queue.name, link: this.sink.id, scn: e.scn, err });
      this.sink.close(new TidemarkError(Conditions.internal, `the link's filter failed on a message (${(err as Error)?.message ?? String(err)}); link detached`));
      return false;
    }
    return true;
  }

  caughtUp(): void {
    // Entries its filter skipped since the last delivery: a durable position may pass them.
    this.sink.passed?.(this.lastScn);
    if (this.#caughtUp) return;
    this.#caughtUp = true;
    this.opts.onCaughtUp?.();
  }

  /** The header to send `e` with (delivery-count, remaining ttl, first-acquirer), or null for the stored one. */
  #header(e: Entry, now: number): HeaderFields | null {
    const h = e.header;
    // first-acquirer says no other link acquired it [AMQP 3.2.1]: not true once one has
    // (a publisher's header saying true was sent as is on every redelivery).
    const notFirst = e.acquiredBefore && h.first_acquirer === true;
    const needHeader = e.deliveryCount > 0 || e.expiresAt !== undefined || notFirst;
    if (!needHeader) return null;
    // delivery-count is a uint [AMQP 3.2.1]: it stays at 2^32-1 (a publisher's 0xFFFFFFFF
    // released once made 2^32, which the encoder refuses); what is not a number counts as 0.
    const base = typeof h.delivery_count === 'number' && h.delivery_count >= 0 ? h.delivery_count : 0;
    return { ...h, delivery_count: Math.min(MAX_UINT, base + e.deliveryCount), ttl: e.expiresAt !== undefined ? Math.max(1, e.expiresAt - now) : h.ttl, ...(notFirst ? { first_acquirer: false } : null) };
  }

  deliver(e: Entry, now: number): void {
    // The bytes first: a throw here used to leave the entry acquired by this consumer (set by
    // dispatch) but in no unsettled set, so no close released it until a restart.
    let header: HeaderFields | null | undefined;
    let bytes: Buffer;
    try {
      header = this.#header(e, now);
      const ann = this.opts.annotate ? this.opts.annotate(e) : null;
      bytes = rewriteMessage(e.bytes, e.sections, header, ann);
    } catch (err) {
      this.#undeliverable(e, header, err);
      return;
    }
    if (this.acquiring) e.acquiredBefore = true;
    this.structure.queue.counters.delivered++;
    if (this.acquiring && !this.sink.presettled) {
      this.#unsettled.add(e);
      this.sink.send(bytes, (o) => this.#settled(e, o));
    } else if (this.acquiring) {
      // Pre-settled: at-most-once, gone as soon as sent.
      this.sink.send(bytes);
      this.structure.consumed(e);
    } else {
      this.sink.send(bytes, undefined, { settled: this.sink.presettled, position: e.scn });
    }
    this.opts.onDelivered?.(e);
  }

  /**
   * The delivery of `e` could not be built (`err`). When the message itself cannot be sent,
   * whatever the link (its bytes fail without this link's annotations too), it would fail for
   * every consumer: an acquiring link takes it out of the queue (as a rejected outcome would,
   * logged at error with its SCN), a browsing one passes it (logged); the link goes on.
   * Otherwise (this link's annotations) the entry is released for other consumers and this
   * link alone is closed with amqp:internal-error naming the cause.
   */
  #undeliverable(e: Entry, header: HeaderFields | null | undefined, err: unknown): void {
    const cause = (err as Error)?.message ?? String(err);
    const q = this.structure.queue.name;
    let own = true;
    if (this.opts.annotate && header !== undefined) {
      try { rewriteMessage(e.bytes, e.sections, header, null); own = false; } catch { /* the message's own */ }
    }
    if (own) {
      if (this.acquiring) {
        if (e.acquiredBy === this) e.acquiredBy = null;
        log.error('message cannot be delivered: removed from the queue', { queue: q, link: this.sink.id, scn: e.scn, err });
        this.structure.removeEntry(e, 'dropped');
      } else {
        log.error('message cannot be delivered: passed by this browser', { queue: q, link: this.sink.id, scn: e.scn, err });
      }
      return;
    }
    log.error('delivery could not be built: link detached', { queue: q, link: this.sink.id, scn: e.scn, err });
    this.#filterFailed = true;
    if (this.acquiring && e.acquiredBy === this) this.structure.released(e);
    this.sink.close(new TidemarkError(Conditions.internal, `a message (SCN ${e.scn}) could not be encoded for this link (${cause}); link detached, the message stays in the queue`));
  }

  #settled(e: Entry, o: Outcome): void {
    if (!this.#unsettled.delete(e)) return;
    if (e.acquiredBy !== this) return;
    switch (o.type) {
      case 'accepted':
      case 'rejected':
        this.structure.consumed(e);
        break;
      case 'released':
        this.structure.released(e);
        break;
      case 'modified':
        if (o.deliveryFailed) e.deliveryCount++;
        if (o.undeliverableHere) {
          (e.excluded ??= new Set()).add(this);
          this.#excludedFrom.add(e);
          // Kept only while the entry is in the queue (a long-lived consumer would hold them all);
          // pruned when the set has doubled since the last prune, so the walks cost O(1) each.
          if (this.#excludedFrom.size > this.#excludedPruneAt) {
            for (const x of this.#excludedFrom) if (x.removed) this.#excludedFrom.delete(x);
            this.#excludedPruneAt = Math.max(1024, 2 * this.#excludedFrom.size);
          }
        }
        this.structure.released(e);
        break;
      default: {
        const never: never = o;
        void never;
      }
    }
  }

  onCredit(): void { this.structure.dispatch(); }

  onDrain(): void { this.structure.drain(this); }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.structure.detach(this);
    // A message every reconnecting consumer refuses (undeliverable-here) held each closed one.
    for (const e of this.#excludedFrom) { e.excluded?.delete(this); if (e.excluded?.size === 0) e.excluded = undefined; }
    this.#excludedFrom.clear();
    this.released.clear();
    // Given back together: one dispatch, not one per message (each was a scan for every consumer).
    const back: Entry[] = [];
    for (const e of this.#unsettled) if (e.acquiredBy === this) back.push(e);
    this.#unsettled.clear();
    if (back.length > 0) this.structure.releasedAll(back);
  }
}
