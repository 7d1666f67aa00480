/** What extensions may use of the broker: the engine, the nodes, the config. */
import type { BrokerConfig } from './config.js';
import type { Clock } from './clock.js';
import type { Store } from './storage/store.js';
import type { Committer } from './storage/committer.js';
import type { ExtensionRegistry } from './extensions.js';
import type { NodeRegistry } from './node-registry.js';
import type { Queue } from './queue/queue.js';

export interface BrokerContext {
  readonly config: BrokerConfig;
  readonly clock: Clock;
  readonly store: Store;
  readonly committer: Committer;
  readonly extensions: ExtensionRegistry;
  readonly nodes: NodeRegistry;
  /** The management map of a queue (wire.md 7): name, arguments, durable, statistics. */
  queueInfo(q: Queue): Record<string, unknown>;
  /** Connection and link counts, for metrics. */
  readonly stats: { connections: number; links: number };
  /** Listening AMQP URLs, amqp first; empty until the listener is up (after extensions start). */
  readonly urls: readonly string[];
  /** URL of the HTTP listener (metrics, health, console), set by the `http` extension; undefined when off. */
  httpUrl?: string;
  /**
   * The console's internal login (SASL PLAIN, a random password made at start and kept in
   * memory only), for when its AMQP client cannot connect from loopback (the listener is
   * bound to one non-loopback address): it is authenticated as `anonymous`, so the ACL and
   * the content gate treat it as the loopback ANONYMOUS connection it stands for. Undefined
   * when `auth.anonymous` is false (the console then reads no content).
   */
  readonly consoleLogin?: { username: string; password: string };
}
