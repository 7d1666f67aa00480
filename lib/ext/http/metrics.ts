/**
 * Prometheus metrics (prom-client) for one broker. Each broker gets its own Registry, so
 * several brokers in one process (tests) do not mix. Queue gauges and counters are read at
 * scrape time from the broker's state (queueInfo, Queue.counters); the group-commit
 * histograms are fed by the Committer's `onBatch` hook. The names are listed in README
 * "Metrics and console" and docs/observability.md.
 */
import { Registry, Gauge, Counter, Histogram, collectDefaultMetrics } from 'prom-client';
import type { BrokerContext } from '../../core/broker-context.js';
import type { Queue } from '../../core/queue/queue.js';

type Row = { q: Queue; info: Record<string, unknown> };

export interface BrokerMetrics {
  readonly registry: Registry;
  /** Prometheus text exposition of every metric. */
  text(): Promise<string>;
  /** Detaches the commit hook. */
  close(): void;
}

const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);

/** Queues shown in metrics and the console: every non-temporary queue, by name. */
export function visibleQueues(b: BrokerContext): Queue[] {
  return b.nodes.list().filter((q) => !q.def.temporary && !q.deleted).sort((a, c) => a.name.localeCompare(c.name));
}

export function createMetrics(b: BrokerContext): BrokerMetrics {
  const registry = new Registry();
  let rows: Row[] = [];
  const snapshot = () => { rows = visibleQueues(b).map((q) => ({ q, info: b.queueInfo(q) })); };
  const registers = [registry];

  const queueGauge = (name: string, help: string, field: string) => new Gauge({
    name, help, labelNames: ['queue'], registers,
    collect() { this.reset(); for (const r of rows) this.set({ queue: r.q.name }, num(r.info[field])); },
  });
  queueGauge('tidemark_queue_depth', 'Messages held by the queue (SOW queues: current records).', 'depth');
  queueGauge('tidemark_queue_bytes', 'Bytes of the messages (or SOW records) held by the queue.', 'bytes');
  queueGauge('tidemark_queue_consumers', 'Receiving links attached to the queue.', 'consumers');
  queueGauge('tidemark_queue_scn_head', 'Last committed SCN of the queue.', 'scn_head');
  queueGauge('tidemark_queue_scn_oldest', 'Oldest SCN still retained in the queue log (0 = empty).', 'scn_oldest');
  queueGauge('tidemark_queue_sow_records', 'Current SOW records (0 for queues without sow.key).', 'sow_records');
  queueGauge('tidemark_queue_history_versions', 'Retained history versions, tombstones included.', 'history_versions');
  new Gauge({
    name: 'tidemark_queue_info', help: 'Queue description (value 1): kind and durability as labels.', labelNames: ['queue', 'kind', 'durable'], registers,
    collect() { this.reset(); for (const r of rows) this.set({ queue: r.q.name, kind: r.q.structure.kind, durable: String(r.q.durable) }, 1); },
  });

  const queueCounter = (name: string, help: string, field: keyof Queue['counters']) => new Counter({
    name, help, labelNames: ['queue'], registers,
    // Queue.counters are monotonic for the queue's life; a re-created queue starts again at 0,
    // which Prometheus' rate() reads as a counter reset.
    collect() { this.reset(); for (const r of rows) this.inc({ queue: r.q.name }, r.q.counters[field]); },
  });
  queueCounter('tidemark_queue_published_total', 'Messages accepted into the queue (durable when settled).', 'published');
  queueCounter('tidemark_queue_delivered_total', 'Transfers sent to consumers (SOW records and events included).', 'delivered');
  queueCounter('tidemark_queue_acknowledged_total', 'Deliveries accepted by consumers (removed from the queue).', 'acknowledged');
  queueCounter('tidemark_queue_rejected_total', 'Messages refused at publish (invalid, over a limit).', 'rejected');
  queueCounter('tidemark_queue_expired_total', 'Messages removed by TTL.', 'expired');

  new Gauge({ name: 'tidemark_queues', help: 'Queues (temporary ones excluded).', registers, collect() { this.set(rows.length); } });
  new Gauge({ name: 'tidemark_connections', help: 'Open AMQP connections.', registers, collect() { this.set(b.stats.connections); } });
  new Gauge({ name: 'tidemark_links', help: 'Attached AMQP links.', registers, collect() { this.set(b.stats.links); } });
  new Gauge({ name: 'tidemark_storage_open', help: '1 while the LevelDB store is open.', registers, collect() { this.set(b.store && !b.store.closed ? 1 : 0); } });

  const batchSize = new Histogram({
    name: 'tidemark_commit_batch_size', help: 'Publishes (commit groups) per group-commit batch; batches of only quiet writes (acknowledgement deletes) are not observed.', registers,
    buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
  });
  const fsync = new Histogram({
    name: 'tidemark_commit_fsync_seconds', help: 'Latency of one synced group-commit batch write, seconds.', registers,
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
  });
  const committer = b.committer;
  const previous = committer.onBatch;
  const hook = (groups: number, ms: number) => {
    previous?.(groups, ms);
    if (groups > 0) batchSize.observe(groups);
    fsync.observe(ms / 1000);
  };
  committer.onBatch = hook;

  // Process and Node metrics, among them event-loop lag (nodejs_eventloop_lag_seconds and
  // its p50/p90/p99 from perf_hooks.monitorEventLoopDelay).
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 10 });

  return {
    registry,
    async text() { snapshot(); return registry.metrics(); },
    close() { if (committer.onBatch === hook) committer.onBatch = previous; registry.clear(); },
  };
}
