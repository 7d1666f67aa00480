/**
 * The composition root: the only place that creates subsystems and wires them together —
 * storage, group commit, extensions, nodes, the AMQP server.
 */
import { loadConfig, ConfigError, type BrokerConfig } from './config.js';
import { systemClock, type Clock } from './clock.js';
import { Store } from './storage/store.js';
import { Committer } from './storage/committer.js';
import { IdleCompactor } from './storage/idle-compaction.js';
import { IdleMemory } from './idle-memory.js';
import { ExtensionRegistry, type Extension, type ConsumerRequest, type ParsedFilter, type AuthAction } from './extensions.js';
import { NodeRegistry } from './node-registry.js';
import { AmqpServer, type ProtocolBackend } from './protocol/server.js';
import type { BrokerContext } from './broker-context.js';
import type { Queue } from './queue/queue.js';
import type { InboundMessage } from './queue/inbound.js';
import type { Consumer, DeliverySink } from './queue/delivery.js';
import { TidemarkError, Conditions } from './errors.js';
import { toBool } from '../address/index.js';
import { verifyPasswordAsync } from './auth.js';
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { setLogLevel, logger } from './log.js';
import type { RheaSink } from './protocol/sink.js';

const log = logger('broker');

export interface BrokerOptions {
  /** A ready config; otherwise loaded from `configFile` with `overrides`. */
  config?: BrokerConfig;
  configFile?: string;
  overrides?: Record<string, unknown>;
  /** Injected clock (tests). */
  clock?: Clock;
  /** Extension catalogue: name -> factory. */
  catalogue: Record<string, () => Extension>;
}

export class Broker implements BrokerContext, ProtocolBackend {
  readonly config: BrokerConfig;
  readonly clock: Clock;
  readonly extensions = new ExtensionRegistry();
  readonly stats = { connections: 0, links: 0 };
  store!: Store;
  committer!: Committer;
  nodes!: NodeRegistry;
  #server!: AmqpServer;
  /** Listening URLs, amqp first. */
  urls: string[] = [];
  /** HTTP listener URL (metrics, console), set by the `http` extension; undefined when off. */
  httpUrl?: string;
  /** The console's internal login (BrokerContext.consoleLogin): made here, never logged or stored. */
  readonly #consoleLogin = { username: 'anonymous', password: randomBytes(32).toString('base64url') };
  #stopped = false;
  #compactor?: IdleCompactor;
  #idleMemory?: IdleMemory;

  private constructor(config: BrokerConfig, clock: Clock) {
    this.config = config;
    this.clock = clock;
  }

  static async start(opts: BrokerOptions): Promise<Broker> {
    const config = opts.config ?? loadConfig(opts.configFile, opts.overrides);
    setLogLevel(config.logLevel);
    const b = new Broker(config, opts.clock ?? systemClock);
    for (const name of config.extensions) {
      const make = opts.catalogue[name];
      if (!make) throw new TidemarkError(Conditions.invalidField, `config.extensions: unknown extension ${name} (known: ${Object.keys(opts.catalogue).join(', ')})`);
      try { b.extensions.register(make()); }
      catch (e) { throw new TidemarkError(Conditions.invalidField, `config.extensions: ${(e as Error).message}`); }
    }
    // An ACL in the config with nothing to enforce it would be a silent hole: refuse to start.
    if ((config.acl.rules.length > 0 || config.acl.default === 'deny') && !b.extensions.authorizes) {
      throw new TidemarkError(Conditions.invalidField, 'config.acl: rules are configured but no authorizing extension is enabled (add "acl" to config.extensions)');
    }
    b.store = await Store.open(config.dataDir);
    b.committer = new Committer(b.store, config.commit.maxBatch);
    const compactor = new IdleCompactor(b.store, config.compaction);
    b.#compactor = compactor;
    b.#idleMemory = new IdleMemory(config.memory);
    b.committer.onWritten = (ops) => compactor.written(ops);
    b.nodes = new NodeRegistry({ store: b.store, committer: b.committer, clock: b.clock, registry: b.extensions });
    b.nodes.onDeleted.push((q) => compactor.forgetQueue(q.id));
    // A stored queue whose arguments belong to an extension left out of config.extensions would
    // be served as a plain consuming queue: a SOW log or a browse-only queue read empty by the
    // first consumer. Refuse to start instead (the queue is untouched). Arguments whose
    // extension only adds behaviour (history, limits, TTL...) wait for it to come back.
    const notLoaded = new Map<string, string>();
    for (const [name, make] of Object.entries(opts.catalogue)) {
      if (config.extensions.includes(name)) continue;
      try { for (const a of make().queueArguments ?? []) if (a.guardsData) notLoaded.set(a.name, name); } catch { /* not describable: skip */ }
    }
    try {
      await b.nodes.recover((queue, arg, value) => {
        const ext = notLoaded.get(arg);
        if (ext && value !== false) throw new TidemarkError(Conditions.invalidField, `config.extensions: queue ${queue} was declared with ${arg}, which the "${ext}" extension handles; add "${ext}" to config.extensions (serving the queue without it would lose what it keeps)`);
      });
    } catch (e) { await b.store.close(); throw e; }
    for (const [name, q] of Object.entries(config.queues)) {
      let declared: ReturnType<NodeRegistry['declare']>;
      try { declared = b.nodes.declare(name, { durable: q.durable ?? true, arguments: q.arguments ?? {} }); }
      catch (e) { await b.store.close(); throw new ConfigError(`config.queues.${JSON.stringify(name)}: ${(e as Error).message}`, { cause: e }); }
      const { queue, created } = declared;
      if (!created && JSON.stringify(queue.arguments) !== JSON.stringify(b.nodes.normalizeArguments(q.arguments ?? {}))) {
        log.warn('config.queues: the queue exists with other arguments; the stored ones stay (delete and re-create it to change them)', { queue: name, stored: queue.arguments, config: q.arguments ?? {} });
      }
    }
    for (const ext of b.extensions.all) await ext.start?.(b);
    b.#server = new AmqpServer(b);
    b.urls = await b.#server.listen();
    log.info('listening', { urls: b.urls });
    return b;
  }

  /** Stops accepting, releases in-flight deliveries, flushes and closes storage. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    // Stop taking messages, let those being stored settle (their producers get accepted),
    // then close the connections with connection:forced.
    this.#server?.quiesce();
    await this.committer?.idle();
    await this.#server?.releaseInFlight();
    await this.committer?.idle();
    await this.#server?.close();
    for (const ext of [...this.extensions.all].reverse()) {
      try { await ext.stop?.(); } catch (err) { log.error('extension stop failed', { ext: ext.name, err }); }
    }
    await this.committer?.idle();
    await this.#compactor?.close();
    this.#idleMemory?.close();
    await this.store?.close();
    log.info('stopped');
  }

  whenStored(fn: () => void): void { this.committer.whenWritten(fn); }

  onActivity(bytes: number): void {
    this.#compactor?.activity();
    this.#idleMemory?.received(bytes);
  }

  /** What giving memory back at idle did so far (tests, statistics). */
  get idleMemoryStats(): Readonly<IdleMemory['stats']> | undefined { return this.#idleMemory?.stats; }

  /** What the idle compaction did so far (tests, statistics). */
  get compactionStats(): Readonly<IdleCompactor['stats']> | undefined { return this.#compactor?.stats; }

  // ---- BrokerContext -------------------------------------------------------------------

  queueInfo(q: Queue): Record<string, unknown> {
    const s = q.structure.stats();
    const info: Record<string, unknown> = {
      name: q.name, arguments: { ...q.arguments }, durable: q.durable,
      depth: s.depth, bytes: s.bytes, scn_head: q.committedScn, scn_oldest: s.oldestScn,
      sow_records: s.sowRecords ?? 0, history_versions: s.historyVersions ?? 0, consumers: s.consumers,
    };
    for (const ext of this.extensions.all) Object.assign(info, ext.queueStatistics?.(q));
    return info;
  }

  // ---- ProtocolBackend -----------------------------------------------------------------

  hasNode(name: string): boolean { return this.nodes.get(name) !== undefined; }

  resolveNode(address: string, opts: { createOnDemand: boolean; properties: Record<string, unknown>; role: 'sender' | 'receiver'; user: string }): Queue {
    const existing = this.nodes.get(address);
    // Authorization (ACL, docs/security.md), before anything is created: a client sender
    // (our role receiver; also each anonymous-relay message) needs publish; a client
    // receiver needs consume or browse (the exact mode: authorizeConsumer); making a missing
    // queue needs create.
    // A temporary queue is not named by the ACL (docs/security.md): anyone may send to it (a
    // reply), and who may read it is its owner (authorizeConsumer).
    if (existing?.def.temporary) { /* decided by ownership */ }
    else if (opts.role === 'receiver') this.#require(opts.user, 'publish', address);
    else if (!this.#can(opts.user, 'consume', address) && !this.#can(opts.user, 'browse', address)) this.#require(opts.user, 'browse', address);
    if (!existing && (opts.createOnDemand || this.config.autoCreateQueues)) this.#require(opts.user, 'create', address);
    if (opts.createOnDemand) {
      // Read leniently, as queue arguments are (wire.md 2.1): `durable: 1` or "yes" used to make a
      // non-durable queue, lost at restart, and "bogus" was taken for false without a word.
      let durable = true;
      if (opts.properties.durable !== undefined) {
        try { durable = toBool('durable', opts.properties.durable); }
        catch (e) { throw new TidemarkError(Conditions.invalidField, `node property ${(e as Error).message}; the queue was not created`); }
      }
      return this.nodes.declare(address, { durable, arguments: opts.properties }).queue;
    }
    if (existing) return existing;
    if (this.config.autoCreateQueues) return this.nodes.declare(address, { durable: true }).queue;
    throw new TidemarkError(Conditions.notFound, `no such queue: ${address}`);
  }

  createDynamicNode(properties: Record<string, unknown>, user: string, connectionId: string, onLinkClose: (fn: () => void) => void): Queue {
    for (const ext of this.extensions.all) {
      if (ext.createDynamicNode) return ext.createDynamicNode(this, properties, onLinkClose, user, connectionId);
    }
    throw new TidemarkError(Conditions.notImplemented, 'dynamic nodes are not enabled (extension temporary-queues)');
  }

  parseFilter(descriptor: string, value: unknown, queue: Queue): { symbol: string; parsed: ParsedFilter } | undefined {
    const spec = this.extensions.filter(descriptor);
    if (!spec) return undefined;
    return { symbol: spec.symbol, parsed: spec.parse(value, { queue }) };
  }

  /**
   * ACL for a receiving link: move needs consume; without consume but with browse, move is
   * downgraded to copy (browse-only by ACL: the reader removes nothing); copy needs browse
   * (consume implies it). Temporary queues belong to their link and are not checked.
   * Throws `amqp:unauthorized-access`; idempotent.
   */
  authorizeConsumer(queue: Queue, req: ConsumerRequest): void {
    if (req.mode === 'move' && this.extensions.all.some((e) => e.browsesQueue?.(queue, req))) req.mode = 'copy';
    if (queue.def.temporary) {
      // A temporary queue is read by its creator's links only: the ACL does not name it, and
      // a user allowed only to browse took a reply queue's messages from another user's (audit).
      // Its creator is a connection, not only a user: every ANONYMOUS client is "anonymous",
      // so by user alone any of them could take another's replies once it saw the reply-to
      // (session 24 review). As an exclusive queue in RabbitMQ or qpidd.
      const mine = (queue.def.owner === undefined || queue.def.owner === req.user)
        && (queue.def.ownerConnection === undefined || queue.def.ownerConnection === req.connectionId);
      if (mine) return;
      // (Not naming the owner: who uses which reply queue is not the refused user's business.)
      throw new TidemarkError(Conditions.unauthorized, `user ${req.user} may not read temporary queue ${queue.name}: it is read only by links of the connection that created it`);
    }
    if (req.mode === 'move' && !this.#can(req.user, 'consume', queue.name)) {
      this.#require(req.user, 'browse', queue.name);
      req.mode = 'copy';
    } else if (req.mode === 'copy') {
      this.#require(req.user, 'browse', queue.name);
    }
  }

  #can(user: string, action: AuthAction, queue: string): boolean { return this.extensions.authorize(user, action, queue); }

  #require(user: string, action: AuthAction, queue: string): void {
    if (!this.#can(user, action, queue)) throw new TidemarkError(Conditions.unauthorized, `user ${user} may not ${action} queue ${queue}`);
  }

  openConsumer(queue: Queue, req: ConsumerRequest, sink: RheaSink | DeliverySink): Consumer {
    this.authorizeConsumer(queue, req); // again here, whoever calls (server.ts already did, before its attach reply)
    // Latest-registered first: an extension built on others gets the first pick of a link,
    // and `next` hands it to the ones below it (extensions.ts, openConsumer).
    const exts = this.extensions.all;
    const from = (top: number) => (r: ConsumerRequest, s: DeliverySink): Consumer => {
      for (let i = top; i >= 0; i--) {
        const c = exts[i].openConsumer?.(queue, r, s, from(i - 1));
        if (c) return c;
      }
      return queue.structure.openConsumer(r, s);
    };
    return from(exts.length - 1)(req, sink);
  }

  publish(queue: Queue, msg: InboundMessage, done: (err?: TidemarkError) => void): void {
    msg.receivedAt = this.clock.now();
    queue.publish(msg, done);
  }

  serviceAddress(address: string) {
    for (const ext of this.extensions.all) {
      const h = ext.serviceAddresses?.[address];
      if (h) return h;
    }
    return undefined;
  }

  get consoleLogin(): { username: string; password: string } | undefined {
    return this.config.auth.anonymous === false ? undefined : this.#consoleLogin;
  }

  /**
   * SASL PLAIN; async so scrypt runs off the event loop. rhea gives an empty field as null:
   * it is '' here, before anything (a null password made the check throw, answered as a system
   * error only for users that exist; a null user name was looked up as "null"). An empty user
   * name is no user. `gone()`: the connection ended; a check still waiting is skipped.
   */
  authenticate(rawUser: unknown, rawPassword: unknown, gone?: () => boolean): Promise<boolean> {
    const user = typeof rawUser === 'string' ? rawUser : '';
    const password = typeof rawPassword === 'string' ? rawPassword : '';
    // The console's internal login stands for ANONYMOUS from loopback (BrokerContext.consoleLogin).
    const cl = this.consoleLogin;
    if (cl && user === cl.username) {
      const a = Buffer.from(password), e = Buffer.from(cl.password);
      if (a.length === e.length && timingSafeEqual(a, e)) return Promise.resolve(true);
    }
    // No users configured: no PLAIN login can succeed, and there is no user to hide, so no
    // derivation is spent on it (the default config; a flood of them cost the thread pool).
    if (Object.keys(this.config.auth.users).length === 0) return Promise.resolve(false);
    const known = user !== '' && Object.hasOwn(this.config.auth.users, user) ? this.config.auth.users[user] : undefined;
    return verifyPasswordAsync(known, password, { gone });
  }
}
