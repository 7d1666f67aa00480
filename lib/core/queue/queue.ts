/**
 * A named queue: settings, its SCN sequencer, and the structure that stores and delivers its
 * messages. Publishing is prepare (sync: SCN, storage ops, in-memory state) then commit
 * (group commit) then dispatch, so consumers only ever see durable events, in SCN order.
 */
import type { BatchOp } from '../storage/store.js';
import type { Committer } from '../storage/committer.js';
import type { Store } from '../storage/store.js';
import type { Clock } from '../clock.js';
import { TidemarkError, Conditions } from '../errors.js';
import type { InboundMessage } from './inbound.js';
import type { Consumer, DeliverySink } from './delivery.js';
import type { ConsumerRequest, ExtensionRegistry } from '../extensions.js';
import { logger } from '../log.js';

const log = logger('queue');

/** Storage ops of one event plus what to do once they are durable (or not). */
export interface PreparedEvent {
  ops: BatchOp[];
  /** Runs after the batch is durable: make the event visible and dispatch it. */
  committed(): void;
  /** Runs if the batch failed: undo in-memory effects. */
  failed(): void;
}

/** How a queue stores and delivers: the list (standard/browse/ring/LVQ) or an extension's (SOW). */
export interface QueueStructure {
  readonly kind: string;
  /**
   * True when the structure reads its own rows back from storage (SOW snapshots, history,
   * replay), so they are written even for a non-durable queue (which is not recovered).
   */
  readonly needsStorage?: boolean;
  /** Builds one event at `scn`; throws TidemarkError to reject the message. Synchronous. */
  prepare(msg: InboundMessage, scn: number, windowEnd: number | undefined): PreparedEvent;
  openConsumer(req: ConsumerRequest, sink: DeliverySink): Consumer;
  /** Rebuilds in-memory state from storage; returns the highest SCN seen. */
  recover(): Promise<number>;
  /** Removes every message; returns how many. */
  purge(): Promise<number>;
  /** Expires what is past its TTL (called by the TTL extension's sweeper). */
  sweep?(now: number): void;
  stats(): QueueStats;
  /** Stops consumers (queue deletion or broker stop); `error` is the detach error their links get. */
  close(error?: TidemarkError): void;
}

export interface QueueStats {
  /** Messages (or SOW records) currently held. */
  depth: number;
  /** Their total size in bytes. */
  bytes: number;
  /** Oldest retained SCN, 0 when empty. */
  oldestScn: number;
  consumers: number;
  [k: string]: unknown;
}

/** What every queue shares: the engine of the broker. */
export interface EngineContext {
  readonly store: Store;
  readonly committer: Committer;
  readonly clock: Clock;
  readonly registry: ExtensionRegistry;
}

export interface QueueDefinition {
  /** Queue name (its address). */
  name: string;
  /** Storage id used in keys. */
  id: number;
  /** Messages are written to storage and survive restart. Default true. */
  durable: boolean;
  /** Canonical queue arguments (wire.md 2.3). */
  arguments: Record<string, unknown>;
  /** Created at, ms. */
  created: number;
  /** Deleted with its creating link (dynamic nodes). */
  temporary?: boolean;
  /** A temporary queue's creator (its link's user): only theirs to use as a management reply-to. */
  owner?: string;
  /** A temporary queue's creating connection: only its links read the queue. */
  ownerConnection?: string;
}

const NO_OPS: BatchOp[] = [];

export class Queue {
  readonly def: QueueDefinition;
  readonly ctx: EngineContext;
  /** Every receiver browses; `move` is answered with `copy` (qpid.browse-only, SOW). */
  browseOnly = false;
  structure!: QueueStructure;
  /** Last SCN assigned (the sequencer). */
  headScn = 0;
  /** Last SCN durable and visible. */
  committedScn = 0;
  /** Inbound hooks of the extensions that configured this queue. */
  readonly inboundHooks: Array<(msg: InboundMessage) => void> = [];
  /** Counters for metrics. */
  readonly counters = { published: 0, delivered: 0, acknowledged: 0, rejected: 0, expired: 0 };
  #deleted = false;

  constructor(def: QueueDefinition, ctx: EngineContext) {
    this.def = def;
    this.ctx = ctx;
  }

  get name(): string { return this.def.name; }
  get id(): number { return this.def.id; }
  get durable(): boolean { return this.def.durable; }
  get deleted(): boolean { return this.#deleted; }
  get arguments(): Readonly<Record<string, unknown>> { return this.def.arguments; }

  /** Prepares a window of events (one message, or a transaction's messages) with contiguous SCNs. */
  prepareWindow(msgs: InboundMessage[]): { ops: BatchOp[]; committed(): void; failed(): void; firstScn: number; lastScn: number } {
    if (this.#deleted) throw new TidemarkError(Conditions.notFound, `queue ${this.name} was deleted`);
    const prepared: PreparedEvent[] = [];
    const start = this.headScn;
    const windowEnd = msgs.length > 1 ? start + msgs.length : undefined;
    try {
      for (let i = 0; i < msgs.length; i++) {
        for (const h of this.inboundHooks) h(msgs[i]);
        prepared.push(this.structure.prepare(msgs[i], start + i + 1, windowEnd));
      }
    } catch (e) {
      for (let i = prepared.length - 1; i >= 0; i--) prepared[i].failed();
      throw e;
    }
    this.headScn = start + msgs.length;
    const lastScn = this.headScn;
    const ops: BatchOp[] = [];
    if (this.durable || this.structure.needsStorage) for (const p of prepared) for (const op of p.ops) ops.push(op);
    return {
      ops,
      firstScn: start + 1,
      lastScn,
      committed: () => {
        this.committedScn = lastScn;
        this.counters.published += msgs.length;
        for (const p of prepared) p.committed();
      },
      failed: () => { for (let i = prepared.length - 1; i >= 0; i--) prepared[i].failed(); },
    };
  }

  /**
   * Stores one message; `done` runs once it is durable (or with the reason it is not).
   * A window of one, without prepareWindow's arrays: this is the path of every plain publish.
   */
  publish(msg: InboundMessage, done: (err?: TidemarkError) => void): void {
    if (this.#deleted) { this.counters.rejected++; done(new TidemarkError(Conditions.notFound, `queue ${this.name} was deleted`)); return; }
    const scn = this.headScn + 1;
    let p: PreparedEvent;
    try {
      for (const h of this.inboundHooks) h(msg);
      p = this.structure.prepare(msg, scn, undefined);
    } catch (e) { this.counters.rejected++; done(asTidemark(e)); return; }
    this.headScn = scn;
    const ops = this.durable || this.structure.needsStorage ? p.ops : NO_OPS;
    this.ctx.committer.add(ops, (err) => {
      if (err) { p.failed(); done(new TidemarkError(Conditions.internal, `storage write failed for ${this.name}: ${err.message}`, { cause: err })); return; }
      this.committedScn = scn;
      this.counters.published++;
      p.committed();
      done();
    });
  }

  markDeleted(): void { this.#deleted = true; this.structure.close(new TidemarkError(Conditions.resourceDeleted, `queue ${this.name} was deleted`)); }
}

export function asTidemark(e: unknown): TidemarkError {
  if (e instanceof TidemarkError) return e;
  // Unexpected: the producer sees amqp:internal-error, the log keeps the cause (wire.md 8).
  log.error('publish could not be prepared', { err: e });
  return new TidemarkError(Conditions.internal, (e as Error)?.message ?? String(e), { cause: e });
}
