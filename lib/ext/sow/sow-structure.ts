/**
 * The SOW structure (semantics.md 2, 6, 7): per key the latest record, an event log with one
 * SCN per event, optional history, and a time index — all written in the event's one batch
 * (architecture invariant 1). Records are kept in memory for publish-time decisions (delta
 * merge, history granularity); queries stream from LevelDB snapshots; subscribers pull
 * events by position from a ring of recent events or, behind it, from the log.
 */
import type { Queue, QueueStructure, PreparedEvent, QueueStats } from '../../core/queue/queue.js';
import type { InboundMessage } from '../../core/queue/inbound.js';
import type { BatchOp } from '../../core/storage/store.js';
import type { ConsumerRequest } from '../../core/extensions.js';
import type { Consumer, DeliverySink } from '../../core/queue/delivery.js';
import { CoreTables, scnKey, queuePrefix, prefixEnd, readScn, scnBytes } from '../../core/storage/keyspace.js';
import { encodeEvent, decodeEvent, eventTs, eventIsDelete, eventMessage, eventKept, type EventMeta } from '../../core/engine/event-record.js';
import { TidemarkError, Conditions, type Condition } from '../../core/errors.js';
import { jsonBody, MAX_JSON_DEPTH } from '../../codec/json-body.js';
import { encodeMessage, decodeMessage, invalidUtf8Section } from '../../codec/message-bytes.js';
import { sowKey, sowKeyOf, histKey, parseHistKey, sameHistKey, timeKey, tombKey, tombKeyOf, tombFloorKey, encodeTombFloor, decodeTombFloor, formKey, RECORDS_IN_HIST, TIME, HIST, SOW, TOMB } from './tables.js';
import { extractKey, keyFault, showKey, type KeySpec } from './sow-key.js';
import { logger } from '../../core/log.js';
import { ownCopy } from '../../codec/own-bytes.js';
import { mergeDelta } from './delta-merge.js';
import { SortedKeys } from './sorted-keys.js';
import { VersionIndex, sortBytewise } from './version-index.js';
import { Fifo } from '../../core/fifo.js';
import type { RecordRows } from './current-snapshot.js';

const log = logger('sow');
const EMPTY = Buffer.alloc(0);

export type SowOp = 'publish' | 'delta' | 'delete';

/** One committed event, as subscribers see it. */
export interface SowEvent {
  scn: number;
  ts: number;
  op: SowOp;
  key: string;
  /** The record state after the event (publish/delta) or the last state (delete). */
  bytes: Buffer;
  /** Window end SCN (transactions). */
  w?: number;
  /** A `delete` that is a TTL expiry (logged with meta `expired: true`). */
  expired?: boolean;
  /** When the record this event made expires (ms), if it has a TTL: deliveries carry the remaining ttl. */
  exp?: number;
  /** Decoded view, built once per event for all subscribers. */
  view?: any;
}

export interface SowRecord {
  scn: number; ts: number; bytes: Buffer;
  /**
   * With granularity: when the key's last history copy was kept, the time of the event that
   * superseded it (semantics.md 6: kept "if no history copy of that key was kept in the last G").
   */
  lastKeptAt?: number;
  /** Absolute expiry, ms (TTL; never on a queue with history). */ exp?: number;
}
/** Log/sow row metadata as the SOW writes it: the core's fields plus the expiry marker. */
type SowMeta = EventMeta & { expired?: boolean };
/** An expiry-heap entry; valid only while the key's record still has this SCN and expiry. */
interface ExpiryEntry { exp: number; key: string; scn: number }
/** One prepared change of a key's record (see SowStructure.#settle). */
interface PendingChange { before: SowRecord | undefined; after: SowRecord | undefined; state: 'pending' | 'done' | 'failed' }

export interface SowSettings {
  key: KeySpec;
  /** History window, ms; undefined = no history. */
  historyWindow?: number;
  /** History granularity, ms (0 keeps every version). */
  historyGranularity: number;
  /** Log retention, ms; undefined = forever. */
  logRetention?: number;
  /** Log max events; undefined = unlimited. */
  logMaxCount?: number;
}

/** A hist row seen by the history sweep: the row key, and its version's time and kind. */
interface SweptRow { k: Buffer; ts: number; tomb: boolean }

/** Recent events kept in memory for subscribers (older ones are read from the log). */
const RING_CAPACITY = 20000;
/** Deleted keys remembered for incremental bootstraps (past it the oldest go, and the floor moves up). */
const TOMBSTONE_CAP = 100_000;
const RING_CHUNK = 2000;
/** History sweep pacing: at least this many rows per background tick… */
const SWEEP_MIN_ROWS = 20000;
/** …and enough for a full pass over the history in this many ticks (seconds). */
const SWEEP_PASS_TICKS = 60;

export class SowStructure implements QueueStructure {
  readonly kind = 'sow';
  readonly needsStorage = true;
  readonly queue: Queue;
  readonly settings: SowSettings;
  /** The largest record a delta may merge into (the broker's limits.maxMessageSize). */
  recordLimit: { maxBytes: number } = { maxBytes: Infinity };
  readonly records = new Map<string, SowRecord>();
  /**
   * With granularity: each deleted key's tombstone (its SCN, time, and when the key's last
   * history copy was kept), until the key is re-created or the tombstone purged.
   */
  readonly #tombs = new Map<string, { scn: number; ts: number; lastKeptAt?: number }>();
  /**
   * Deleted keys and the SCN of their delete, for incremental bootstraps (semantics.md 8: a
   * consumer that fell off the log gets the records changed since its position and a
   * tombstone for each key deleted since). Complete for deletes at or after
   * `tombstoneFloor`, which moves up as the oldest are dropped past TOMBSTONE_CAP. A key
   * re-created leaves the map (its record then says what the consumer needs).
   * Stored too (the `tomb` table, a row per deleted key written in the delete's batch, and a
   * floor row), so a restart keeps them; a queue stored before they were (no floor row)
   * starts its floor at the head, as all queues once did at every start.
   */
  readonly #deleted = new Map<string, number>();
  /**
   * Keys whose tombstone row is written or in a batch on its way, and the SCN it holds: a
   * re-created key's row is deleted in the same batch (set at prepare time, so a delete and a
   * publish of one key in one batch leave no row).
   */
  readonly #tombRows = new Map<string, number>();
  /** The floor row is stored or on its way: tombstone rows are trusted at recovery only with it. */
  #floorStored = false;
  /** With history: the `form` row is stored or on its way (see "Where records live"). */
  #formStored = false;
  /** Deletes in SCN order, to drop the oldest (entries whose key was re-created or deleted again are skipped). */
  readonly #deletedOrder = new Fifo<{ key: string; scn: number }>();
  /** Deletes from this SCN on are all in #deleted. */
  tombstoneFloor = 1;
  /**
   * When #deleted began (this queue's creation, or the broker's start), ms. SCNs start again
   * at 1 in a queue deleted and re-created (or whose data was replaced): a checkpoint from
   * the earlier queue can look covered by SCN alone. Its last event's time (tsNsecs) is
   * before this, which tells it apart (checkpointPlan).
   */
  tombstonesSinceMs: number;
  /** Per key, the SCNs of its rows in the `hist` table (historical queries; version-index.ts). */
  readonly versions = new VersionIndex();
  /** Recent committed events, oldest first (SCNs increasing, gaps possible after failures). */
  readonly ring: SowEvent[] = [];
  /** Oldest SCN still in the log (0 = empty): where checkpoints and streaming readers may read from; bookmarks go by logFloor. */
  oldestLogScn = 0;

  /**
   * The oldest event a bookmark may start from: the oldest log row, and with log.max_count no
   * older than the newest N committed. The background trim deletes the rows before it within
   * a second; a replay does not start before it meanwhile (a replay from 0 right after a burst
   * gave every event the trim had not reached yet, and an older bookmark was accepted). A
   * checkpoint resumes, and a streaming reader reads on, from any row still there.
   */
  get logFloor(): number {
    const n = this.settings.logMaxCount;
    if (n === undefined || this.oldestLogScn === 0) return this.oldestLogScn;
    return Math.max(this.oldestLogScn, this.queue.committedScn - n + 1);
  }
  /** Number of log events retained. */
  logCount = 0;
  historyVersions = 0;
  #bytes = 0;
  readonly #subscribers = new Set<{ wake(): void; close(error?: TidemarkError): void }>();
  /** Hooks run on each committed event, in SCN order (extensions; not consumers). */
  readonly onCommitted: Array<(ev: SowEvent) => void> = [];
  /** Extension hook: opens the consumer for a request (set by the SOW extension). */
  openConsumerImpl?: (s: SowStructure, req: ConsumerRequest, sink: DeliverySink) => Consumer;

  constructor(queue: Queue, settings: SowSettings) {
    this.queue = queue;
    this.settings = settings;
    queue.browseOnly = true;
    // (a structure made without a broker, as unit tests do, has no clock: from the epoch)
    this.tombstonesSinceMs = queue.ctx?.clock.now() ?? 0;
  }

  /** The history extension keeps superseded versions for `window` ms (before recovery). */
  keepHistory(window: number, granularity: number): void {
    this.settings.historyWindow = window;
    this.settings.historyGranularity = granularity;
  }

  /** The replay extension bounds the log by age and/or count (before recovery). */
  boundLog(retention: number | undefined, maxCount: number | undefined): void {
    this.settings.logRetention = retention;
    this.settings.logMaxCount = maxCount;
  }

  get hasHistory(): boolean { return this.settings.historyWindow !== undefined; }
  get bytes(): number { return this.#bytes; }

  subscribe(s: { wake(): void; close(error?: TidemarkError): void }): () => void {
    this.#subscribers.add(s);
    return () => this.#subscribers.delete(s);
  }

  /**
   * Links to close with the queue, from the moment they open: a link subscribes for events
   * only once its snapshot is sent, and one deleted mid-snapshot used to stay attached (and
   * keep the deleted queue in memory) until its client detached.
   */
  readonly #closers = new Set<(error?: TidemarkError) => void>();
  onClose(fn: (error?: TidemarkError) => void): () => void {
    this.#closers.add(fn);
    return () => this.#closers.delete(fn);
  }

  #op(msg: InboundMessage): SowOp {
    const m = msg.message;
    const raw = m?.message_annotations?.['x-opt-tm-op'] ?? m?.application_properties?.['tm-op'];
    if (raw === undefined || raw === null) return 'publish';
    const op = String(raw?.value ?? raw);
    if (op === 'publish' || op === 'delta' || op === 'delete') return op;
    throw new TidemarkError(Conditions.invalidField, `unknown x-opt-tm-op ${JSON.stringify(op)} on queue ${this.queue.name} (known: publish, delta, delete)`);
  }

  /**
   * The key a `delete` names in `x-opt-tm-key`: a string, or a number as a body key's number
   * is (its text). Anything else was once turned into text ("[object Object]", "1,2") and
   * deleted whatever record had that key: refused now, nothing deleted.
   */
  #annotationKey(v: unknown): string {
    const q = this.queue;
    let key: string | undefined;
    if (typeof v === 'string') key = v;
    else if (typeof v === 'number' && Number.isFinite(v)) key = String(v);
    else if (typeof v === 'bigint') key = v.toString();
    if (key === undefined) {
      const what = Array.isArray(v) ? 'a list' : Buffer.isBuffer(v) ? 'binary' : v instanceof Date ? 'a timestamp' : typeof v === 'object' ? 'a map or described value' : `a ${typeof v} (${String(v)})`;
      throw new TidemarkError(Conditions.invalidField, `queue ${q.name}: x-opt-tm-key must be a string (or a number), got ${what}; nothing was deleted`);
    }
    if (key === '') throw new TidemarkError(Conditions.invalidField, `queue ${q.name}: x-opt-tm-key is empty; nothing was deleted`);
    const fault = keyFault(key);
    if (fault) throw new TidemarkError(Conditions.invalidField, `queue ${q.name}: x-opt-tm-key ${showKey(key)} ${fault}; nothing was deleted`);
    return key;
  }

  prepare(msg: InboundMessage, scn: number, windowEnd: number | undefined): PreparedEvent {
    try {
      return this.#prepare(msg, scn, windowEnd);
    } catch (e) {
      if (e instanceof TidemarkError) throw e;
      // Nothing a producer sends should get here: log it with its cause (wire.md 8), so the
      // client's internal-error has a trail (a stack overflow on a deep body once had none).
      log.error('SOW event could not be prepared', { queue: this.queue.name, err: e });
      throw new TidemarkError(Conditions.internal, `queue ${this.queue.name}: internal error preparing the event (logged): ${(e as Error)?.message ?? String(e)}`, { cause: e });
    }
  }

  #prepare(msg: InboundMessage, scn: number, windowEnd: number | undefined): PreparedEvent {
    const q = this.queue;
    const op = this.#op(msg);
    const m = msg.message ?? {};
    const annKey = m.message_annotations?.['x-opt-tm-key'];
    let key: string;
    let json: unknown;
    if (op === 'delete' && annKey !== undefined && annKey !== null) {
      key = this.#annotationKey(annKey);
    } else {
      const j = jsonBody(m, { maxDepth: MAX_JSON_DEPTH });
      if (!j.ok) throw new TidemarkError(Conditions.decodeError, `queue ${q.name}: cannot read the SOW key (sow.key=${this.settings.key.text}): ${j.reason}`);
      json = j.value;
      const k = extractKey(this.settings.key, json, m.application_properties);
      if ('missing' in k) {
        // A path without '/' names an application property: an easy slip for a body field.
        const hint = k.missing.startsWith('/') ? '' : `; ${k.missing} names an application property, a JSON body field is /${k.missing}`;
        throw new TidemarkError(Conditions.invalidField, `queue ${q.name}: message has no SOW key at ${k.missing} (sow.key=${this.settings.key.text}${hint})`);
      }
      if ('malformed' in k) {
        throw new TidemarkError(Conditions.invalidField, `queue ${q.name}: the SOW key at ${k.malformed} (sow.key=${this.settings.key.text}), ${showKey(k.value)}, ${k.fault}`);
      }
      key = k.key;
    }
    // rhea reads a string that is not valid UTF-8 with U+FFFD for the bad bytes: two keys (or
    // string bodies) differing only there became one record. Only a key or string body showing
    // U+FFFD can have come from such bytes; those are checked against the bytes (a native
    // check, no copy). Binary JSON bodies are checked as they are read (json-body.ts).
    if (key.includes('\ufffd') || (typeof m.body === 'string' && m.body.includes('\ufffd'))) {
      const bad = invalidUtf8Section(msg.bytes);
      if (bad) throw new TidemarkError(Conditions.decodeError, `queue ${q.name}: the ${bad} section holds a string that is not valid UTF-8 (read with U+FFFD for the invalid bytes, distinct SOW keys would share one record); nothing was stored`);
    }
    const ts = msg.receivedAt;
    const prev = this.records.get(key);
    let bytes: Buffer;
    if (op === 'delete') {
      bytes = prev?.bytes ?? msg.bytes;
    } else if (op === 'delta' && prev && !SowStructure.expiredAt(prev.exp, ts)) {
      // (A delta on a record whose TTL has passed, before the sweep logged its expiry, does
      // not merge into it: the record no longer exists, so the delta is the whole record.)
      bytes = mergeDelta(prev.bytes, json as Record<string, unknown>, q.name, msg.bytes);
      // Each delta is within the limit, and their sum was not: a record the broker would
      // refuse as one message grew without bound, and went out past what links announce.
      if (bytes.length > this.recordLimit.maxBytes) {
        throw new TidemarkError(Conditions.resourceLimit, `queue ${q.name}: this delta would make the record ${showKey(key)} ${bytes.length} bytes, over limits.maxMessageSize (${this.recordLimit.maxBytes}); nothing was changed`);
      }
    } else {
      bytes = msg.bytes;
    }
    // An expiry (from #expireDue, never from a producer: attrs are broker-internal) is a
    // delete marked `expired`, so every reader that knows deletes handles it.
    const expiring = op === 'delete' && msg.attrs.sowExpire === true;
    // TTL applies to SOW records only without history (semantics.md 2); the latest write
    // (publish or delta) decides: its header.ttl, or none = never expires.
    const exp = op !== 'delete' && !this.hasHistory ? msg.expiresAt : undefined;
    const ops: BatchOp[] = [];
    const meta: SowMeta = { ts, op, key, w: windowEnd };
    if (expiring) meta.expired = true;
    if (exp !== undefined) meta.exp = exp; // a replayed event's delivery carries the remaining ttl
    ops.push({ type: 'put', key: scnKey(CoreTables.log, q.id, scn), value: encodeEvent(meta, bytes) });
    // The time index is sparse: a row for the first event of each new timestamp (events are
    // in SCN order and timestamps only move forward in it), which answers "last event at or
    // before T" exactly (index.ts scnAtTime) at a fraction of the rows under load.
    const indexed = ts > this.#lastIndexedTs;
    if (indexed) { ops.push({ type: 'put', key: timeKey(q.id, ts, scn), value: EMPTY }); this.#lastIndexedTs = ts; }
    let histAdded = 0;
    let histDropped: number | undefined; // SCN of the superseded version whose row this event deletes
    // A deleted key's current version is its tombstone: with granularity, the event that
    // re-creates (or deletes again) the key supersedes it like any other version.
    const granular = this.hasHistory && this.settings.historyGranularity > 0;
    const tomb = !prev && granular ? this.#tombs.get(key) : undefined;
    const current = prev ?? tomb;
    let lastKeptAt = current?.lastKeptAt;
    if (this.hasHistory) {
      // Granularity: the superseded version stays only if no copy of this key was kept in the
      // last G, a copy being kept when the event superseding it arrives (now, `ts`; the AMPS
      // seed: "stores the copies when a new message arrives"). It used to go by when the last
      // kept version was made: a version made within G of it was dropped however long it stayed
      // current (G = 10 s: a state current for an hour, made 3 s after the kept one, was lost).
      // (What the window purges later is found by the history sweep, see #sweepHistory.)
      if (current && granular) {
        const keep = lastKeptAt === undefined || ts - lastKeptAt >= this.settings.historyGranularity;
        if (keep) lastKeptAt = ts;
        else { ops.push({ type: 'del', key: histKey(q.id, key, current.scn) }); histAdded--; histDropped = current.scn; }
      }
      // With granularity the row says when the key's last copy was kept, for recovery (recover()).
      const hmeta: EventMeta = { ts, op: op === 'delete' ? 'delete' : 'publish' };
      if (granular && lastKeptAt !== undefined) hmeta.kept = lastKeptAt;
      ops.push({ type: 'put', key: histKey(q.id, key, scn), value: encodeEvent(hmeta, op === 'delete' ? Buffer.alloc(0) : bytes) });
      histAdded++;
    }
    // With history the version just written is the record (see "Where records live").
    let formRow = false;
    if (this.hasHistory) {
      // In every event until a batch holding it is durable: the batch that first carries it can
      // fail after later events were prepared without it, and a restart that finds records in
      // hist but no form row reads them as old sow-row data (and would delete every one).
      if (!this.#formStored) { ops.push({ type: 'put', key: formKey(q.id), value: RECORDS_IN_HIST }); formRow = true; }
    } else if (op === 'delete') {
      // Whether or not memory has a record: a delete of this key still being written may fail,
      // and its row would then outlive this delete (a missing row costs LevelDB nothing).
      ops.push({ type: 'del', key: sowKey(q.id, key) });
    } else {
      ops.push({ type: 'put', key: sowKey(q.id, key), value: encodeEvent({ ts, op: 'publish', key, w: scn, ...(exp !== undefined ? { exp } : {}) }, bytes) });
    }
    // The tombstone row moves with the event, atomically: a restart finds exactly the deletes
    // committed since the floor.
    let tombRowBefore: number | undefined;
    if (op === 'delete') {
      tombRowBefore = this.#tombRows.get(key);
      ops.push({ type: 'put', key: tombKey(q.id, key), value: scnBytes(scn) });
      this.#tombRows.set(key, scn);
    } else if (this.#tombRows.size !== 0 && (tombRowBefore = this.#tombRows.get(key)) !== undefined) {
      ops.push({ type: 'del', key: tombKey(q.id, key) });
      this.#tombRows.delete(key);
    }
    const floorRow = !this.#floorStored; // (as the form row: in every event until durable)
    if (floorRow) ops.push({ type: 'put', key: tombFloorKey(q.id), value: encodeTombFloor(this.tombstoneFloor, this.tombstonesSinceMs) });
    // In-memory state moves now, so the next prepare in this batch sees it; failed() puts the
    // tombstone back as it was (a refused delete's tombstone, left in memory, was taken for the
    // key's current version: the next event within G deleted a hist row that was never written).
    const tombBefore = granular ? this.#tombs.get(key) : undefined;
    let tombSet: { scn: number; ts: number; lastKeptAt?: number } | undefined;
    if (granular) { if (op === 'delete') this.#tombs.set(key, tombSet = { scn, ts, lastKeptAt }); else if (tomb) this.#tombs.delete(key); }
    let compactKeys = false;
    if (op === 'delete') { if (prev) { this.records.delete(key); compactKeys = this.#keys.removed(); this.#bytes -= prev.bytes.length; } }
    else {
      this.records.set(key, { scn, ts, bytes, ...(lastKeptAt !== undefined ? { lastKeptAt } : {}), ...(exp !== undefined ? { exp } : {}) });
      if (!prev) this.#keys.added(key);
      this.#bytes += bytes.length - (prev?.bytes.length ?? 0);
      if (exp !== undefined) this.#heapPush({ exp, key, scn });
    }
    const ev: SowEvent = { scn, ts, op, key, bytes, w: windowEnd };
    if (expiring) ev.expired = true;
    if (exp !== undefined) ev.exp = exp;
    const pend: PendingChange = { before: prev, after: this.records.get(key), state: 'pending' };
    let chain = this.#pending.get(key);
    if (!chain) this.#pending.set(key, chain = []);
    chain.push(pend);
    // Deleted keys pile up in the snapshot key list until a snapshot merges them: past a
    // quarter of the list, pruned in slices from the next turn (sorted-keys.ts).
    if (compactKeys) this.#keys.pruneSoon((k) => this.records.has(k), (k) => this.#pending.has(k));
    return {
      ops,
      committed: () => {
        this.#settle(key, pend, 'done');
        if (floorRow) this.#floorStored = true;
        if (formRow) this.#formStored = true;
        if (expiring) q.counters.expired++;
        this.historyVersions += histAdded;
        if (this.hasHistory) {
          if (histDropped !== undefined) this.versions.remove(key, histDropped);
          this.versions.add(key, scn);
        }
        // A version stopped being current (or a tombstone was written) at ts: the sweep has work once ts leaves the window.
        if (this.hasHistory && (prev || op === 'delete')) this.#noteSupersede(ts);
        if (op === 'delete') this.#noteDeleted(key, scn);
        else if (this.#deleted.size) this.#deleted.delete(key);
        this.logCount++;
        if (this.oldestLogScn === 0) this.oldestLogScn = scn;
        this.ring.push(ev);
        // Trim in chunks: one splice per RING_CHUNK events, not one per event.
        if (this.ring.length > RING_CAPACITY + RING_CHUNK) this.#trimRing(this.ring.length - RING_CAPACITY);
        for (const h of this.onCommitted) h(ev);
        for (const s of this.#subscribers) s.wake();
      },
      failed: () => {
        this.#settle(key, pend, 'failed');
        if (indexed) this.#lastIndexedTs = -1; // its index row was not written: index the next event
        // The rows as they were (a later re-create or drop of the key then writes what it must).
        if (this.#tombRows.get(key) === (op === 'delete' ? scn : undefined)) {
          if (tombRowBefore === undefined) this.#tombRows.delete(key); else this.#tombRows.set(key, tombRowBefore);
        }
        // Likewise the tombstone, if this event changed it and nothing since has (undone newest
        // first, the events after it in failed batches have put back theirs already).
        if ((tombSet || tomb) && this.#tombs.get(key) === tombSet) {
          if (tombBefore === undefined) this.#tombs.delete(key); else this.#tombs.set(key, tombBefore);
        }
      },
    };
  }

  #noteDeleted(key: string, scn: number): void {
    this.#deleted.set(key, scn);
    this.#deletedOrder.push({ key, scn });
    this.#capTombstones();
  }

  /**
   * Drops the oldest tombstones past TOMBSTONE_CAP and raises the floor above them; their
   * rows go with the new floor row in one batch (a crash before it keeps the older floor and
   * rows, which is as complete). A row holding a newer delete of the key is kept.
   */
  #capTombstones(extra: BatchOp[] = []): void {
    const q = this.queue;
    const ops = extra;
    const floorBefore = this.tombstoneFloor;
    while (this.#deletedOrder.length > TOMBSTONE_CAP) {
      const old = this.#deletedOrder.shift()!;
      if (this.#deleted.get(old.key) === old.scn) this.#deleted.delete(old.key);
      if (this.#tombRows.get(old.key) === old.scn) { this.#tombRows.delete(old.key); ops.push({ type: 'del', key: tombKey(q.id, old.key) }); }
      this.tombstoneFloor = Math.max(this.tombstoneFloor, old.scn + 1);
    }
    // Written whenever it moves, stored or not: an event that carries the floor row may still be
    // on its way with the floor before this (a later put in the batches wins).
    if (this.tombstoneFloor !== floorBefore) {
      ops.push({ type: 'put', key: tombFloorKey(q.id), value: encodeTombFloor(this.tombstoneFloor, this.tombstonesSinceMs) });
    }
    if (ops.length && q.ctx?.committer) q.ctx.committer.addQuiet(ops);
  }

  /** Whether every delete after SCN `had` is known, so a consumer holding the state after it can bootstrap incrementally. */
  knowsDeletesAfter(had: number): boolean { return had > 0 && had + 1 >= this.tombstoneFloor; }

  /**
   * The keys deleted at SCNs in [since, upTo] and not re-created since, in LevelDB key order
   * (UTF-8 bytes, as the snapshot's rows come), after `afterKey` when given. Undefined when
   * the deletes from `since` on are not all known (below tombstoneFloor): the caller then
   * bootstraps in full.
   */
  tombstonesSince(since: number, upTo: number, afterKey?: string): Array<{ key: string; scn: number }> | undefined {
    if (since < this.tombstoneFloor) return undefined;
    const after = afterKey === undefined ? undefined : Buffer.from(afterKey, 'utf8');
    const out: Array<{ key: string; scn: number; b: Buffer }> = [];
    for (const [key, scn] of this.#deleted) {
      if (scn < since || scn > upTo) continue;
      const b = Buffer.from(key, 'utf8');
      if (after && Buffer.compare(b, after) <= 0) continue;
      out.push({ key, scn, b });
    }
    out.sort((x, y) => Buffer.compare(x.b, y.b));
    return out.map(({ key, scn }) => ({ key, scn }));
  }

  /** Timestamp of the newest time-index row written (see prepare). */
  #lastIndexedTs = -1;

  /**
   * Changes to a key's record prepared but not yet durable, oldest first. Restoring just
   * `prev` on failure was wrong twice over: the committer runs a failed batch's callbacks
   * oldest first, so two events on one key in one batch ended on the first one's (never
   * written) record; and an event of the next batch, prepared on top of a failing one, was
   * overwritten by the undo (or later restored the failed record as its `prev`).
   */
  readonly #pending = new Map<string, PendingChange[]>();

  /**
   * Every key that may have a record at the last committed SCN, in UTF-8 byte order: the keys
   * of `records`, and those of changes still being written (a delete on its way: the key
   * still has its record at that SCN). A key created by a change on its way is listed too; a
   * snapshot finds no record of it (current-snapshot.ts). The list is not to be changed.
   */
  snapshotKeys(): readonly string[] {
    return this.#keys.list((key) => this.records.has(key), (key) => this.#pending.has(key));
  }

  /**
   * Where each key's record at S is stored, for a current snapshot (current-snapshot.ts)
   * taken now at S, the last committed SCN, at a quiescent point: its `sow` row, or with
   * history its version at S (its SCN known here), kept as the snapshot sees it until close()
   * (a granularity drop after S deletes the version at S; VersionIndex.openReader); none if
   * the key had no version then.
   */
  recordRows(S: number): RecordRows {
    const qid = this.queue.id;
    if (!this.hasHistory) return { at: (key) => ({ row: sowKey(qid, key) }), close: () => {} };
    const reader = this.versions.openReader(S, false);
    return {
      at: (key) => {
        const scn = reader.versionAt(key);
        return scn === undefined ? undefined : { row: histKey(qid, key, scn), scn };
      },
      close: () => reader.close(),
    };
  }

  /** The keys of `records` in byte order, kept between snapshots (sorted-keys.ts). */
  readonly #keys = new SortedKeys();

  #settle(key: string, p: PendingChange, state: 'done' | 'failed'): void {
    p.state = state;
    const chain = this.#pending.get(key);
    if (!chain) return;
    if (state === 'failed') {
      // The record is the newest change still standing (pending or durable), else what was
      // durable before them all.
      let target = chain[0].before;
      for (let i = chain.length - 1; i >= 0; i--) if (chain[i].state !== 'failed') { target = chain[i].after; break; }
      const cur = this.records.get(key);
      if (cur !== target) {
        if (cur) this.#bytes -= cur.bytes.length;
        if (target) { this.records.set(key, target); this.#bytes += target.bytes.length; if (!cur) this.#keys.added(key); } else { this.records.delete(key); this.#keys.removed(); }
      }
    }
    // Drop settled changes from the front; a failed one hands its `before` on.
    while (chain.length && chain[0].state !== 'pending') {
      const first = chain.shift()!;
      if (first.state === 'failed' && chain.length) chain[0].before = first.before;
    }
    if (chain.length === 0) this.#pending.delete(key);
  }

  /** Every committed event with SCN > ringFloor is in the ring. */
  ringFloor = 0;

  /** Ring index of the first event with SCN > `after`, or -1 when older events are only in the log. */
  ringIndexAfter(after: number): number {
    if (after < this.ringFloor) return -1;
    const r = this.ring;
    let lo = 0, hi = r.length;
    while (lo < hi) { const mid = (lo + hi) >>> 1; if (r[mid].scn <= after) lo = mid + 1; else hi = mid; }
    return lo;
  }

  #trimRing(count: number): void {
    if (count <= 0) return;
    this.ringFloor = Math.max(this.ringFloor, this.ring[count - 1].scn);
    this.ring.splice(0, count);
  }

  /**
   * Where records live. A queue without history keeps each key's record in the `sow` table, a
   * row per key rewritten by every event. A queue with history writes every version to `hist`
   * anyway, the current one too (the sweep never purges a key's newest version), so there the
   * record is its key's newest `hist` version (none, or a tombstone: no record) and no `sow` row
   * is written: one row and one copy of the message less per event (docs/performance.md,
   * session 20). The `form` row says a queue's records are in `hist`. A queue stored without
   * it (by an earlier Tidemark, or served without the history extension) has `sow` rows, which
   * recovery moves over; one with it started without the history extension gets them back.
   */
  async recover(): Promise<number> {
    const q = this.queue;
    const store = q.ctx.store;
    const sp = queuePrefix(SOW, q.id);
    const recordsInHist = (await store.get(formKey(q.id))) !== undefined;
    let max = 0;
    if (recordsInHist) {
      // (rows left by a move to `hist` cut short after its batch: stale, and never read)
      await store.clearRange(sp, prefixEnd(sp));
    } else {
      for await (const [k, v] of store.rows({ gte: sp, lt: prefixEnd(sp) })) {
        const { meta, message } = decodeEvent(v);
        const scn = meta.w ?? 0;
        const key = sowKeyOf(k);
        const exp = this.hasHistory ? undefined : meta.exp;
        this.records.set(key, { scn, ts: meta.ts, bytes: Buffer.from(message), ...(exp !== undefined ? { exp } : {}) });
        this.#keys.load(key); // table order: sorted
        if (exp !== undefined) this.#heapPush({ exp, key, scn });
        this.#bytes += message.length;
        max = Math.max(max, scn);
      }
    }
    // Log bounds, and the last events into the ring.
    const lp = queuePrefix(CoreTables.log, q.id);
    const first = await store.all({ gte: lp, lt: prefixEnd(lp), limit: 1, keysOnly: true });
    if (first.length) this.oldestLogScn = readScn(first[0][0], 5);
    const last = await store.all({ gte: lp, lt: prefixEnd(lp), limit: RING_CAPACITY, reverse: true });
    for (let i = last.length - 1; i >= 0; i--) {
      const [k, v] = last[i];
      const scn = readScn(k, 5);
      const { meta, message } = decodeEvent(v);
      this.ring.push(eventFromLog(scn, meta, message));
      max = Math.max(max, scn);
    }
    // The ring holds every row from its first: below it, a reader goes to the log. A trimmed log
    // (a bounded one may have been) starts there too, so a position older than the oldest row has
    // fallen off (it used to be read from the ring, from the first event left: a silent gap).
    if (this.ring.length && (last.length === RING_CAPACITY || this.logBounded)) this.ringFloor = this.ring[0].scn - 1;
    this.logCount = await countRange(store, lp);
    // With granularity, per key: when its last history copy was kept (lastKeptAt) and, for a
    // deleted key, its tombstone. Applied once the records are known.
    const keptAt = new Map<string, number>();
    const tombs = new Map<string, { scn: number; ts: number; lastKeptAt?: number }>();
    if (this.hasHistory) {
      // One pass over the history: the version index, the count, and for granularity when each
      // key's last copy was kept (G = 0 needs no values then). Its newest row says (`kept`,
      // written from session 23). A row written before has none: when the copy before it was
      // kept is then not known, only that it was after that copy was made and at or before the
      // newest row was, and the newest row's time is taken. That errs toward fewer copies, never
      // two within G: what it may drop is the current version if the next event comes within
      // G of it, a state that lasted less than G. (The key's only row: no copy kept.)
      const hp = queuePrefix(HIST, q.id);
      const G = this.settings.historyGranularity > 0;
      let prevKey = '', prevTs: number | undefined, prevScn = 0, prevTomb = false, prevKept: number | undefined, rowsOfKey = 0, n = 0;
      const endGroup = () => {
        const lastKept = prevKept ?? (rowsOfKey > 1 ? prevTs : undefined);
        if (lastKept !== undefined) keptAt.set(prevKey, lastKept);
        if (prevTomb) tombs.set(prevKey, { scn: prevScn, ts: prevTs!, lastKeptAt: lastKept });
      };
      const cursor = store.cursor({ gte: hp, lt: prefixEnd(hp), keysOnly: !G });
      try {
        for (;;) {
          const rows = await cursor.next(1000);
          if (rows.length === 0) break;
          for (const [k, v] of rows) {
            const { key, scn } = parseHistKey(k);
            this.versions.load(key, scn);
            n++;
            if (!G) continue;
            const ts = eventTs(v);
            if (key !== prevKey) {
              if (prevKey) endGroup();
              prevKey = key; rowsOfKey = 0;
            }
            rowsOfKey++;
            prevTs = ts; prevScn = scn; prevTomb = eventIsDelete(v); prevKept = eventKept(v);
          }
        }
      } finally { await cursor.close(); }
      if (prevKey && G) endGroup();
      this.historyVersions = n;
      // Superseded versions may be due: the first sweep passes over them all to find out.
      if (n > 0) this.#earliestSupersede = -Infinity;
    }
    if (recordsInHist) max = Math.max(max, await this.#recordsFromHist());
    const head = await store.get(queuePrefix(CoreTables.head, q.id));
    if (head) max = Math.max(max, readScn(head, 0) - 1);
    // A bounded log trimmed whole (log.retention) starts after the head, as the trim left it.
    if (!first.length && this.logBounded && max > 0) { this.oldestLogScn = max + 1; this.ringFloor = max; }
    if (!recordsInHist && this.hasHistory) await this.#moveRecordsToHist(max, tombs);
    for (const [key, t] of keptAt) { const r = this.records.get(key); if (r) r.lastKeptAt = t; }
    for (const [key, t] of tombs) if (!this.records.has(key)) this.#tombs.set(key, t);
    await this.#recoverTombstones(max);
    return max;
  }

  /**
   * Recovery of a queue whose records are in `hist` (see "Where records live"): each key's
   * newest version, read in chunks by point reads; a tombstone is no record. Started without
   * the history extension, the queue is served without history (its rows kept for when the
   * extension is back): its records go back to `sow` rows, and the `form` row goes.
   */
  async #recordsFromHist(): Promise<number> {
    const q = this.queue;
    const store = q.ctx.store;
    const newest = this.hasHistory ? [...this.versions.newest()] : await newestHistVersions(store, q.id);
    let max = 0;
    const keys: string[] = [];
    for await (const [key, scn, v] of readVersions(store, q.id, newest)) {
      max = Math.max(max, scn);
      if (!v || eventIsDelete(v)) continue;
      const bytes = ownCopy(eventMessage(v));
      this.records.set(key, { scn, ts: eventTs(v), bytes });
      this.#bytes += bytes.length;
      keys.push(key);
    }
    sortBytewise(keys);
    for (const key of keys) this.#keys.load(key);
    if (this.hasHistory) { this.#formStored = true; return max; }
    log.warn('queue with history started without the history extension: served without history, its records back in sow rows', { queue: q.name, records: this.records.size });
    const ops: BatchOp[] = [];
    for (const [key, r] of this.records) ops.push({ type: 'put', key: sowKey(q.id, key), value: encodeEvent({ ts: r.ts, op: 'publish', key, w: r.scn }, r.bytes) });
    ops.push({ type: 'del', key: formKey(q.id) });
    await store.batch(ops, true);
    return max;
  }

  /**
   * Recovery of a queue with history stored with `sow` rows (an earlier Tidemark, or served
   * without the history extension): the `sow` rows say what the records are. Where `hist`
   * disagrees (events while the extension was off are not in it), it is made to agree: a
   * record's version is added, and a key deleted meanwhile gets a tombstone at the head `max`
   * (when it was deleted is not known). The `form` row goes in the same batch; then the `sow`
   * rows go.
   */
  async #moveRecordsToHist(max: number, tombs: Map<string, { scn: number; ts: number; lastKeptAt?: number }>): Promise<void> {
    const q = this.queue;
    const store = q.ctx.store;
    const ops: BatchOp[] = [];
    const now = q.ctx.clock.now();
    const newestOf = new Map<string, number>(this.versions.newest());
    // Keys with versions but no record: their newest version must be a tombstone.
    const unrecorded = [...newestOf].filter(([key]) => !this.records.has(key));
    let fixed = 0;
    for await (const [key, newest, v] of readVersions(store, q.id, unrecorded)) {
      if (v && eventIsDelete(v)) continue;
      if (newest >= max) continue; // (not a state a Tidemark writes: the record would be its version)
      ops.push({ type: 'put', key: histKey(q.id, key, max), value: encodeEvent({ ts: now, op: 'delete' }, EMPTY) });
      this.versions.add(key, max);
      this.historyVersions++;
      tombs.set(key, { scn: max, ts: now });
      fixed++;
    }
    for (const [key, r] of this.records) {
      const h = newestOf.get(key);
      if (h === r.scn) continue;
      fixed++;
      // Versions newer than the record (no Tidemark writes them: both go in one batch) go.
      for (const scn of this.versions.versionsOf(key)) if (scn > r.scn) { ops.push({ type: 'del', key: histKey(q.id, key, scn) }); this.versions.remove(key, scn); this.historyVersions--; }
      ops.push({ type: 'put', key: histKey(q.id, key, r.scn), value: encodeEvent({ ts: r.ts, op: 'publish' }, r.bytes) });
      this.versions.add(key, r.scn);
      this.historyVersions++;
    }
    if (fixed) log.warn('SOW queue history made to agree with its records (events while the history extension was not loaded)', { queue: q.name, keys: fixed });
    ops.push({ type: 'put', key: formKey(q.id), value: RECORDS_IN_HIST });
    await store.batch(ops, true);
    const sp = queuePrefix(SOW, q.id);
    await store.clearRange(sp, prefixEnd(sp));
    this.#formStored = true;
  }

  /**
   * The tombstones as stored: complete from the stored floor. Rows of keys that exist again
   * (a failed re-create's delete) or below the floor (a drop cut short) are removed. Without
   * a floor row (a queue stored before tombstones were, or whose first batch failed), what was
   * deleted before this start is not known: the floor starts at the head.
   */
  async #recoverTombstones(max: number): Promise<void> {
    const q = this.queue;
    const store = q.ctx.store;
    const floorRow = await store.get(tombFloorKey(q.id));
    const stored = floorRow ? decodeTombFloor(floorRow) : undefined;
    const rowsPrefix = Buffer.concat([queuePrefix(TOMB, q.id), Buffer.from([1])]);
    const stale: BatchOp[] = [];
    const kept: Array<{ key: string; scn: number }> = [];
    for await (const [k, v] of store.rows({ gte: rowsPrefix, lt: prefixEnd(rowsPrefix) })) {
      const key = tombKeyOf(k);
      const scn = v.length === 8 ? readScn(v, 0) : 0;
      if (!stored || scn < stored.floor || scn > max || this.records.has(key)) stale.push({ type: 'del', key: k });
      else kept.push({ key, scn });
    }
    if (!stored) {
      this.tombstoneFloor = max + 1;
      this.tombstonesSinceMs = q.ctx.clock.now();
      this.#floorStored = false; // written with the next event
    } else {
      this.tombstoneFloor = stored.floor;
      this.tombstonesSinceMs = stored.sinceMs;
      this.#floorStored = true;
      kept.sort((a, b) => a.scn - b.scn);
      for (const t of kept) {
        this.#deleted.set(t.key, t.scn);
        this.#tombRows.set(t.key, t.scn);
        this.#deletedOrder.push(t);
      }
    }
    this.#capTombstones(stale);
  }

  openConsumer(req: ConsumerRequest, sink: DeliverySink): Consumer {
    if (!this.openConsumerImpl) throw new TidemarkError(Conditions.internal, 'SOW consumer not configured');
    return this.openConsumerImpl(this, req, sink);
  }

  /** Deletes every record (and logs a delete event for each, so subscribers learn of it). */
  async purge(): Promise<number> {
    const keys = [...this.records.keys()];
    return this.deleteKeys(keys);
  }

  /** Deletes records by key as `delete` events, atomically; resolves with how many. */
  deleteKeys(keys: string[]): Promise<number> {
    if (keys.length === 0) return Promise.resolve(0);
    const msgs: InboundMessage[] = keys.map((key) => {
      const bytes = encodeMessage({ message_annotations: { 'x-opt-tm-op': 'delete', 'x-opt-tm-key': key }, body: null });
      return { bytes, message: decodeMessage(bytes), receivedAt: this.queue.ctx.clock.now(), attrs: {} };
    });
    return new Promise((resolve, reject) => {
      const w = this.queue.prepareWindow(msgs);
      this.queue.ctx.committer.add(w.ops, (err) => {
        if (err) { w.failed(); reject(err); return; }
        w.committed();
        resolve(keys.length);
      });
    });
  }

  /**
   * Record expiry (semantics.md 2). A min-heap by expiry time, with lazy deletion: an entry
   * is acted on only if the key's record still has that SCN and expiry (a later write or a
   * delete makes it stale). Stale entries are dropped when they reach the top, and the heap
   * is rebuilt from the records when stale ones outnumber live ones, so memory stays
   * O(records with a TTL). A sweep costs O(e log h) for e expiring records: no scans.
   */
  readonly #heap: ExpiryEntry[] = [];
  /** Expiries logged but not yet committed (so two sweeps do not expire a key twice). */
  readonly #expiring = new Set<string>();

  /** True when the record has a TTL that has passed at `now` (queries hide it before the sweep). */
  static expiredAt(exp: number | undefined, now: number): boolean { return exp !== undefined && exp <= now; }

  #heapPush(e: ExpiryEntry): void {
    const h = this.#heap;
    h.push(e);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (h[p].exp <= h[i].exp) break;
      [h[p], h[i]] = [h[i], h[p]]; i = p;
    }
    if (h.length > 1024 && h.length > 4 * this.records.size) this.#rebuildHeap();
  }

  #heapPop(): ExpiryEntry | undefined {
    const h = this.#heap;
    if (!h.length) return undefined;
    const top = h[0];
    const last = h.pop()!;
    if (h.length) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1, r = l + 1;
        let m = i;
        if (l < h.length && h[l].exp < h[m].exp) m = l;
        if (r < h.length && h[r].exp < h[m].exp) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i], h[m]]; i = m;
      }
    }
    return top;
  }

  #rebuildHeap(): void {
    const live: ExpiryEntry[] = [];
    for (const [key, r] of this.records) if (r.exp !== undefined) live.push({ exp: r.exp, key, scn: r.scn });
    this.#heap.length = 0;
    live.sort((a, b) => a.exp - b.exp); // a sorted array is a valid min-heap
    for (const e of live) this.#heap.push(e);
  }

  /**
   * Expires every record whose TTL has passed at `now`: each is a `delete` event marked
   * `expired`, prepared and committed through the normal path (its own SCN, the log, the
   * ring, subscribers). Resolves when they are durable.
   */
  expireDue(now: number): Promise<number> {
    const due: string[] = [];
    for (;;) {
      const top = this.#heap[0];
      if (!top || top.exp > now) break;
      this.#heapPop();
      const r = this.records.get(top.key);
      if (!r || r.scn !== top.scn || r.exp !== top.exp || this.#expiring.has(top.key)) continue;
      due.push(top.key);
    }
    if (!due.length || this.queue.deleted) return Promise.resolve(0);
    const q = this.queue;
    // One event per key (an expiry is not a transaction), prepared now, while `records`
    // still says what the check above saw: nothing runs in between.
    const done = due.map((key) => new Promise<number>((resolve) => {
      const bytes = encodeMessage({ message_annotations: { 'x-opt-tm-op': 'delete', 'x-opt-tm-key': key }, body: null });
      const msg: InboundMessage = { bytes, message: decodeMessage(bytes), receivedAt: now, attrs: { sowExpire: true } };
      let w;
      try { w = q.prepareWindow([msg]); } catch (err) { log.warn('expiry failed', { queue: q.name, key, err }); resolve(0); return; }
      this.#expiring.add(key);
      q.ctx.committer.add(w.ops, (err) => {
        this.#expiring.delete(key);
        if (err) {
          w.failed();
          // The record is back: try again at the next sweep.
          const back = this.records.get(key);
          if (back?.exp !== undefined) this.#heapPush({ exp: back.exp, key, scn: back.scn });
          log.warn('expiry not stored; retried at the next sweep', { queue: q.name, key, err });
          resolve(0);
          return;
        }
        w.committed();
        resolve(1);
      });
    }));
    return Promise.all(done).then((n) => n.reduce((a, b) => a + b, 0));
  }

  stats(): QueueStats {
    return {
      // oldestScn: the oldest row still there (where a checkpoint may resume; bookmarks go by logFloor)
      depth: this.records.size, bytes: this.#bytes, oldestScn: this.oldestLogScn, consumers: this.#subscribers.size,
      sowRecords: this.records.size, historyVersions: this.historyVersions, logEvents: this.logCount,
    };
  }

  /**
   * Closes every subscriber. When the queue was deleted (Queue.markDeleted), with
   * `amqp:resource-deleted` naming it, so a consumer learns why its link went (AMQP amqp-error `resource-deleted`).
   */
  close(error?: TidemarkError): void {
    const err = error ?? (this.queue.deleted ? new TidemarkError('amqp:resource-deleted' as Condition, `queue ${this.queue.name} was deleted`) : undefined);
    for (const s of [...this.#subscribers]) s.close(err);
    for (const f of [...this.#closers]) f(err);
  }

  /**
   * Background retention: trims the log (log.retention, log.max_count) and history (window).
   * Log bounds come from the head SCN and the time index (two range deletes); the history is
   * purged by a paced sweep (#sweepHistory) that runs only when a version can be due.
   *
   * One retention step: the log trim, then a chunk of the history sweep (`full`: a whole pass
   * from the first row; `sweepRows` overrides the chunk size, for tests).
   */
  async trim(now: number, full = false, sweepRows?: number): Promise<void> {
    await this.trimLog(now);
    await this.sweepHistory(now, full, sweepRows);
  }

  /** The log part of retention (the replay extension's background task). */
  trimLog(now: number): Promise<void> {
    // Checked before queueing a step: the timer visits every SOW queue every second.
    if (!this.logBounded) return Promise.resolve();
    return this.#oneAtATime(() => this.#trimLog(now));
  }

  /** The history part of retention (the history extension's background task). */
  sweepHistory(now: number, full = false, sweepRows?: number): Promise<void> {
    if (!full && !this.#sweepWanted(now)) return Promise.resolve(); // nothing can be due: no step queued
    return this.#oneAtATime(() => this.#sweepDue(now, full, sweepRows));
  }

  /** Whether the background steps have anything to do at `now` (cheap; the timers ask every SOW queue every second). */
  expiryDue(now: number): boolean { const top = this.#heap[0]; return top !== undefined && top.exp <= now; }
  get logBounded(): boolean { return this.settings.logMaxCount !== undefined || this.settings.logRetention !== undefined; }
  historyDue(now: number): boolean { return this.#sweepWanted(now); }

  #sweepWanted(now: number): boolean {
    return this.hasHistory && this.#earliestSupersede < now - this.settings.historyWindow!;
  }

  #trimming?: Promise<void>;

  /** One retention step at a time per queue (the timers do not wait for a slow one). */
  async #oneAtATime(step: () => Promise<void>): Promise<void> {
    while (this.#trimming) await this.#trimming;
    this.#trimming = step();
    try { await this.#trimming; } finally { this.#trimming = undefined; }
  }

  async #trimLog(now: number): Promise<void> {
    const q = this.queue;
    const store = q.ctx.store;
    const s = this.settings;
    // Read before the index queries: every event up to here has its index row visible to them.
    const committed = q.committedScn;
    if (s.logMaxCount !== undefined || s.logRetention !== undefined) {
      let cutoff = 0; // delete log events with scn < cutoff
      if (s.logMaxCount !== undefined) cutoff = Math.max(cutoff, q.committedScn - s.logMaxCount + 1);
      if (s.logRetention !== undefined) {
        // Every event before the first indexed one at or after the horizon is older than it.
        const tp = queuePrefix(TIME, q.id);
        const horizon = now - s.logRetention;
        const newer = await store.all({ gte: timeKey(q.id, horizon, 0), lt: prefixEnd(tp), limit: 1, keysOnly: true });
        if (newer.length) cutoff = Math.max(cutoff, readScn(newer[0][0], 13));
        else {
          const older = await store.all({ gte: tp, lt: timeKey(q.id, horizon, 0), limit: 1, keysOnly: true });
          if (older.length) cutoff = Math.max(cutoff, committed + 1);
        }
      }
      if (cutoff > this.oldestLogScn && this.oldestLogScn > 0) {
        // Old rows are immutable, so they can go outside the commit order: two range deletes.
        const last = await store.get(scnKey(CoreTables.log, q.id, cutoff));
        const cutTs = last ? decodeEvent(last).meta.ts : now;
        // The head row first (as plain queues keep it): with every log row gone and no record
        // left, recovery would find no SCN and start again at 1. LevelDB applies writes in
        // order, so no crash keeps the delete without it. Memory moves only once it is written:
        // a failed write (it throws) leaves the floor where the rows are.
        await store.batch([{ type: 'put', key: queuePrefix(CoreTables.head, q.id), value: scnBytes(committed + 1) }], false);
        // The rows the clear below deletes, counted: SCNs have gaps (a failed batch's), so
        // cutoff - oldestLogScn overstated them (logEvents went to 0 with rows stored). Counted
        // from the table's start, as the clear goes, so rows a failed clear left are counted
        // when the next one deletes them; recovery counts every row (countRange), which agrees.
        const lp = queuePrefix(CoreTables.log, q.id);
        const cut = await countRange(store, lp, scnKey(CoreTables.log, q.id, cutoff));
        // The new floor is published before a row goes: a reader that attaches or reads the log
        // meanwhile has fallen off (it used to read on from the first row left, a silent gap).
        this.oldestLogScn = cutoff;
        const i = this.ring.findIndex((e) => e.scn >= cutoff);
        this.#trimRing(i === -1 ? this.ring.length : i);
        this.ringFloor = Math.max(this.ringFloor, cutoff - 1);
        // The newest event cut keeps an index row: a time after it and before the oldest event
        // left resolves to it (wire.md 5), whose successors are all retained; without the row
        // such a time found no row at or before it and was taken as older than the log.
        const newestCut = await store.get(scnKey(CoreTables.log, q.id, cutoff - 1));
        const newestCutTs = newestCut ? eventTs(newestCut) : undefined;
        await store.clearRange(lp, scnKey(CoreTables.log, q.id, cutoff));
        this.logCount = Math.max(0, this.logCount - cut);
        // The time index also answers historical queries at a time (bookmark.ts scnAtTime), which
        // reach back as far as the history window, log or no log: with history, the index keeps
        // the rows from the last one at or before the window's start.
        let indexEnd: Buffer | undefined = newestCutTs !== undefined ? timeKey(q.id, newestCutTs, cutoff - 1) : timeKey(q.id, cutTs, cutoff);
        if (this.hasHistory) {
          const horizon = now - s.historyWindow!;
          if (horizon < cutTs) {
            const atOrBefore = await store.all({ gte: queuePrefix(TIME, q.id), lt: timeKey(q.id, horizon + 1, 0), reverse: true, limit: 1, keysOnly: true });
            indexEnd = atOrBefore.length ? atOrBefore[0][0] : undefined;
          }
        }
        if (indexEnd) await store.clearRange(queuePrefix(TIME, q.id), indexEnd);
        // The oldest retained event gets an index row of its own (its bucket's row may be gone),
        // and so does the newest event cut (above).
        const rows: BatchOp[] = [];
        if (newestCutTs !== undefined) rows.push({ type: 'put', key: timeKey(q.id, newestCutTs, cutoff - 1), value: EMPTY });
        if (last) rows.push({ type: 'put', key: timeKey(q.id, cutTs, cutoff), value: EMPTY });
        if (rows.length) await store.batch(rows, false);
      }
    }
  }

  async #sweepDue(now: number, full: boolean, sweepRows: number | undefined): Promise<void> {
    const s = this.settings;
    if (full) this.#sweepAt = undefined; // a full pass starts at the first row
    if (this.hasHistory && (full || this.#sweepWanted(now))) await this.#sweepHistory(now - s.historyWindow!, full ? Infinity : sweepRows ?? Math.max(SWEEP_MIN_ROWS, Math.ceil(this.historyVersions / SWEEP_PASS_TICKS)));
  }

  /**
   * Earliest time a retained version stopped being current (superseded, or a tombstone
   * written): while the horizon has not passed it, no version can be purged and the
   * background sweep is skipped. Infinity = none (a new queue); -Infinity = not known yet
   * (recovered with history rows: one pass finds out).
   */
  #earliestSupersede = Infinity;
  /** The same, for events committed since the current sweep pass started. */
  #supersedeSincePass = Infinity;

  #noteSupersede(ts: number): void {
    if (ts < this.#earliestSupersede) this.#earliestSupersede = ts;
    if (ts < this.#supersedeSincePass) this.#supersedeSincePass = ts;
  }

  /** Full passes of the history sweep completed (tests, statistics). */
  sweepPasses = 0;
  /** Earliest due time of the versions the current pass kept. */
  #passMin = Infinity;
  /** Where the history sweep resumes: after this hist row key, with that row still undecided. */
  #sweepAt?: SweptRow;
  /** The horizon of the pass in progress: every step of a pass judges by the one it started with. */
  #passHorizon = -Infinity;

  /**
   * The history window purge, without per-version state in memory (memory stays flat however
   * many versions are kept): a sweep over the hist table in (key, SCN) order, `maxRows` rows
   * per call, resuming where the last call stopped. A version stopped being current when the
   * next version of its key was written, so it goes once that row's time is before
   * `horizon`. A tombstone that is the last row of its key goes once it is itself older than
   * the horizon, unless the key was re-created since the sweep's read view (the row that
   * supersedes it is then seen by a later pass). The current version never goes. The
   * background task calls this every second with enough rows for a full pass in about a
   * minute; runRetention does a full pass at once.
   *
   * A pass keeps the horizon it started with, and one whose deletes fail starts again: a key's
   * versions are then always purged oldest first, and its last tombstone only with every
   * version before it. (A step that judged a version by one horizon and the tombstone after it
   * by a later one deleted the tombstone and kept the version: the deleted key came back as
   * that version at a restart, and in current snapshots.)
   */
  async #sweepHistory(newHorizon: number, maxRows: number): Promise<void> {
    const q = this.queue;
    const hp = queuePrefix(HIST, q.id);
    const from = this.#sweepAt;
    if (!from) { this.#passMin = Infinity; this.#supersedeSincePass = Infinity; this.#passHorizon = newHorizon; }
    const horizon = this.#passHorizon;
    const ops: BatchOp[] = [];
    const tombGone = (row: SweptRow) => {
      if (!row.tomb) return false;
      if (row.ts < horizon) {
        const cur = this.records.get(parseHistKey(row.k).key);
        if (!(cur && cur.scn > parseHistKey(row.k).scn)) return true;
      }
      if (row.ts < this.#passMin) this.#passMin = row.ts; // kept: due later
      return false;
    };
    let prev = from;
    let seen = 0;
    let finished = false;
    // A background pass over every version: its blocks stay out of the block cache, which
    // keeps the blocks live traffic and queries use.
    const cursor = q.ctx.store.cursor({ ...(from ? { gt: from.k } : { gte: hp }), lt: prefixEnd(hp), fillCache: false });
    try {
      for (;;) {
        if (seen >= maxRows) break;
        const rows = await cursor.next(Math.min(1000, maxRows - seen));
        if (rows.length === 0) { finished = true; break; }
        for (const [k, v] of rows) {
          seen++;
          const row: SweptRow = { k, ts: eventTs(v), tomb: eventIsDelete(v) };
          if (prev) {
            if (sameHistKey(prev.k, k)) {
              if (row.ts < horizon) ops.push({ type: 'del', key: prev.k });
              else if (row.ts < this.#passMin) this.#passMin = row.ts; // kept: due later
            }
            else if (tombGone(prev)) ops.push({ type: 'del', key: prev.k });
          }
          prev = row;
        }
      }
    } finally { await cursor.close(); }
    if (finished) {
      if (prev && tombGone(prev)) ops.push({ type: 'del', key: prev.k });
      this.#sweepAt = undefined;
      this.#earliestSupersede = Math.min(this.#passMin, this.#supersedeSincePass);
    } else this.#sweepAt = prev;
    this.sweepPasses += finished ? 1 : 0;
    if (ops.length) {
      const failed = await new Promise<Error | undefined>((res) => q.ctx.committer.add(ops, (err) => res(err ?? undefined)));
      // The rows are still there: a new pass finds them again (and is wanted, whatever this pass noted).
      if (failed) { this.#sweepAt = undefined; this.#earliestSupersede = -Infinity; return; }
      this.historyVersions = Math.max(0, this.historyVersions - ops.length);
      for (const op of ops) {
        const { key, scn } = parseHistKey(op.key);
        this.versions.remove(key, scn);
        if (this.#tombs.get(key)?.scn === scn) this.#tombs.delete(key);
      }
    }
  }
}

/** A log row as subscribers see it. */
/**
 * A logged event as a SowEvent. `copy`: keep the message in a buffer of its own (events that
 * stay in memory, like the ring) rather than a view into the row read from LevelDB (events
 * sent and dropped, like a replay's).
 */
export function eventFromLog(scn: number, meta: EventMeta, message: Buffer, copy = true): SowEvent {
  const ev: SowEvent = { scn, ts: meta.ts, op: (meta.op ?? 'publish') as SowOp, key: meta.key ?? '', bytes: copy ? Buffer.from(message) : message, w: meta.w };
  if ((meta as SowMeta).expired) ev.expired = true;
  if (meta.exp !== undefined) ev.exp = meta.exp;
  return ev;
}

/** The `hist` rows of the given (key, SCN) versions, a chunk of point reads at a time (recovery: read once, past the block cache). */
async function* readVersions(store: Queue['ctx']['store'], qid: number, versions: Array<[string, number]>): AsyncGenerator<[string, number, Buffer | undefined]> {
  for (let i = 0; i < versions.length; i += 1000) {
    const chunk = versions.slice(i, i + 1000);
    const values = await store.getMany(chunk.map(([key, scn]) => histKey(qid, key, scn)), undefined, false);
    for (let j = 0; j < chunk.length; j++) yield [chunk[j][0], chunk[j][1], values[j]];
  }
}

/** Each key's newest `hist` version, from the keys alone (a queue started without the history extension). */
async function newestHistVersions(store: Queue['ctx']['store'], qid: number): Promise<Array<[string, number]>> {
  const hp = queuePrefix(HIST, qid);
  const newest = new Map<string, number>();
  const c = store.cursor({ gte: hp, lt: prefixEnd(hp), keysOnly: true, fillCache: false });
  try {
    for (;;) {
      const rows = await c.next(1000);
      if (rows.length === 0) break;
      for (const [k] of rows) { const { key, scn } = parseHistKey(k); if (scn > (newest.get(key) ?? -1)) newest.set(key, scn); }
    }
  } finally { await c.close(); }
  return [...newest];
}

/** The rows from `prefix` to `end` (default: all of the prefix's), keys only. */
async function countRange(store: Queue['ctx']['store'], prefix: Buffer, end = prefixEnd(prefix)): Promise<number> {
  const c = store.cursor({ gte: prefix, lt: end, keysOnly: true });
  let n = 0;
  try { for (;;) { const rows = await c.next(1000); if (!rows.length) break; n += rows.length; } } finally { await c.close(); }
  return n;
}

