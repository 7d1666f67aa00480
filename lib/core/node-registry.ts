/**
 * The queues of a broker: declaration (from config, management or create-on-demand),
 * argument normalisation through the extensions that claim them, persistence of the
 * definitions, recovery at start, and deletion.
 */
import { QPID_OPTIONS } from '../address/index.js';
import { Queue, type EngineContext, type QueueDefinition } from './queue/queue.js';
import { ListStructure } from './queue/list-structure.js';
import { TidemarkError, Conditions } from './errors.js';
import { metaKey, counterKey, CoreTables, queuePrefix, prefixEnd } from './storage/keyspace.js';
import { logger } from './log.js';
import type { BatchOp } from './storage/store.js';

/**
 * Longest name a new queue may have, in UTF-16 units (RabbitMQ allows 255 bytes). Names are
 * client input: every ACL rule, log line and stored row carries them, and a 120 KB name was
 * auto-created through the anonymous relay (session 22).
 */
export const MAX_QUEUE_NAME = 1024;

const log = logger('nodes');

/** Node properties that are not queue arguments (wire.md 2.1). */
export const RESERVED_NODE_PROPERTIES = new Set([
  'supported-dist-modes', 'lifetime-policy', 'durable', 'exclusive', 'auto-delete', 'alternate-exchange', 'exchange-type',
]);

export interface DeclareOptions {
  durable?: boolean;
  /** Raw queue arguments (lenient values), validated here. */
  arguments?: Record<string, unknown>;
  temporary?: boolean;
  /** The user whose link created a temporary queue. */
  owner?: string;
  /** The connection whose link created a temporary queue: only its links read it. */
  ownerConnection?: string;
}

export class NodeRegistry {
  readonly #ctx: EngineContext;
  readonly #queues = new Map<string, Queue>();
  #nextId = 1;
  /** Observers of queue creation/deletion (metrics, management). */
  readonly onCreated: Array<(q: Queue) => void> = [];
  readonly onDeleted: Array<(q: Queue) => void> = [];

  constructor(ctx: EngineContext) { this.#ctx = ctx; }

  get(name: string): Queue | undefined { return this.#queues.get(name); }
  list(): Queue[] { return [...this.#queues.values()]; }

  /** Lenient parse of each claimed argument, then every extension's cross-argument rules. */
  normalizeArguments(raw: Record<string, unknown> = {}): Record<string, unknown> {
    const reg = this.#ctx.registry;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(raw)) {
      if (RESERVED_NODE_PROPERTIES.has(k)) continue;
      const spec = reg.argument(k);
      if (!spec) {
        if (k.startsWith('sow.') || k.startsWith('log.') || k.startsWith('tidemark.')) {
          throw new TidemarkError(Conditions.invalidField, `unknown queue argument ${k} (known: ${reg.argumentNames.filter((n) => n.startsWith(k.split('.')[0] + '.')).join(', ') || 'none enabled'})`);
        }
        out[k] = v; // other brokers' arguments are kept, as qpidd does
        continue;
      }
      if (spec.name in out) throw new TidemarkError(Conditions.invalidField, `queue argument ${spec.name} given twice (as ${k})`);
      try { out[spec.name] = spec.parse(v); }
      catch (e) {
        // the parsers name the argument themselves ("qpid.max_count: expected ..."): once is enough
        const m = (e as Error).message;
        throw new TidemarkError(Conditions.invalidField, `queue argument ${m.startsWith(`${k}: `) || m.startsWith(`${spec.name}: `) ? m : `${k}: ${m}`}`);
      }
    }
    for (const ext of reg.all) {
      try { ext.validateArguments?.(out); }
      catch (e) { throw new TidemarkError(Conditions.invalidField, (e as Error).message); }
    }
    return out;
  }

  /**
   * Returns the existing queue (arguments unchanged, as qpidd does; a differing SOW/history
   * argument is a precondition failure) or creates it. Synchronous: the definition is written
   * through the committer, ahead of any message for the queue.
   */
  declare(name: string, opts: DeclareOptions = {}): { queue: Queue; created: boolean } {
    if (!name) throw new TidemarkError(Conditions.invalidField, 'queue name must not be empty');
    if (name.startsWith('$')) throw new TidemarkError(Conditions.notAllowed, `queue names starting with $ are reserved: ${name}`);
    const args = this.normalizeArguments(opts.arguments);
    const existing = this.#queues.get(name);
    if (!existing && name.length > MAX_QUEUE_NAME) {
      throw new TidemarkError(Conditions.invalidField, `queue name of ${name.length} characters (${JSON.stringify(name.slice(0, 40))}…) is longer than ${MAX_QUEUE_NAME}: choose a shorter one`);
    }
    if (existing) {
      for (const [k, v] of Object.entries(args)) {
        const spec = this.#ctx.registry.argument(k);
        if (spec?.strict && JSON.stringify(existing.arguments[k]) !== JSON.stringify(v)) {
          throw new TidemarkError(Conditions.preconditionFailed, `queue ${name} exists with ${k}=${JSON.stringify(existing.arguments[k] ?? null)}, not ${JSON.stringify(v)}`);
        }
      }
      // A declaration that names any SOW/history/log argument must name them all as the queue
      // has them; one that names none (only reserved node properties, as qpid::messaging sends
      // for `{create: always, node: {durable: true}}`, or other brokers' arguments) uses the
      // queue as it is.
      const declaresStrict = Object.keys(args).some((k) => this.#ctx.registry.argument(k)?.strict);
      for (const [k, v] of Object.entries(existing.arguments)) {
        const spec = this.#ctx.registry.argument(k);
        if (spec?.strict && declaresStrict && !(k in args)) {
          throw new TidemarkError(Conditions.preconditionFailed, `queue ${name} exists with ${k}=${JSON.stringify(v)}; declare it with the same value`);
        }
      }
      return { queue: existing, created: false };
    }
    // `name; {…}` is how clients write a Qpid address with options, and the broker reads such
    // an attach address as one (docs/addresses.md 2.5): a queue with that name could be
    // reached by name only where nothing reads addresses (the console read its options).
    if (QPID_OPTIONS.test(name)) {
      throw new TidemarkError(Conditions.invalidField, `queue name ${JSON.stringify(name)} holds ';' followed by '{', the form of a Qpid address with options, which clients and the broker read as options: choose a name without it`);
    }
    const def: QueueDefinition = {
      name, id: this.#nextId++, durable: opts.durable ?? true, arguments: args, created: this.#ctx.clock.now(), temporary: opts.temporary,
      ...(opts.owner !== undefined ? { owner: opts.owner } : {}),
      ...(opts.ownerConnection !== undefined ? { ownerConnection: opts.ownerConnection } : {}),
    };
    const q = this.#build(def);
    if (def.durable && !def.temporary) {
      const idv = Buffer.allocUnsafe(4); idv.writeUInt32BE(this.#nextId);
      const defOps: BatchOp[] = [
        { type: 'put', key: metaKey(name), value: Buffer.from(JSON.stringify(def)) },
        { type: 'put', key: counterKey('next-queue-id'), value: idv },
      ];
      // A failed write (disk full) must not leave the queue only in memory: messages accepted
      // for it later would be orphaned at restart. Re-queued as quiet ops, which the committer
      // keeps across failed batches and writes ahead of the next one (degradation.spec.ts).
      this.#ctx.committer.add(defOps, (err) => {
        if (!err) return;
        log.error('queue definition not stored; retrying with the next batch', { queue: name, err });
        this.#ctx.committer.addQuiet(defOps);
      });
    }
    this.#queues.set(name, q);
    log.info('queue created', { queue: name, arguments: args, durable: def.durable });
    // Other brokers' arguments are kept (qpidd does the same) but do nothing here: say so, so
    // `x-max-length` or a misspelt `qpid.max_cnt` is not taken for a limit.
    const unapplied = Object.keys(args).filter((k) => !this.#ctx.registry.argument(k));
    if (unapplied.length) log.warn('queue arguments kept but not applied by this broker', { queue: name, unapplied, known: this.#ctx.registry.argumentNames });
    for (const f of this.onCreated) f(q);
    return { queue: q, created: true };
  }

  #build(def: QueueDefinition): Queue {
    const q = new Queue(def, this.#ctx);
    q.structure = new ListStructure(q);
    for (const ext of this.#ctx.registry.all) ext.configureQueue?.({ queue: q, arguments: def.arguments });
    return q;
  }

  /** `check(queue, argument, value)` may refuse a stored queue's argument (an extension not loaded). */
  async recover(check?: (queue: string, argument: string, value: unknown) => void): Promise<void> {
    const store = this.#ctx.store;
    const idv = await store.get(counterKey('next-queue-id'));
    if (idv) this.#nextId = idv.readUInt32BE(0);
    const rows = await store.all({ gte: Buffer.from([CoreTables.meta]), lt: Buffer.from([CoreTables.meta + 1]) });
    for (const [, v] of rows) {
      const def = JSON.parse(v.toString('utf8')) as QueueDefinition;
      if (check) for (const [a, v] of Object.entries(def.arguments ?? {})) check(def.name, a, v);
      this.#nextId = Math.max(this.#nextId, def.id + 1);
      const q = this.#build(def);
      const max = await q.structure.recover();
      q.headScn = q.committedScn = max;
      this.#queues.set(def.name, q);
      for (const f of this.onCreated) f(q);
    }
    await this.#clearOrphans([...this.#queues.values()].map((q) => q.id));
    log.info('recovered queues', { count: rows.length });
  }

  /**
   * Rows of queues that are not defined any more (non-durable queues that kept rows, a deletion
   * cut short by a crash) are removed at start, so a reused queue id starts empty.
   */
  async #clearOrphans(known: number[]): Promise<void> {
    const ids = [...new Set(known)].sort((a, b) => a - b);
    for (let tag = 0x10; tag < 0x80; tag++) {
      let from = 0;
      for (const id of [...ids, 0xffffffff]) {
        if (id > from) await this.#ctx.store.clearRange(queuePrefix(tag, from), queuePrefix(tag, id));
        from = id + 1;
      }
      await this.#ctx.store.clearRange(queuePrefix(tag, 0xffffffff), Buffer.from([tag + 1]));
    }
  }

  /** Deletes a queue and every row it owns in every table. */
  async delete(name: string): Promise<boolean> {
    const q = this.#queues.get(name);
    if (!q) return false;
    this.#queues.delete(name);
    q.markDeleted();
    for (const f of this.onDeleted) f(q);
    // The definition's delete goes through the committer now, before any await: a queue of the
    // same name declared while this one is being deleted queues its definition behind it. (A
    // direct write after idle() deleted the new queue's definition: its accepted messages
    // were orphans at the next start, and cleared.)
    this.#ctx.committer.addQuiet([{ type: 'del', key: metaKey(name) }]);
    await this.#ctx.committer.idle();
    for (let tag = 0x10; tag < 0x80; tag++) {
      const p = queuePrefix(tag, q.id);
      await this.#ctx.store.clearRange(p, prefixEnd(p));
    }
    log.info('queue deleted', { queue: name });
    return true;
  }
}
