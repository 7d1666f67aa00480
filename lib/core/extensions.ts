/**
 * The named extension points of the core (architecture.md "Plugin-style"). Every Tidemark
 * feature — browse-only, limits/ring, LVQ, TTL, temporary queues, selectors, SOW, history,
 * replay, checkpoints, management — is an Extension registered here; the core knows none of
 * them by name.
 */
import type { Queue } from './queue/queue.js';
import type { Consumer, DeliverySink } from './queue/delivery.js';
import type { BrokerContext } from './broker-context.js';
import type { InboundMessage } from './queue/inbound.js';
import type { FilterEnv } from './queue/filter-env.js';

/** A queue argument an extension claims (wire.md 2.3). */
export interface QueueArgumentSpec {
  /** Canonical name, e.g. `qpid.max_count`. */
  name: string;
  /** Other accepted names, e.g. `browse-only`. */
  aliases?: string[];
  /** Lenient parse to the canonical value; throws TypeError/RangeError naming the argument. */
  parse(value: unknown): unknown;
  /** A different value on re-declaration is `amqp:precondition-failed` (SOW/history shape). */
  strict?: boolean;
  /**
   * A stored queue with this argument is not served without the extension that claims it:
   * served as a plain queue, consumers would remove what it keeps (a SOW log, a browse-only
   * queue's messages). The broker refuses to start instead.
   */
  guardsData?: boolean;
}

/** A source filter an extension understands, matched by descriptor (wire.md 4). */
export interface FilterSpec {
  /** Symbolic descriptor, e.g. `apache.org:selector-filter:string`. */
  symbol: string;
  /** Numeric descriptor, if the filter has one. */
  code?: bigint;
  /** Parses the filter value; throws TidemarkError (invalid-field) with a description. */
  parse(value: unknown, ctx: { queue: Queue }): ParsedFilter;
}

export interface ParsedFilter {
  /** Message-level predicate, for filters that select messages. */
  predicate?: (env: FilterEnv) => boolean;
  /** Anything else the extension's command needs. */
  data?: unknown;
}

/** What a receiver asked for, after the filters were parsed. */
export interface ConsumerRequest {
  /** `move` (acquire) or `copy` (browse), after the queue's access mode is applied. */
  mode: 'move' | 'copy';
  /** Parsed filters by symbolic descriptor. */
  filters: Map<string, ParsedFilter>;
  /** Message predicates of all filters, ANDed. */
  predicates: Array<(env: FilterEnv) => boolean>;
  /** True when a `tidemark:` filter is present: messages carry x-opt-tm-* annotations. */
  annotate: boolean;
  linkName: string;
  containerId: string;
  /** Connection identity, for `replace` and ownership. */
  connectionId: string;
  /** Source durable = 2 with expiry-policy never. */
  durable: boolean;
  /** Authenticated user. */
  user: string;
  /**
   * Each applied filter's value as the client sent it, as text with map keys in order (two
   * attaches asking for the same filters have the same texts), by symbolic descriptor.
   */
  filterTexts?: Map<string, string>;
}

/** A filter value as text, map keys sorted, so that equal filters compare equal. */
export function filterText(v: unknown): string {
  return JSON.stringify(v, (_k, x) => {
    if (typeof x === 'bigint') return `${x}n`;
    if (x && typeof x === 'object' && !Array.isArray(x) && Object.getPrototypeOf(x) === Object.prototype) {
      return Object.fromEntries(Object.keys(x).sort().map((k) => [k, x[k]]));
    }
    return x;
  }) ?? 'null';
}

/** A queue being built: extensions contribute their part from its arguments. */
export interface QueueBuilder {
  readonly queue: Queue;
  readonly arguments: Readonly<Record<string, unknown>>;
}

export interface ManagementRequest {
  operation: string;
  type: string;
  name?: string;
  body: any;
  user: string;
}
export interface ManagementResponse { statusCode: number; statusDescription: string; body?: unknown }

/** Handles a message sent to a service address; `done` settles it (error = rejected). */
export type ServiceHandler = (msg: InboundMessage, user: string, done: (err?: import('./errors.js').TidemarkError) => void) => void;

/** What a user may do to a queue (ACL actions, docs/security.md). */
export type AuthAction = 'create' | 'publish' | 'consume' | 'browse' | 'manage';

/** Opens a consumer with the extensions registered before the caller, then the queue's structure. */
export type OpenNext = (req: ConsumerRequest, sink: DeliverySink) => Consumer;

export interface Extension {
  readonly name: string;
  /**
   * Extensions this one builds on; each must be listed before it in `config.extensions`
   * (its queue contributions come first, e.g. the SOW structure that history configures).
   */
  readonly requires?: readonly string[];
  /**
   * Authorization (lib/ext/acl): may `user` do `action` on the queue named `queue`? true =
   * allow, false = deny (`amqp:unauthorized-access`), undefined = no opinion. The first
   * extension with a decisive answer wins; when none has one, the action is allowed.
   */
  authorize?(user: string, action: AuthAction, queue: string): boolean | undefined;
  /** Queue arguments this extension claims. */
  queueArguments?: QueueArgumentSpec[];
  /** Cross-argument rules over the parsed arguments; throw an Error whose message names the argument. */
  validateArguments?(args: Readonly<Record<string, unknown>>): void;
  /** Contribute to a queue (structure, admission policies, hooks) from its arguments. */
  configureQueue?(b: QueueBuilder): void;
  /** Source filters this extension understands. */
  filters?: FilterSpec[];
  /**
   * True when the link this request opens reads the queue without consuming it, whatever
   * mode the client asked for (a replay or a command on a plain queue): the attach reply
   * then states distribution-mode `copy` (wire.md 2.1), and the ACL asks for browse.
   */
  browsesQueue?(queue: Queue, req: ConsumerRequest): boolean;
  /**
   * Claims a receiving link when its request is for this extension's command (sow, replay,
   * checkpoint...). Return undefined to pass. Throw TidemarkError to refuse the attach.
   * Extensions are asked latest-registered first, so one that builds on another (history on
   * sow, durable subscriptions on everything) sees a link before the one it builds on;
   * `next` opens it with the extensions registered before this one (to wrap what they open).
   */
  openConsumer?(queue: Queue, req: ConsumerRequest, sink: DeliverySink, next: OpenNext): Consumer | undefined;
  /** Inspect an inbound message before it is stored (TTL, publish ops). */
  onInbound?(queue: Queue, msg: InboundMessage): void;
  /** Management operations this extension adds, by operation name. */
  managementOperations?: Record<string, (req: ManagementRequest, broker: BrokerContext) => Promise<ManagementResponse>>;
  /** Statistics this extension adds to a queue's management map. */
  queueStatistics?(queue: Queue): Record<string, unknown>;
  /** Addresses this extension serves itself (e.g. `$management`): requests arrive as messages. */
  serviceAddresses?: Record<string, ServiceHandler>;
  /** Dynamic node (source/target `dynamic = true`) handler: returns the queue it made. */
  createDynamicNode?(broker: BrokerContext, props: Record<string, unknown>, onLinkClose: (fn: () => void) => void, user: string, connectionId: string): Queue;
  start?(broker: BrokerContext): void | Promise<void>;
  stop?(): void | Promise<void>;
}

export class ExtensionRegistry {
  readonly #exts: Extension[] = [];
  readonly #args = new Map<string, { ext: Extension; spec: QueueArgumentSpec }>();
  readonly #filters = new Map<string, { ext: Extension; spec: FilterSpec }>();

  register(ext: Extension): void {
    if (this.#exts.some((e) => e.name === ext.name)) throw new Error(`extension ${ext.name} registered twice`);
    for (const dep of ext.requires ?? []) {
      if (!this.has(dep)) throw new Error(`extension ${ext.name} needs ${dep}, listed before it in config.extensions`);
    }
    for (const spec of ext.queueArguments ?? []) {
      for (const n of [spec.name, ...(spec.aliases ?? [])]) {
        const other = this.#args.get(n);
        if (other) throw new Error(`queue argument ${n} claimed by ${other.ext.name} and ${ext.name}`);
        this.#args.set(n, { ext, spec });
      }
    }
    for (const spec of ext.filters ?? []) {
      for (const k of [spec.symbol, ...(spec.code !== undefined ? [spec.code.toString()] : [])]) this.#filters.set(k, { ext, spec });
    }
    this.#exts.push(ext);
  }

  get all(): readonly Extension[] { return this.#exts; }
  has(name: string): boolean { return this.#exts.some((e) => e.name === name); }
  /** True when some extension authorizes (an ACL is active). */
  get authorizes(): boolean { return this.#exts.some((e) => e.authorize); }
  /** First decisive answer of the extensions' `authorize`; allowed when none decides. */
  authorize(user: string, action: AuthAction, queue: string): boolean {
    for (const e of this.#exts) {
      const r = e.authorize?.(user, action, queue);
      if (r !== undefined) return r;
    }
    return true;
  }
  argument(name: string): QueueArgumentSpec | undefined { return this.#args.get(name)?.spec; }
  get argumentNames(): string[] { return [...this.#args.keys()]; }
  /** A filter by its symbolic descriptor, or its numeric descriptor as a decimal string. */
  filter(descriptor: string): FilterSpec | undefined { return this.#filters.get(descriptor)?.spec; }
}
