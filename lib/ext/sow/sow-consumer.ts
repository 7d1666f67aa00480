/**
 * A receiver on a SOW queue: an optional snapshot (current, or historical at a bookmark),
 * then events by position. Everything is pulled under AMQP credit: snapshots stream from
 * the records in memory and a LevelDB snapshot (current-snapshot.ts, historical-scan.ts),
 * events from the ring of recent events or from the log, so a slow consumer holds a cursor
 * (a key list and a position), not a buffer of messages (architecture invariants 3 and 5).
 *
 * sow_and_subscribe at one SCN S (invariant 3): at a quiescent point of the committer the
 * store holds exactly the events <= S; the snapshot is read there and the event position
 * starts at S, so every event > S comes after group_end and none <= S is delivered live.
 */
import type { Consumer, DeliverySink } from '../../core/queue/delivery.js';
import type { ConsumerRequest } from '../../core/extensions.js';
import { CoreTables, scnKey, readScn } from '../../core/storage/keyspace.js';
import { decodeEvent } from '../../core/engine/event-record.js';
import { TidemarkError, Conditions } from '../../core/errors.js';
import { MessageEnv } from '../../core/queue/filter-env.js';
import { rewriteMessage, rewriteMessageSplit, indexSections, encodeMessage, decodeMessage, readHeader, type EncodedValue, type HeaderFields } from '../../codec/message-bytes.js';
import { typed } from '../../codec/amqp.js';
import { jsonText } from '../../codec/json-body.js';
import { compileOrderBy } from '../../filter/index.js';
import { MarkerSink } from './marker-sink.js';
import { encodeCheckpoint, checkpointMap, snapshotCheckpoint, snapshotCheckpointEncoder, type Checkpoint, type WindowTracker } from '../checkpoints/checkpoint.js';
import { HistoricalScan } from './historical-scan.js';
import { CurrentSnapshot } from './current-snapshot.js';
import { SowStructure, eventFromLog, type SowEvent } from './sow-structure.js';
import { showKey } from './sow-key.js';
import { PageIndex, type PageEntry } from './paging.js';
import { SLICE_MS, TopN, sortInSlices, sortValues, sortableCompare, type Sortable } from './sorted-answer.js';
import type { Command, CommandOptions } from './options.js';
import { logger } from '../../core/log.js';
import { Fifo } from '../../core/fifo.js';

const log = logger('sow');

export interface SowPlan {
  command: Command | 'default';
  options: CommandOptions;
  /** Historical snapshot at this SCN (bookmark resolved). */
  historicalScn?: number;
  /** Event position to start after (replay); undefined = live end. */
  replayAfter?: number;
  /** Send `completed` once the replay reaches the live end. */
  completedMarker: boolean;
  /** Markers and annotations on (a tidemark: filter was used). */
  annotate: boolean;
  /** Consumer checkpoints: every message carries x-opt-tm-checkpoint (wire.md 6). */
  checkpoint?: CheckpointPlan;
  /** Taking over from another link (`replace`): the records its client holds, key -> SCN of the version it holds. */
  replaceFrom?: Map<string, number>;
}

export interface CheckpointPlan {
  tracker: WindowTracker;
  /** Events to pass without delivery (a mid-window resume). */
  skip: number;
  /** Bootstrapping: snapshot (unless `target` is known), then catch-up to the target, then online. */
  bootstrap?: { start?: number; resumeAfterKey?: string; target?: number; position?: number; since?: number };
}

/**
 * A message decided but not sent yet (in the outbox, held by conflation, or an oof held for
 * group_end). `key` is the record it changes for the client and `prev` the version the client
 * holds until it is sent (undefined: none), so a `replace` hands over what the client really has.
 */
interface Pending { bytes: Buffer; ann: Record<string, unknown>; ev?: SowEvent; key?: string; prev?: number }

/** A message held back by conflation: the latest for its key; `held`, the checkpoint before the first event it stands for. */
interface Conflated extends Pending { ev: SowEvent; since: number; held?: Checkpoint }

/** A record of a sorted answer, with its page index entry on a paginated link. */
interface SortedRow extends Sortable<Row> { entry?: PageEntry }

interface Row {
  key: string; scn: number; ts: number; bytes: Buffer;
  /** expiry (ms) of a record with a TTL */ exp?: number;
  /** an incremental bootstrap's tombstone: sent as a delete */ tomb?: true;
  /** a replace's lookup of a record its client holds (#fetchHeld) */ lookup?: true;
}
/** The body of a tombstone: the deleted record's state is not kept. */
const TOMBSTONE_BYTES = encodeMessage({ body: null });

/** Snapshot rows read per fetch; fetches follow each other while at most LOW_WATER rows wait to be sent. */
const SNAPSHOT_CHUNK = 512;
const SNAPSHOT_LOW_WATER = 1024;

/** The next log read starts when this many fetched events are left to send. */
const LOG_LOW_WATER = 500;

/** Log events read per replay fetch (bounded memory per link: ~LOG_CHUNK messages). */
const LOG_CHUNK = 1000;

const EVENT_ENV = Symbol('env');

export class SowConsumer implements Consumer {
  readonly #s: SowStructure;
  readonly #req: ConsumerRequest;
  readonly #sink: MarkerSink;
  readonly #plan: SowPlan;
  #phase: 'starting' | 'snapshot' | 'events' | 'done' = 'starting';
  /** Snapshot rows ready to send. */
  #rows = new Fifo<Row>();
  #rowsDone = false;
  /** The current records at the snapshot's SCN (current-snapshot.ts). */
  #snapshot?: CurrentSnapshot;
  #skipped = 0;
  #sent = 0;
  /** Last event SCN delivered or passed. */
  #position = 0;
  #replayTarget = 0;
  #completedSent = false;
  /** Log rows fetched while behind the ring. */
  #logRows = new Fifo<SowEvent>();
  /** Bumped when #logRows is reset, so a read started before cannot refill it. */
  #logGeneration = 0;
  #fetching = false;
  #pumping = false;
  #closed = false;
  /** The records sent (or, after a `replace`, kept) on this link: key -> SCN of the version sent. */
  readonly #delivered = new Map<string, number>();
  readonly #track: boolean;
  /**
   * A `sow` query's deliveries, in order: only a `replace` taking the link over reads them, so
   * they are listed (cheap) rather than hashed into #delivered (a sixth of a snapshot's cost).
   */
  readonly #queriedKeys: string[] = [];
  readonly #queriedScns: number[] = [];
  #unsubscribe?: () => void;
  /** Closes the link with its queue, whatever phase it is in (registered when it opens). */
  #offClose?: () => void;
  /** Conflation: latest pending message per conflation key, flushed once per interval. */
  readonly #conflated = new Map<string, Conflated>();
  /**
   * A checkpoint link with conflation: each held message's key, in the order they began to be
   * held (entries whose key was sent since are dropped when they reach the front).
   */
  readonly #heldSince = new Fifo<{ key: string; since: number }>();
  /** The checkpoint before the event being handled (conflation on a checkpoint link). */
  #beforeEvent?: Checkpoint;
  #conflationTimer?: NodeJS.Timeout;
  /** Replace: keys of the replaced link's deliveries seen in the new snapshot. */
  readonly #replaceSeen = new Set<string>();
  /**
   * Replace: the oof `match` for each delivered record that left focus, held until the
   * snapshot's `group_end` (semantics.md 5: between the markers only records are sent).
   */
  readonly #replaceLeft = new Fifo<Pending>();
  #draining = false;
  /** Paginated subscription (top_n + skip_n): every matching record in page order; #delivered is the page. */
  #paging?: PageIndex;
  /** Messages one event produced beyond the first, sent as credit allows before the next event. */
  readonly #outbox = new Fifo<Pending>();
  /** Broker time the snapshot is taken at: records whose TTL passed by then are not in it. */
  #snapAt = 0;

  constructor(structure: SowStructure, req: ConsumerRequest, sink: DeliverySink, plan: SowPlan) {
    this.#s = structure;
    this.#req = req;
    this.#sink = new MarkerSink(sink);
    this.#plan = plan;
    this.#track = plan.command !== 'subscribe' && plan.command !== 'sow' && !plan.checkpoint;
    const o = plan.options;
    if ((plan.command === 'sow_and_subscribe' || plan.command === 'default') && !plan.checkpoint && o.top_n !== undefined && o.skip_n !== undefined) {
      this.#paging = new PageIndex(o.order_by ? compileOrderBy(o.order_by) : undefined, o.skip_n, o.top_n);
    }
    this.#offClose = structure.onClose((e) => this.#sink.close(e));
    this.#start();
  }

  #queryId(): string | undefined { return this.#plan.options.query_id; }

  /**
   * The records this link's client holds, key -> SCN of the version it holds, for a `replace`
   * taking the link over: what was sent, not what was decided (semantics.md 5: nothing lost).
   */
  handOver(): Map<string, number> {
    // A replace of its own not finished yet: the records of the link it replaced that its
    // snapshot has not settled are still the client's as that link left them.
    const held = new Map(this.#plan.replaceFrom ?? []);
    for (const [k, scn] of this.#delivered) held.set(k, scn);
    for (let i = 0; i < this.#queriedKeys.length; i++) held.set(this.#queriedKeys[i], this.#queriedScns[i]);
    // Messages not sent yet: per key, the client holds the version before the first of them
    // (conflation holds older decisions than the outbox: the outbox empties into it under credit).
    const undone = new Set<string>();
    const undo = (m: Pending) => {
      if (m.key === undefined || undone.has(m.key)) return;
      undone.add(m.key);
      if (m.prev === undefined) held.delete(m.key); else held.set(m.key, m.prev);
    };
    for (const m of this.#conflated.values()) undo(m);
    for (let i = 0; i < this.#outbox.length; i++) undo(this.#outbox.at(i)!);
    for (let i = 0; i < this.#replaceLeft.length; i++) undo(this.#replaceLeft.at(i)!);
    return held;
  }

  #marker(cmd: string, scn?: number, cp?: Checkpoint, position?: number): void {
    if (!this.#plan.annotate) {
      // No markers on this link, but a durable subscription still moves to the snapshot SCN.
      if (position !== undefined) (this.#sink.inner as { advanceTo?: (p: number) => void }).advanceTo?.(position);
      return;
    }
    const ann: Record<string, unknown> = { 'x-opt-tm-cmd': typed.symbol(cmd) };
    if (cp) ann['x-opt-tm-checkpoint'] = checkpointMap(cp);
    if (scn !== undefined) ann['x-opt-tm-scn'] = typed.ulong(scn);
    if (this.#queryId() && cmd !== 'completed') ann['x-opt-tm-query-id'] = this.#queryId();
    this.#sink.marker(encodeMessage({ message_annotations: ann, body: null }), position);
  }

  #start(): void {
    const p = this.#plan;
    const q = this.#s.queue;
    const boot = p.checkpoint?.bootstrap;
    if (boot && boot.target !== undefined) {
      // Resuming a catch-up: events after the last one applied, up to the target, then online.
      this.#position = boot.position ?? boot.start!;
      this.#replayTarget = boot.target;
      this.#enterEvents();
      return;
    }
    if (boot) { this.#startBootstrapSnapshot(boot); return; }
    if (p.command === 'subscribe') {
      this.#position = p.replayAfter ?? q.committedScn;
      this.#replayTarget = q.committedScn;
      this.#enterEvents();
      return;
    }
    this.#marker('group_begin');
    if (p.historicalScn !== undefined) {
      const S = p.historicalScn;
      this.#position = S;
      this.#replayTarget = q.committedScn;
      // (The phase moves to 'snapshot' once the scan is open, #historicalFrom: a pump before it
      // found a top_n 0 page full, sent group_end with no SCN set yet (0) and went on to the
      // events, and the scan opened later was never read nor closed until the link ended.)
      this.#historical(S).catch((err) => this.#fail(err));
      return;
    }
    // Consistent snapshot at the last committed SCN.
    q.ctx.committer.atQuiescentPoint(() => {
      if (this.#closed) return;
      const S = q.committedScn;
      this.#position = S;
      this.#replayTarget = S;
      this.#groupEndScn = S;
      this.#snapAt = q.ctx.clock.now();
      this.#snapshot = new CurrentSnapshot(this.#s, q.ctx.store, S);
      this.#phase = 'snapshot';
      if (this.#plan.options.order_by || this.#paging) this.#loadAllSorted().catch((err) => this.#fail(err));
      else this.pump();
    });
  }
  #groupEndScn = 0;

  /** Bootstrap SNAPSHOT: current records in key order (after the resume key), at a quiescent point. */
  #startBootstrapSnapshot(boot: NonNullable<CheckpointPlan['bootstrap']>): void {
    const q = this.#s.queue;
    this.#snapshotCheckpointBytes = undefined; // a restarted bootstrap has a new start SCN
    q.ctx.committer.atQuiescentPoint(() => {
      if (this.#closed) return;
      const S = q.committedScn;
      this.#snapAt = q.ctx.clock.now();
      const t = this.#plan.checkpoint!.tracker;
      if (boot.start === undefined) {
        boot.start = S;
        // A fresh bootstrap: the consumer's position is the snapshot's SCN once caught up.
        t.prevScn = t.windowScn = S; t.windowOffset = -1;
      }
      t.snapshotAt(this.#snapAt);
      // Incremental (semantics.md 8): tombstones for the keys deleted in [since, start], merged
      // into the records in key order. Gone meanwhile (a restart, the cap): a full one instead.
      this.#tombs = undefined;
      if (boot.since !== undefined && boot.since > 0) {
        // A filtered link cannot take the changes only: a record that changed since and no
        // longer matches would stay with the consumer. It gets the whole (filtered) state.
        const tombs = this.#req.predicates.length ? undefined : this.#s.tombstonesSince(boot.since, boot.start, boot.resumeAfterKey);
        if (tombs) this.#tombs = new Fifo(tombs.map((t) => ({ ...t, b: Buffer.from(t.key, 'utf8') })));
        else { boot.since = undefined; boot.resumeAfterKey = undefined; }
      }
      this.#marker('group_begin', undefined, this.#snapshotCheckpoint(boot.resumeAfterKey));
      this.#position = boot.start;
      this.#groupEndScn = S;
      this.#snapshot = new CurrentSnapshot(this.#s, q.ctx.store, S, boot.resumeAfterKey);
      this.#phase = 'snapshot';
      this.pump();
    });
  }

  #snapshotCheckpoint(lastKey: string | undefined): Checkpoint {
    const cp = this.#plan.checkpoint!;
    return snapshotCheckpoint(cp.bootstrap!.start!, lastKey, cp.bootstrap!.since ?? 0, cp.tracker.tsNsecs);
  }
  /** An incremental bootstrap's tombstones still to merge into the snapshot, in key order. */
  #tombs?: Fifo<{ key: string; scn: number; b: Buffer }>;
  /** Moves the tombstones before `key` (all of them when undefined) into the rows. */
  #mergeTombs(key: string | undefined): void {
    const t = this.#tombs;
    if (!t) return;
    const kb = key === undefined ? undefined : Buffer.from(key, 'utf8');
    while (t.length && (!kb || Buffer.compare(t.at(0)!.b, kb) < 0)) {
      const { key: k, scn } = t.shift()!;
      this.#rows.push({ key: k, scn, ts: this.#snapAt, bytes: TOMBSTONE_BYTES, tomb: true });
    }
  }

  /** Encodes the checkpoint of each bootstrap snapshot record (set with the snapshot's start). */
  #snapshotCheckpointBytes?: (lastKey: string) => EncodedValue;
  /** The checkpoint after the bootstrap snapshot's row `key` (a record or a tombstone). */
  #snapshotRowCheckpoint(key: string): EncodedValue {
    const cp = this.#plan.checkpoint!;
    return (this.#snapshotCheckpointBytes ??= snapshotCheckpointEncoder(cp.bootstrap!.start!, cp.bootstrap!.since ?? 0, cp.tracker.tsNsecs))(key);
  }

  /**
   * The checkpoint of everything passed so far; with conflation, the one before the oldest
   * event whose message is still held back.
   */
  #checkpointNow(): Checkpoint {
    const held = this.#heldSince;
    while (held.length && this.#conflated.get(held.at(0)!.key)?.since !== held.at(0)!.since) held.shift();
    return held.length ? this.#conflated.get(held.at(0)!.key)!.held! : this.#passedCheckpoint();
  }

  /** The checkpoint of every event passed so far. */
  #passedCheckpoint(): Checkpoint {
    const cp = this.#plan.checkpoint!;
    const t = cp.tracker;
    const boot = cp.bootstrap;
    if (boot && boot.target !== undefined && this.#position < boot.target) {
      return {
        consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: t.windowScn, prevScn: t.prevScn, windowOffset: t.windowOffset, tsNsecs: t.tsNsecs,
        bootstrap_since_scn: boot.since ?? 0, bootstrap_start_scn: boot.start, bootstrap_target_scn: boot.target, catchup_offset: this.#position,
      };
    }
    return t.online();
  }

  /** The checkpoint after event `ev` was consumed (tracker already advanced). */
  #eventCheckpoint(ev: SowEvent): Checkpoint {
    const cp = this.#plan.checkpoint!;
    const t = cp.tracker;
    const boot = cp.bootstrap;
    if (boot && boot.target !== undefined && ev.scn < boot.target) {
      // (A literal, not a spread of online(): this runs for every catch-up event.)
      return {
        consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: t.windowScn, prevScn: t.prevScn, windowOffset: t.windowOffset, tsNsecs: t.tsNsecs,
        bootstrap_since_scn: boot.since ?? 0, bootstrap_start_scn: boot.start, bootstrap_target_scn: boot.target, catchup_offset: ev.scn,
      };
    }
    return t.online();
  }

  #matches(env: MessageEnv): boolean {
    for (const pr of this.#req.predicates) if (!pr(env)) return false;
    return true;
  }

  /**
   * Replace (semantics.md 5), a row of a streamed snapshot: a record new to the client goes by
   * the query's rules (#admitRow). One the client holds takes its place in the answer as any
   * matching record does (skip_n, top_n) but is sent only if it changed since the version the
   * client has, on the page or past it (the client must not keep an older state); one that no
   * longer matches gets an oof `match` after group_end.
   */
  #replaceRow(r: Row): void {
    // (a lookup can start while the snapshot's last row for that key is shifted but not yet settled)
    if (r.lookup && this.#replaceSeen.has(r.key)) return;
    const held = this.#plan.replaceFrom!.get(r.key);
    if (held === undefined) {
      if (this.#admitRow(r)) { this.#sent++; this.#sendRow(r); }
      return;
    }
    this.#replaceSeen.add(r.key);
    if (this.#req.predicates.length && !this.#matches(new MessageEnv(decodeMessage(r.bytes)))) {
      if (this.#plan.options.oof) this.#replaceLeft.push({ bytes: r.bytes, ann: this.#annotations('oof', r.scn, r.key, r.ts, 'match'), key: r.key, prev: held });
      return;
    }
    const skip = this.#plan.options.skip_n;
    if (skip && this.#skipped < skip) this.#skipped++; else this.#sent++;
    if (r.scn <= held) { this.#delivered.set(r.key, held); return; }
    this.#sendRow(r);
  }

  /** A snapshot record goes out (`sow`). */
  #sendRow(r: Row): void {
    if (this.#track) this.#delivered.set(r.key, r.scn);
    else if (this.#plan.command === 'sow') { this.#queriedKeys.push(r.key); this.#queriedScns.push(r.scn); }
    const ann = this.#annotations('sow', r.scn, r.key, r.ts);
    if (this.#plan.checkpoint?.bootstrap) ann['x-opt-tm-checkpoint'] = this.#snapshotRowCheckpoint(r.key);
    this.#send(r.bytes, ann, undefined, r.exp);
  }

  /**
   * After a replace snapshot's `group_end` (queued behind it, so credit applies): the oof
   * `match` of each delivered record that left focus, then a `delete` (oof `deleted`) for
   * each one that is gone, deleted meanwhile.
   */
  #replaceAfterSnapshot(): void {
    const rf = this.#plan.replaceFrom;
    if (!rf) return;
    while (this.#replaceLeft.length) this.#outbox.push(this.#replaceLeft.shift()!);
    for (const [key, held] of rf) {
      if (this.#replaceSeen.has(key)) continue;
      const empty = encodeMessage({ body: null });
      this.#outbox.push({ bytes: empty, ann: this.#annotations(this.#plan.options.oof ? 'oof' : 'delete', this.#groupEndScn, key, this.#s.queue.ctx.clock.now(), this.#plan.options.oof ? 'deleted' : undefined), key, prev: held });
    }
    this.#plan.replaceFrom = undefined;
  }

  /** Applies filter, skip_n and top_n to a snapshot row; true when it is to be sent. */
  #admitRow(r: Row): boolean {
    const o = this.#plan.options;
    if (o.top_n !== undefined && this.#sent >= o.top_n) return false; // (the page is full: no decode)
    if (this.#req.predicates.length && !this.#matches(new MessageEnv(decodeMessage(r.bytes)))) return false;
    if (o.skip_n && this.#skipped < o.skip_n) { this.#skipped++; return false; }
    return true;
  }

  /** Reads the next snapshot chunk in the background; a failed read ends the link (never an unhandled rejection). */
  #fetchSnapshot(): void {
    (this.#histStream ? this.#fetchHistory() : this.#fetchSnapshotChunk()).catch((err) => this.#fail(err));
  }

  async #fetchSnapshotChunk(): Promise<void> {
    if (this.#fetching || this.#rowsDone || !this.#snapshot) return;
    if (this.#plan.replaceFrom && this.#pageFilled()) return this.#fetchHeld();
    this.#fetching = true;
    try {
      const batch = await this.#snapshot.next(SNAPSHOT_CHUNK);
      await this.#yieldIfDue();
      // (the last tombstones go in before the snapshot is marked done: a pump during the release must not end it without them)
      if (batch.length === 0) { this.#mergeTombs(undefined); this.#rowsDone = true; await this.#releaseSnapshot(); }
      // A bootstrap snapshot resumed on a later link reads today's records: those changed after
      // the bootstrap's start SCN are left to catch-up (semantics.md 8), which replays them.
      const boot = this.#plan.checkpoint?.bootstrap;
      const start = boot?.start, since = boot?.since ?? 0;
      for (const r of batch) {
        if (SowStructure.expiredAt(r.exp, this.#snapAt)) continue;
        if (start !== undefined && r.scn > start) continue;
        // An incremental bootstrap sends what changed from `since` on: the consumer has the rest.
        if (r.scn < since) continue;
        this.#mergeTombs(r.key);
        this.#rows.push(r);
      }
    } finally { this.#fetching = false; }
    this.pump();
    // Keep reading while the link has fewer than the low-water mark buffered, not only when a
    // send notices: LevelDB then works on the next chunk while this one is sent.
    if (this.#rows.length <= SNAPSHOT_LOW_WATER && !this.#closed && !this.#rowsDone && !this.#pageFull()) this.#fetchSnapshot();
  }

  /** Replace: the keys of the records the client holds, for #fetchHeld. */
  #heldKeys?: Iterator<string>;

  /**
   * Replace with `top_n`, its page complete: the records the client holds that the snapshot did
   * not reach are looked up at S (rather than the rest of the snapshot walked) and settled as
   * any held row (#replaceRow); those with no record at S stay unseen (deleted, #replaceAfterSnapshot).
   */
  async #fetchHeld(): Promise<void> {
    if (this.#fetching || this.#rowsDone || !this.#snapshot || this.#rows.length) return;
    this.#fetching = true;
    try {
      const it = (this.#heldKeys ??= this.#plan.replaceFrom!.keys());
      const keys: string[] = [];
      for (let n = it.next(); !n.done; n = keys.length < SNAPSHOT_CHUNK ? it.next() : { done: true, value: undefined }) {
        if (!this.#replaceSeen.has(n.value)) keys.push(n.value);
      }
      if (!keys.length) { this.#rowsDone = true; await this.#releaseSnapshot(); }
      else {
        const rows = await this.#snapshot.rowsOf(keys);
        // These rows take no credit: nothing else gives the event loop to other clients between chunks.
        await new Promise<void>((resolve) => setImmediate(resolve));
        for (const r of rows) if (!SowStructure.expiredAt(r.exp, this.#snapAt)) this.#rows.push({ ...r, lookup: true });
      }
    } finally { this.#fetching = false; }
    this.pump();
  }

  async #releaseSnapshot(): Promise<void> {
    const c = this.#snapshot ?? this.#histStream;
    this.#snapshot = undefined; this.#histStream = undefined;
    try { await c?.close(); } catch { /* closed */ }
  }

  /** order_by (and a paginated subscription) needs every matching record before the first is sent. */
  async #loadAllSorted(): Promise<void> {
    // The cursor is this method's until the rows are loaded: credit arriving meanwhile must
    // not start a streamed fetch on it (a second next() on a busy LevelDB iterator).
    this.#fetching = true;
    try {
      await this.#loadSorted(async () => {
        const batch = await this.#snapshot!.next(1000);
        if (batch.length) return batch;
        await this.#releaseSnapshot(); // read whole: the LevelDB snapshot is not held while sorting
        return undefined;
      });
    } finally { this.#fetching = false; await this.#releaseSnapshot(); }
    this.pump();
  }

  /**
   * A sorted answer (current or historical): every matching record at S from `read` (undefined
   * once done), sorted, then the page [skip_n, skip_n + top_n) as the rows to send. Sort values
   * are read once per record; with top_n (not paginated) only the first skip_n + top_n are
   * kept (a bounded heap); the reading and the sort give the event loop to other clients every
   * few ms (sorted-answer.ts).
   * Replace: every record the client holds is settled here. One that no longer matches gets an
   * oof `match`; on the page, or (not paginated) past it, it is sent only if it changed since
   * the version the client has; off a paginated link's page it leaves focus (#loadPaging).
   */
  async #loadSorted(read: () => Promise<Row[] | undefined>): Promise<void> {
    this.#sortLoading = true;
    try { await this.#loadSortedRows(read); } finally { this.#sortLoading = false; }
  }
  #sortLoading = false;

  async #loadSortedRows(read: () => Promise<Row[] | undefined>): Promise<void> {
    const o = this.#plan.options;
    const order = o.order_by ? compileOrderBy(o.order_by) : undefined;
    const cmp = sortableCompare<Row>(order);
    const pg = this.#paging;
    const start = o.skip_n ?? 0;
    // A page index needs every matching record; a plain top_n only the best skip_n + top_n.
    const top = !pg && o.top_n !== undefined ? new TopN<SortedRow>(start + o.top_n, cmp) : undefined;
    const all: SortedRow[] = [];
    const rf = this.#plan.replaceFrom;
    // Replace, not paginated: the matching records the client holds, wherever they sort.
    const held: Row[] = [];
    let seq = 0;
    let t = performance.now();
    for (let batch = await read(); batch !== undefined; batch = await read()) {
      for (const r of batch) {
        if (SowStructure.expiredAt(r.exp, this.#snapAt)) continue;
        const had = rf?.get(r.key);
        if (had !== undefined) this.#replaceSeen.add(r.key);
        const env = new MessageEnv(decodeMessage(r.bytes));
        if (this.#req.predicates.length && !this.#matches(env)) {
          if (had !== undefined && o.oof) this.#replaceLeft.push({ bytes: r.bytes, ann: this.#annotations('oof', r.scn, r.key, r.ts, 'match'), key: r.key, prev: had });
          continue;
        }
        const item: SortedRow = { row: r, vals: sortValues(order, env), seq: seq++ };
        if (pg) pg.index(item.entry = pg.entry(r.key, r.scn, r.ts, r.bytes, env));
        if (top) top.add(item); else all.push(item);
        if (had !== undefined && !pg) held.push(r);
      }
      if (performance.now() - t >= SLICE_MS) { await this.#pause(); t = performance.now(); }
    }
    const kept = top ? top.items() : all;
    // (without order_by the records came in key order: the answer's order)
    const sorted = order ? await sortInSlices(kept, cmp, () => this.#pause()) : kept;
    const page = sorted.slice(start, o.top_n !== undefined ? start + o.top_n : undefined).map((d) => d.row);
    if (pg) {
      const entries = new Array<PageEntry>(sorted.length);
      for (let i = 0; i < sorted.length; i++) {
        entries[i] = sorted[i].entry!;
        if ((i & 4095) === 4095 && performance.now() - t >= SLICE_MS) { await this.#pause(); t = performance.now(); }
      }
      this.#loadPaging(entries, page);
    }
    this.#rows = new Fifo(rf ? this.#replaceSorted(rf, page, held) : page);
    this.#skipped = start;
    this.#rowsDone = true;
    this.#sortedLoaded = true;
  }

  #lastYield = 0;

  /**
   * A streamed snapshot gives the event loop to other clients once it has worked SLICE_MS since
   * it last did: records read from memory come without I/O, and those a filter refuses take no
   * credit, so nothing else paced a selective query's walk (300k records held the broker ~1 s).
   */
  async #yieldIfDue(): Promise<void> {
    if (performance.now() - this.#lastYield < SLICE_MS) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
    this.#lastYield = performance.now();
  }

  /** Gives the event loop to other clients; a link closed meanwhile stops its work there. */
  async #pause(): Promise<void> {
    await new Promise<void>((resolve) => setImmediate(resolve));
    if (this.#closed) throw new TidemarkError(Conditions.internal, 'link closed');
  }

  /** Replace, a sorted answer: the rows to send of `page` (and, not paginated, of `heldRows`, the other matching records the client holds). */
  #replaceSorted(rf: Map<string, number>, page: Row[], heldRows: Row[]): Row[] {
    const send: Row[] = [];
    const settle = (r: Row) => {
      const held = rf.get(r.key);
      if (held !== undefined && r.scn <= held) this.#delivered.set(r.key, held); else send.push(r);
    };
    for (const r of page) settle(r);
    if (!this.#paging && heldRows.length) {
      const onPage = new Set(page.map((r) => r.key));
      for (const r of heldRows) if (!onPage.has(r.key)) settle(r);
    }
    return send;
  }
  #sortedLoaded = false;

  /**
   * Paginated subscription: the page index holds every matching record of the snapshot (in
   * snapshot order); the page rows are what the snapshot sends, so #delivered becomes the page.
   * Replace: records the old link delivered that still match but are off the new page leave
   * its focus (an oof `match`), not deleted.
   */
  #loadPaging(entries: PageEntry[], page: Row[]): void {
    const pg = this.#paging!;
    pg.load(entries, true); // (in the answer's order, which is the index's: sort values, then key order)
    const rf = this.#plan.replaceFrom;
    if (!rf) return;
    const onPage = new Set(page.map((r) => r.key));
    for (const [key, held] of rf) {
      const e = pg.get(key);
      if (!e || onPage.has(key)) continue;
      this.#replaceSeen.add(key);
      if (this.#plan.options.oof) this.#replaceLeft.push({ bytes: e.bytes, ann: this.#annotations('oof', e.scn, key, e.ts, 'match'), key, prev: held });
    }
  }

  /** A streamed historical query without order_by (historical-scan.ts). */
  #histStream?: HistoricalScan;

  /** Next chunk of a streamed historical query. */
  async #fetchHistory(): Promise<void> {
    const h = this.#histStream!;
    if (this.#fetching || this.#rowsDone) return;
    this.#fetching = true;
    try {
      const rows = await h.next();
      await this.#yieldIfDue();
      if (rows === undefined) { this.#rowsDone = true; this.#histStream = undefined; }
      else for (const r of rows) this.#rows.push(r);
    } finally { this.#fetching = false; }
    this.pump();
  }

  /** Opens the historical scan where the index and a snapshot agree (historical-scan.ts), then streams or sorts it. */
  #historical(S: number): Promise<void> {
    const q = this.#s.queue;
    return new Promise<HistoricalScan | undefined>((resolve) => q.ctx.committer.atQuiescentPoint(() => {
      resolve(this.#closed ? undefined : new HistoricalScan(q.ctx.store, this.#s.records, q.id, this.#s.versions, S, q.committedScn));
    })).then((scan) => scan && this.#historicalFrom(scan, S));
  }

  async #historicalFrom(scan: HistoricalScan, S: number): Promise<void> {
    if (!this.#plan.options.order_by && !this.#paging) {
      // Streams: filter, skip_n and top_n apply per row as it is sent (bounded memory).
      this.#histStream = scan;
      this.#groupEndScn = Math.max(0, S);
      this.#phase = 'snapshot';
      this.pump();
      return;
    }
    this.#fetching = true;
    try { await this.#loadSorted(() => scan.next()); } finally { this.#fetching = false; await scan.close(); }
    // A point older than the window answers with nothing, at SCN 0.
    this.#groupEndScn = Math.max(0, S);
    this.#phase = 'snapshot';
    this.pump();
  }

  #annotations(cmd: string, scn: number, key: string, ts: number, reason?: string): Record<string, unknown> {
    const ann: Record<string, unknown> = {
      'x-opt-tm-cmd': typed.symbol(cmd), 'x-opt-tm-scn': typed.ulong(scn), 'x-opt-tm-key': key, 'x-opt-tm-ts': typed.timestamp(ts),
    };
    if (reason) ann['x-opt-tm-oof-reason'] = typed.symbol(reason);
    if (cmd === 'sow' && this.#queryId()) ann['x-opt-tm-query-id'] = this.#queryId();
    return ann;
  }

  /** Sends a message (`prev`: the version of ev.key the client held before it, for a `replace`). */
  #send(bytes: Buffer, ann: Record<string, unknown>, ev?: SowEvent, exp = ev?.exp, prev?: number): void {
    // Conflation is for live events only (semantics.md 5): the replay up to `completed` goes out
    // event by event, in SCN order, before it (wire.md 5).
    if (ev && this.#plan.options.conflation && this.#phase === 'events' && ev.scn > this.#replayTarget) { this.#conflate(bytes, ann, ev, prev); return; }
    if (ev && this.#plan.checkpoint) ann['x-opt-tm-checkpoint'] = encodeCheckpoint(this.#eventCheckpoint(ev));
    let out;
    try {
      const idx = indexSections(bytes);
      out = rewriteMessageSplit(bytes, idx, exp === undefined ? null : this.#remainingTtl(bytes, idx, exp), ann);
    } catch (err) {
      throw this.#unencodable(err, ann);
    }
    this.#s.queue.counters.delivered++;
    this.#sink.sendSplit(out, undefined, { settled: this.#sink.presettled, position: ev ? ev.scn : -1 });
  }

  /**
   * A delivery that could not be built (nothing is acquired on a SOW link: the link fails,
   * #fail, and nothing is left held): the error naming the record and the cause.
   */
  #unencodable(err: unknown, ann: Record<string, unknown>): TidemarkError {
    log.error('SOW delivery could not be built: link detached', { queue: this.#s.queue.name, key: ann['x-opt-tm-key'], err });
    const scn = (ann['x-opt-tm-scn'] as { value?: unknown } | undefined)?.value;
    return new TidemarkError(Conditions.internal, `the record ${showKey(String(ann['x-opt-tm-key'] ?? ''))}${scn !== undefined ? ` (SCN ${String(scn)})` : ''} could not be encoded for this link (${(err as Error)?.message ?? String(err)}); link detached`);
  }

  /** The header of a record with a TTL, its ttl the time left (wire.md 1: only the remaining ttl changes). */
  #remainingTtl(bytes: Buffer, idx: ReturnType<typeof indexSections>, exp: number): HeaderFields {
    return { ...readHeader(bytes, idx), ttl: Math.max(1, exp - this.#s.queue.ctx.clock.now()) };
  }

  /** Conflation key of an event: the conflation_key paths, or the SOW key. */
  #conflationKey(ev: SowEvent): string {
    const paths = this.#plan.options.conflation_key;
    if (!paths?.length) return ev.key;
    const env = this.#envOf(ev);
    return jsonText(paths.map((p) => env.bodyPath(p.replace(/^\//, '').split('/'))));
  }

  /** Keeps only the latest message per conflation key; the interval timer sends them. */
  #conflate(bytes: Buffer, ann: Record<string, unknown>, ev: SowEvent, prev: number | undefined): void {
    const k = this.#conflationKey(ev);
    const before = this.#conflated.get(k);
    this.#conflated.delete(k);
    if (before && before.key === ev.key) prev = before.prev; // the client still holds what it held before the first
    else if (before && this.#track) {
      // A conflation_key shared by another record: that record's message is never sent, so the
      // client keeps the version it had.
      if (before.prev === undefined) this.#delivered.delete(before.key!); else this.#delivered.set(before.key!, before.prev);
    }
    this.#conflated.set(k, { bytes, ann, ev, key: ev.key, prev, since: before?.since ?? ev.scn, held: before ? before.held : this.#beforeEvent });
    if (!before && this.#plan.checkpoint) this.#heldSince.push({ key: k, since: ev.scn });
    if (!this.#conflationTimer) {
      this.#conflationTimer = setInterval(() => this.#flushConflated(), this.#plan.options.conflation);
      this.#conflationTimer.unref?.();
    }
  }

  #flushConflated(): void {
    for (const [k, m] of this.#conflated) {
      if (this.#closed || this.#sink.credit() <= 0) return;
      this.#conflated.delete(k);
      // Its checkpoint passes no event still held for another key (a resume from it would lose it).
      if (this.#plan.checkpoint) m.ann['x-opt-tm-checkpoint'] = encodeCheckpoint(this.#checkpointNow());
      let out: Buffer;
      try {
        const idx = indexSections(m.bytes);
        out = rewriteMessage(m.bytes, idx, m.ev.exp === undefined ? null : this.#remainingTtl(m.bytes, idx, m.ev.exp), m.ann);
      } catch (err) {
        // (from a timer: thrown on, it would reach no handler)
        this.#fail(this.#unencodable(err, m.ann));
        return;
      }
      this.#s.queue.counters.delivered++;
      this.#sink.send(out, undefined, { settled: this.#sink.presettled, position: m.ev.scn });
    }
  }

  #enterEvents(): void {
    this.#phase = 'events';
    if (this.#plan.command === 'sow') {
      this.#phase = 'done';
      this.#sink.closeWhenFlushed();
      return;
    }
    this.#unsubscribe ??= this.#s.subscribe({ wake: () => this.pump(), close: () => { /* #offClose closes the link */ } });
    this.pump();
  }

  /** Next event after the position: from the ring, or from the log when behind it. */
  #nextEvent(): SowEvent | undefined | 'wait' {
    const s = this.#s;
    if (this.#logRows.length) {
      const ev = this.#logRows.shift()!;
      // Read the next log chunk while this one is sent, unless the ring takes over after it.
      if (this.#logRows.length === LOG_LOW_WATER && !this.#fetching && s.ringIndexAfter(this.#logRows.at(LOG_LOW_WATER - 1)!.scn) < 0) {
        this.#fetchLog().catch((err) => this.#fail(err));
      }
      return ev;
    }
    if (this.#position >= s.queue.committedScn) return undefined;
    const i = s.ringIndexAfter(this.#position);
    if (i >= 0) return i < s.ring.length ? s.ring[i] : undefined;
    // (A reader already streaming goes by the rows still there: it falls off when the trim
    // has taken them, not at logFloor, which is for where a new reader may start.)
    const floor = s.oldestLogScn;
    if (this.#position + 1 < floor && floor > 0 && this.#plan.checkpoint) {
      // A checkpoint consumer that falls behind the retained log (say, during a long snapshot)
      // bootstraps again (semantics.md 8): the changes since its position when every delete
      // since is known, else in full (group_begin with since 0 tells it to reset).
      const had = this.#plan.checkpoint.tracker.prevScn;
      this.#plan.checkpoint.bootstrap = s.knowsDeletesAfter(had) ? { since: had + 1 } : {};
      this.#plan.checkpoint.skip = 0;
      this.#logRows = new Fifo();
      this.#logGeneration++; // a log read still in flight belongs to the old position
      this.#rows = new Fifo(); this.#rowsDone = false; this.#sent = 0; this.#skipped = 0;
      this.#completedSent = false;
      this.#phase = 'starting';
      this.#startBootstrapSnapshot(this.#plan.checkpoint.bootstrap);
      // We are inside pump(): its re-entrant call from the snapshot start was a no-op.
      setImmediate(() => this.pump());
      return 'wait';
    }
    if (this.#position + 1 < floor && floor > 0) {
      // Fell behind the retained log while reading (retention trimmed it).
      throw new TidemarkError(Conditions.scnNotFound, `position ${this.#position} fell off the log of ${s.queue.name} (oldest retained SCN ${floor})`, { info: { 'oldest-scn': floor, 'requested-scn': this.#position } });
    }
    this.#fetchLog().catch((err) => this.#fail(err));
    return 'wait';
  }

  async #fetchLog(): Promise<void> {
    if (this.#fetching) return;
    this.#fetching = true;
    const generation = this.#logGeneration;
    try {
      const q = this.#s.queue;
      // One read of up to LOG_CHUNK events per call, after the last event read (a read-ahead
      // starts while earlier rows are still waiting to be sent).
      const pending = this.#logRows.length;
      const after = pending ? this.#logRows.at(pending - 1)!.scn : this.#position;
      const cursor = q.ctx.store.cursor({ gte: scnKey(CoreTables.log, q.id, after + 1), lt: scnKey(CoreTables.log, q.id, q.committedScn + 1), limit: LOG_CHUNK });
      let rows: Array<[Buffer, Buffer]>;
      try { rows = await cursor.next(LOG_CHUNK); } finally { await cursor.close(); }
      if (generation !== this.#logGeneration) return;
      // The trim publishes its floor before it deletes: rows read from below the floor that do
      // not begin at after + 1 begin past deleted ones. They are not taken; once what this link
      // holds is sent, #nextEvent finds it has fallen off (a read-ahead went on past the gap).
      const floor = this.#s.oldestLogScn;
      const pastGap = after + 1 < floor && (rows.length === 0 || readScn(rows[0][0], 5) !== after + 1);
      if (!pastGap) {
        for (const [k, v] of rows) {
          const { meta, message } = decodeEvent(v);
          this.#logRows.push(eventFromLog(readScn(k, 5), meta, message, false));
        }
        if (!rows.length && this.#logRows.length === 0) this.#position = Math.max(this.#position, q.committedScn);
      }
    } finally { this.#fetching = false; }
    this.pump();
  }

  #envOf(ev: SowEvent): MessageEnv {
    return ((ev as any)[EVENT_ENV] ??= new MessageEnv((ev.view ??= decodeMessage(ev.bytes))));
  }

  /** Decides what one event means for this link; may send nothing. */
  #handleEvent(ev: SowEvent): void {
    if (this.#paging) { this.#handlePaged(ev); return; }
    const oof = this.#plan.options.oof === true;
    const matches = this.#req.predicates.length === 0 || this.#matches(this.#envOf(ev));
    if (!this.#track) {
      if (matches) this.#send(ev.bytes, this.#annotations(ev.op === 'delete' ? 'delete' : 'publish', ev.scn, ev.key, ev.ts), ev);
      return;
    }
    const prev = this.#delivered.get(ev.key);
    if (ev.op === 'delete') {
      if (prev !== undefined) {
        this.#delivered.delete(ev.key);
        if (oof) this.#send(ev.bytes, this.#annotations('oof', ev.scn, ev.key, ev.ts, ev.expired ? 'expired' : 'deleted'), ev, undefined, prev);
        else this.#send(ev.bytes, this.#annotations('delete', ev.scn, ev.key, ev.ts), ev, undefined, prev);
      }
      return;
    }
    if (matches) {
      this.#delivered.set(ev.key, ev.scn);
      this.#send(ev.bytes, this.#annotations('publish', ev.scn, ev.key, ev.ts), ev, undefined, prev);
    } else if (prev !== undefined && oof) {
      this.#delivered.delete(ev.key);
      this.#send(ev.bytes, this.#annotations('oof', ev.scn, ev.key, ev.ts, 'match'), ev, undefined, prev);
    }
    // Without oof a record that stops matching leaves focus silently: the client keeps the
    // state it was sent, so the link keeps it as delivered, and a later delete of it is sent
    // (semantics.md 5: "delete when a delivered record is deleted"). It used to forget the
    // record here, and the client held it for good once it was deleted.
  }

  /**
   * Paginated subscription (semantics.md 5): the event moves its record within the sorted
   * matching set (or out of it); if that could change the page (either position before the
   * page end), the page is recomputed and compared with what the link holds. Messages, in
   * this order: records leaving the page (the event's own record: `delete`/oof `deleted` or
   * `expired` when it went away, oof `match` when it moved off the page or stopped matching;
   * others pushed off by the shift: oof `match` with their current state), then the event's
   * record if it is on the page (`publish`), then records shifted onto the page (`publish`,
   * their current state). Without `oof`, records leaving only by moving get no message. All
   * carry the event's SCN (the page changed there), and their own version's timestamp.
   */
  #handlePaged(ev: SowEvent): void {
    const pg = this.#paging!;
    const oof = this.#plan.options.oof === true;
    const matches = ev.op !== 'delete' && (this.#req.predicates.length === 0 || this.#matches(this.#envOf(ev)));
    const oldIdx = pg.remove(ev.key);
    const newIdx = matches ? pg.insert(pg.entry(ev.key, ev.scn, ev.ts, ev.bytes, this.#envOf(ev))) : -1;
    const end = pg.end;
    if ((oldIdx < 0 || oldIdx >= end) && (newIdx < 0 || newIdx >= end)) return; // after the page: no change
    const page = pg.page();
    const now = new Set(page.map((e) => e.key));
    const before = this.#delivered;
    const as = (e: PageEntry): SowEvent => ({ scn: ev.scn, ts: e.ts, op: 'publish', key: e.key, bytes: e.bytes, w: ev.w });
    if (before.has(ev.key) && !now.has(ev.key)) {
      if (ev.op === 'delete') {
        if (oof) this.#emit(ev.bytes, this.#annotations('oof', ev.scn, ev.key, ev.ts, ev.expired ? 'expired' : 'deleted'), ev);
        else this.#emit(ev.bytes, this.#annotations('delete', ev.scn, ev.key, ev.ts), ev);
      } else if (oof) this.#emit(ev.bytes, this.#annotations('oof', ev.scn, ev.key, ev.ts, 'match'), ev);
    }
    for (const k of before.keys()) {
      if (k === ev.key || now.has(k)) continue;
      const e = pg.get(k);
      if (oof && e) this.#emit(e.bytes, this.#annotations('oof', ev.scn, k, e.ts, 'match'), as(e));
    }
    if (now.has(ev.key)) this.#emit(ev.bytes, this.#annotations('publish', ev.scn, ev.key, ev.ts), ev);
    for (const e of page) if (e.key !== ev.key && !before.has(e.key)) this.#emit(e.bytes, this.#annotations('publish', ev.scn, e.key, e.ts), as(e));
    before.clear();
    for (const e of page) before.set(e.key, e.scn);
  }

  /**
   * Queues a message about ev's record (with the version the client holds of it until sent);
   * pump sends queued messages under credit before the next event.
   */
  #emit(bytes: Buffer, ann: Record<string, unknown>, ev: SowEvent): void { this.#outbox.push({ bytes, ann, ev, key: ev.key, prev: this.#delivered.get(ev.key) }); }

  /** A streamed `top_n` query has its page. */
  #pageFilled(): boolean {
    const n = this.#plan.options.top_n;
    return !this.#sortedLoaded && n !== undefined && this.#sent >= n;
  }

  /** A streamed `top_n` query has its page: nothing more to read (a replace reads on, #fetchHeld). */
  #pageFull(): boolean { return this.#pageFilled() && !this.#plan.replaceFrom; }

  pump(): void {
    if (this.#pumping || this.#closed) return;
    this.#pumping = true;
    try {
      while (!this.#closed && this.#sink.credit() > 0) {
        if (this.#outbox.length) {
          const m = this.#outbox.shift()!;
          this.#send(m.bytes, m.ann, m.ev, undefined, m.prev);
          continue;
        }
        if (this.#phase === 'snapshot') {
          if (this.#rows.length) {
            const r = this.#rows.shift()!;
            // Read the next chunk while this one is sent, so the link never waits on LevelDB.
            // (At or below the mark, not at it: a historical chunk picks fewer rows than it reads.)
            if (this.#rows.length <= SNAPSHOT_LOW_WATER && !this.#fetching && !this.#rowsDone && !this.#pageFull()) this.#fetchSnapshot();
            if (r.tomb) {
              // an incremental bootstrap's tombstone (checkpoint links only: no filter can judge it)
              const ann = this.#annotations('delete', r.scn, r.key, r.ts);
              ann['x-opt-tm-checkpoint'] = this.#snapshotRowCheckpoint(r.key);
              this.#send(r.bytes, ann);
              continue;
            }
            // (a sorted answer settled a replace's rows when it was loaded)
            if (this.#plan.replaceFrom && !this.#sortedLoaded) { this.#replaceRow(r); continue; }
            if (this.#sortedLoaded || this.#admitRow(r)) { this.#sent++; this.#sendRow(r); }
            continue;
          }
          // A sorted answer being loaded: its rows come when it is (a top_n 0 page looked full
          // meanwhile, and group_end went out while the load still read the snapshot).
          if (this.#sortLoading) break;
          const full = this.#pageFull();
          if (!this.#rowsDone && !full) { this.#fetchSnapshot(); break; }
          if (full && !this.#rowsDone) { this.#rowsDone = true; void this.#releaseSnapshot(); }
          const boot = this.#plan.checkpoint?.bootstrap;
          if (boot) {
            // CATCHUP target: the head when the snapshot ends.
            boot.target = this.#s.queue.committedScn;
            this.#replayTarget = boot.target;
            // A durable subscription moves to the catch-up's start: resumed there, the catch-up
            // brings whatever the snapshot's records miss (its position stayed before the bootstrap).
            const tsNsecs = this.#plan.checkpoint!.tracker.tsNsecs;
            this.#marker('group_end', this.#groupEndScn, { consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: boot.start!, prevScn: boot.start!, windowOffset: -1, tsNsecs, bootstrap_since_scn: boot.since ?? 0, bootstrap_start_scn: boot.start, bootstrap_target_scn: boot.target, catchup_offset: boot.start }, boot.start);
          } else {
            this.#marker('group_end', this.#groupEndScn, undefined, this.#groupEndScn);
            this.#replaceAfterSnapshot();
          }
          this.#enterEvents();
          continue;
        }
        if (this.#phase === 'events') {
          // `completed` goes out the moment the replay reaches its target, before any event
          // committed since: those are live (wire.md 5; "now" replays nothing old). It used to
          // wait until nothing more was committed, so under load a live event came first.
          if ((this.#plan.completedMarker || this.#plan.checkpoint?.bootstrap) && !this.#completedSent && this.#position >= this.#replayTarget) {
            this.#completedSent = true;
            this.#marker('completed', this.#position, this.#plan.checkpoint && this.#checkpointNow());
            continue;
          }
          const ev = this.#nextEvent();
          if (ev === 'wait') break;
          if (!ev) {
            // Caught up: the events its filter skipped are passed (a durable position moves over
            // them), unless a message for one is still held back (conflation, outbox).
            if (!this.#conflated.size && !this.#outbox.length) this.#sink.passed(this.#position);
            break;
          }
          const cp = this.#plan.checkpoint;
          if (cp && this.#plan.options.conflation) this.#beforeEvent = this.#passedCheckpoint();
          this.#position = ev.scn;
          if (cp) {
            cp.tracker.pass(ev.scn, ev.w, ev.ts);
            if (cp.skip > 0) { cp.skip--; continue; }
          }
          this.#handleEvent(ev);
          continue;
        }
        break;
      }
      if (this.#draining && this.#phase === 'events' && this.#sink.credit() > 0 && this.#position >= this.#s.queue.committedScn && !this.#logRows.length && !this.#outbox.length) {
        this.#draining = false;
        this.#sink.drained();
      }
    } catch (err) {
      this.#fail(err);
    } finally {
      this.#pumping = false;
    }
  }

  #fail(err: unknown): void {
    if (this.#closed) return;
    if (!(err instanceof TidemarkError)) log.error('SOW consumer failed', { queue: this.#s.queue.name, err });
    const e = err instanceof TidemarkError ? err : new TidemarkError(Conditions.internal, String((err as Error)?.message ?? err));
    this.close();
    this.#sink.close(e);
  }

  onCredit(): void { this.pump(); }
  onDrain(): void { this.#draining = true; this.pump(); if (this.#draining && this.#phase !== 'events') { /* drain completes once snapshot streamed */ } }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#conflationTimer) clearInterval(this.#conflationTimer);
    this.#unsubscribe?.();
    this.#offClose?.();
    void this.#releaseSnapshot();
  }
}

