/**
 * The workloads. Each takes a connected target and returns plain figures; none of them
 * knows whether the peer is Tidemark except through `Target.tidemark` / `declare`.
 * Counting rules: publish counts only `accepted` outcomes; consume and replay count data
 * messages only (Tidemark's group/completed markers are not counted).
 */
import { appendFile, readFile, stat } from 'node:fs/promises';
import { r, connect, openSender, openReceiver, tmFilters, cmdOf, scnOf, isMarker, type Conn } from './amqp.js';
import { percentile } from './stats.js';
import type { Progress } from './progress.js';

export type Declare = 'sow' | 'plain' | 'none';

export interface Target {
  /** 'A' (--url) or 'B' (--vs) */
  side: 'A' | 'B';
  url: string;
  /** --connection-options (A) / --vs-connection-options (B): a Qpid map, as the other tools take it */
  connectionOptions?: string;
  address: string;
  declare: Declare;
  /** the peer said product=tidemark in its open frame */
  tidemark: boolean;
  product: string;
  sowProps: Record<string, string>;
}

export interface Load { count: number; size: number; keys: number; window: number }

const PAD = 'x'.repeat(65536);

/** A JSON body of exactly `size` bytes (when size allows) keyed by `id`. */
export function body(i: number, keyIndex: number, size: number): Buffer {
  const head = `{"id":"k${String(keyIndex).padStart(7, '0')}","seq":${i},"pad":"`;
  const padLen = Math.max(0, size - head.length - 2);
  return Buffer.from(head + PAD.slice(0, padLen) + '"}');
}

function message(i: number, keyIndex: number, size: number, ts?: number): any {
  const m: any = { durable: true, content_type: 'application/json', body: r.message.data_section(body(i, keyIndex, size)) };
  if (ts !== undefined) m.application_properties = { bench_ts: ts };
  return m;
}

/**
 * The header and properties sections rhea writes for `{durable: true, content_type:
 * 'application/json'}` (its list32 forms), then where the data section starts.
 */
const ENCODED_PREFIX = Buffer.from('005370d0000000050000000141005373d00000001c00000007404040404040a3106170706c69636174696f6e2f6a736f6e005375', 'hex');

/**
 * `message(i, keyIndex, size)` as the bytes rhea's `message.encode` gives for it (checked
 * byte for byte in spec/unit/tools/bench-encoded-message.spec.ts), written straight into one
 * buffer. Sent with `sender.send(bytes, undefined, 0)`, the wire is the same; the client
 * skips rhea's per-field wrapping and its garbage, which on a 2-core machine is CPU taken
 * from whichever broker is being measured (docs/performance.md "Session 17").
 */
export function encodedMessage(i: number, keyIndex: number, size: number): Buffer {
  const head = `{"id":"k${String(keyIndex).padStart(7, '0')}","seq":${i},"pad":"`;
  const padLen = Math.min(PAD.length, Math.max(0, size - head.length - 2));
  const bodyLen = head.length + padLen + 2;
  const small = bodyLen <= 255;
  const out = Buffer.allocUnsafe(ENCODED_PREFIX.length + (small ? 2 : 5) + bodyLen);
  let at = ENCODED_PREFIX.copy(out, 0);
  if (small) { out[at++] = 0xa0; out[at++] = bodyLen; } else { out[at++] = 0xb0; out.writeUInt32BE(bodyLen, at); at += 4; }
  at += out.write(head, at, 'latin1');
  out.fill(0x78, at, at + padLen); // 'x', as body() pads
  at += padLen;
  out[at++] = 0x22; out[at] = 0x7d; // '"}'
  return out;
}

/** The target terminus of a sender: create-on-demand with SOW properties when we declare. */
export function senderTarget(t: Target, queue: string): Record<string, unknown> {
  if (t.declare === 'none') return { address: queue };
  return { address: queue, capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: t.declare === 'sow' ? { ...t.sowProps } : {} };
}

/**
 * The source of a consumer that reads the queue's messages back: on a Tidemark SOW queue a
 * `subscribe` from bookmark 0 (a replay of the log, which is how messages are read back from
 * it); elsewhere a plain consuming link.
 */
function readBackSource(t: Target, queue: string): Record<string, unknown> {
  if (t.declare === 'sow') return { address: queue, filter: tmFilters({ command: 'subscribe', bookmark: '0' }) };
  return { address: queue };
}

export interface PublishResult { accepted: number; rejected: number; released: number; modified: number; seconds: number; rate: number; mb_per_s: number }

/** Publishes `load.count` durable messages over `load.keys` keys with at most `load.window` unsettled. */
export async function publish(t: Target, queue: string, load: Load, progress: Progress, opts: { keyOffset?: number; label?: string } = {}): Promise<PublishResult> {
  const c = await connect(t.url, t.connectionOptions);
  try {
    const s = await openSender(c, senderTarget(t, queue));
    progress.begin(opts.label ?? `publish ${t.side}`, load.count);
    const res = await new Promise<PublishResult>((resolve, reject) => {
      let sent = 0; let settled = 0; let accepted = 0; let rejected = 0; let released = 0; let modified = 0;
      let start = 0;
      const stall = setInterval(() => { if (performance.now() - lastActivity > 30000) fail(new Error(`publish to ${t.url} ${queue} stalled at ${settled}/${load.count} settled`)); }, 1000);
      let lastActivity = performance.now();
      const fail = (e: Error) => { clearInterval(stall); reject(e); };
      const finish = () => {
        const seconds = (performance.now() - start) / 1000;
        clearInterval(stall);
        resolve({ accepted, rejected, released, modified, seconds, rate: accepted / seconds, mb_per_s: (accepted * load.size) / seconds / 1e6 });
      };
      const pump = () => {
        if (start === 0) start = performance.now();
        while (sent < load.count && sent - settled < load.window && s.sendable()) {
          const i = sent++;
          s.send(encodedMessage(i, (i + (opts.keyOffset ?? 0)) % load.keys, load.size), undefined, 0);
        }
      };
      const outcome = (kind: 'a' | 'j' | 'r' | 'm') => () => {
        lastActivity = performance.now();
        settled++;
        if (kind === 'a') accepted++; else if (kind === 'j') rejected++; else if (kind === 'r') released++; else modified++;
        progress.update(settled);
        if (settled === load.count) finish(); else pump();
      };
      s.on('accepted', outcome('a'));
      s.on('rejected', outcome('j'));
      s.on('released', outcome('r'));
      s.on('modified', outcome('m'));
      s.on('sendable', pump);
      s.on('sender_close', () => fail(new Error(`sender detached: ${s.error ? JSON.stringify(s.error) : ''}`)));
      c.connection.on('disconnected', () => fail(new Error('disconnected during publish')));
      pump();
    });
    progress.end();
    return res;
  } finally { progress.end(); await c.close(); }
}

export interface ConsumeResult { received: number; seconds: number; rate: number; credit_window: number }

/** Reads `count` messages back with a credit window of `window`, accepting each. */
export async function consume(t: Target, queue: string, count: number, window: number, progress: Progress, label = `consume ${t.side}`): Promise<ConsumeResult> {
  const c = await connect(t.url, t.connectionOptions);
  try {
    const start = performance.now();
    let received = 0;
    progress.begin(label, count);
    const rcv = await openReceiver(c, readBackSource(t, queue), { creditWindow: window, autoaccept: true });
    const seconds = await new Promise<number>((resolve, reject) => {
      let last = performance.now();
      const stall = setInterval(() => { if (performance.now() - last > 15000) { clearInterval(stall); reject(new Error(`consume from ${queue} stalled at ${received}/${count}`)); } }, 500);
      rcv.on('message', (ctx: any) => {
        if (isMarker(ctx.message)) return;
        last = performance.now();
        received++;
        progress.update(received);
        if (received === count) { clearInterval(stall); resolve((performance.now() - start) / 1000); }
      });
    });
    progress.end();
    return { received, seconds, rate: received / seconds, credit_window: window };
  } finally { progress.end(); await c.close(); }
}

/** Where `latency` appends one line per message (`--latency-trace`), and what to label them with. */
export interface LatencyTrace { file: string; side: string; round: number }

export const LATENCY_TRACE_HEADER = 'side,round,queue,sent_mono_ms,latency_ms';

/**
 * One CSV line per received message, its send time on CLOCK_MONOTONIC in ms (the clock of
 * `perf record -k mono`), so a slow message can be put next to a scheduler trace of the
 * same seconds (docs/performance.md, "Where the latency tail comes from").
 */
async function writeLatencyTrace(trace: LatencyTrace, queue: string, sentAt: Float64Array, lat: Float64Array): Promise<void> {
  // performance.now() and process.hrtime() both count on CLOCK_MONOTONIC: their offset is fixed.
  const monoOffset = Number(process.hrtime.bigint()) / 1e6 - performance.now();
  let text = '';
  try { await stat(trace.file); } catch { text = `# tidemark-bench latency trace, client pid ${process.pid}\n${LATENCY_TRACE_HEADER}\n`; }
  for (let i = 0; i < lat.length; i++) text += `${trace.side},${trace.round},${queue},${(sentAt[i] + monoOffset).toFixed(3)},${lat[i].toFixed(3)}\n`;
  await appendFile(trace.file, text);
}

export interface LatencyResult { sent: number; received: number; rate_target: number; p50_ms: number; p90_ms: number; p99_ms: number; p999_ms: number; max_ms: number }

/**
 * End-to-end latency at a fixed rate: a consumer attached first (on a SOW queue a live
 * `subscribe`), then `count` durable messages paced at `rate` msg/s, each carrying its send
 * time; latency = receive time - send time, same process clock.
 */
export async function latency(t: Target, queue: string, load: Load, rate: number, count: number, progress: Progress, trace?: LatencyTrace): Promise<LatencyResult> {
  const cr = await connect(t.url, t.connectionOptions);
  const cs = await connect(t.url, t.connectionOptions);
  try {
    // a sender first so that the queue exists before the receiver attaches (create-on-demand)
    const s = await openSender(cs, senderTarget(t, queue));
    const src = t.declare === 'sow' ? { address: queue, filter: tmFilters({ command: 'subscribe' }) } : { address: queue };
    const rcv = await openReceiver(cr, src, { creditWindow: load.window, autoaccept: true });
    const lat = new Float64Array(count);
    const sentAt = trace ? new Float64Array(count) : undefined;
    let received = 0; let sent = 0;
    progress.begin(`latency ${t.side} @${rate}/s`, count);
    await new Promise<void>((resolve, reject) => {
      let last = performance.now();
      const stall = setInterval(() => { if (performance.now() - last > 15000) { clearInterval(stall); clearInterval(tick); reject(new Error(`latency run on ${queue} stalled at ${received}/${count}`)); } }, 500);
      rcv.on('message', (ctx: any) => {
        if (isMarker(ctx.message)) return;
        const ts = ctx.message.application_properties?.bench_ts;
        if (typeof ts !== 'number') return;
        last = performance.now();
        if (sentAt) sentAt[received] = ts;
        lat[received++] = last - ts;
        progress.update(received);
        if (received === count) { clearInterval(stall); resolve(); }
      });
      const t0 = performance.now();
      // pace by schedule, not by interval count: timers drift, the schedule does not
      const tick = setInterval(() => {
        const due = Math.min(count, Math.floor(((performance.now() - t0) / 1000) * rate) + 1);
        while (sent < due && s.sendable()) { const i = sent++; s.send(message(i, i % load.keys, load.size, performance.now())); }
        if (sent >= count) clearInterval(tick);
      }, 1);
    });
    progress.end();
    if (trace && sentAt) await writeLatencyTrace(trace, queue, sentAt.subarray(0, received), lat.subarray(0, received));
    const sorted = lat.slice(0, received).sort();
    return {
      sent, received, rate_target: rate,
      p50_ms: percentile(sorted, 50), p90_ms: percentile(sorted, 90), p99_ms: percentile(sorted, 99),
      p999_ms: percentile(sorted, 99.9), max_ms: sorted[sorted.length - 1],
    };
  } finally { progress.end(); await cr.close(); await cs.close(); }
}

/** Reads a Tidemark command stream until `group_end` (or `until` says stop). */
function readGroup(rcv: any, opts: { until?: (records: number, m: any) => boolean; timeoutMs?: number; onRecord?: (n: number) => void } = {}): Promise<{ records: number; groupEndScn: number; firstRecordMs: number; endMs: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    let records = 0; let first = NaN; let last = performance.now();
    const stall = setInterval(() => { if (performance.now() - last > (opts.timeoutMs ?? 20000)) { clearInterval(stall); reject(new Error(`no group_end after ${records} records`)); } }, 500);
    rcv.on('message', (ctx: any) => {
      last = performance.now();
      const m = ctx.message;
      const cmd = cmdOf(m);
      if (cmd === 'group_end') {
        clearInterval(stall);
        resolve({ records, groupEndScn: scnOf(m), firstRecordMs: first, endMs: performance.now() - t0 });
        return;
      }
      if (isMarker(m)) return;
      if (Number.isNaN(first)) first = performance.now() - t0;
      records++;
      opts.onRecord?.(records);
    });
  });
}

export interface SowDataset { queue: string; keys: number; versions: number; events: number; load_seconds: number; load_rate: number }

/** Loads keys × versions events into a fresh SOW queue (event i updates key i mod keys). */
export async function loadSowDataset(t: Target, queue: string, keys: number, versions: number, size: number, window: number, progress: Progress): Promise<SowDataset> {
  const res = await publish(t, queue, { count: keys * versions, size, keys, window }, progress, { label: `load sow ${keys}x${versions} ${t.side}` });
  if (res.accepted !== keys * versions) throw new Error(`SOW dataset load: only ${res.accepted}/${keys * versions} accepted`);
  return { queue, keys, versions, events: res.accepted, load_seconds: res.seconds, load_rate: res.rate };
}

export interface QueryResult { records: number; seconds: number; rate: number; group_end_scn: number; first_record_ms: number }

/** `sow` command (optionally at a bookmark): records until group_end. Pre-settled by default: a query browses, so there is nothing to acknowledge. */
export async function sowQuery(t: Target, queue: string, window: number, progress: Progress, bookmark?: string, expect?: number, timeoutMs = 120000, presettled = true): Promise<QueryResult> {
  const c = await connect(t.url, t.connectionOptions);
  try {
    progress.begin(bookmark ? `historical ${t.side}` : `sow query ${t.side}`, expect ?? 1);
    const t0 = performance.now();
    const rcv = c.connection.open_receiver({ source: { address: queue, filter: tmFilters({ command: 'sow', ...(bookmark ? { bookmark } : {}) }) }, credit_window: window, autoaccept: true, ...(presettled ? { snd_settle_mode: 1 } : {}) });
    const g = await readGroup(rcv, { onRecord: (n) => progress.update(n), timeoutMs });
    const seconds = (performance.now() - t0) / 1000;
    progress.end();
    return { records: g.records, seconds, rate: g.records / seconds, group_end_scn: g.groupEndScn, first_record_ms: g.firstRecordMs };
  } finally { progress.end(); await c.close(); }
}

export interface SasResult { snapshot_records: number; attach_to_group_end_ms: number; attach_to_first_record_ms: number; group_end_to_first_live_ms: number; snapshot_rate: number; load_rate_target: number; load_published: number }

/** Publishes updates of the dataset's keys at `loadRate` msg/s until its timer is cleared. */
function startLoad(s: any, ds: SowDataset, size: number, loadRate: number): { timer: NodeJS.Timeout; published(): number } {
  let published = 0;
  const t0 = performance.now();
  const timer = setInterval(() => {
    const due = Math.floor(((performance.now() - t0) / 1000) * loadRate);
    while (published < due && s.sendable()) { const i = published++; s.send(encodedMessage(ds.events + i, i % ds.keys, size), undefined, 0); }
  }, 2);
  return { timer, published: () => published };
}

/**
 * sow_and_subscribe while a publisher updates the same queue at `loadRate` msg/s: the time
 * from attach to the end of the snapshot (group_end), and from there to the first live event.
 */
export async function sowAndSubscribe(t: Target, ds: SowDataset, size: number, window: number, loadRate: number, progress: Progress): Promise<SasResult> {
  const cp = await connect(t.url, t.connectionOptions);
  const cr = await connect(t.url, t.connectionOptions);
  let tick: NodeJS.Timeout | undefined;
  try {
    const load = startLoad(await openSender(cp, senderTarget(t, ds.queue)), ds, size, loadRate);
    tick = load.timer;
    await new Promise((res) => setTimeout(res, 1000)); // under load before attaching
    progress.begin(`sow_and_subscribe ${t.side}`, ds.keys);
    const t0 = performance.now();
    const rcv = cr.connection.open_receiver({ source: { address: ds.queue, filter: tmFilters({ command: 'sow_and_subscribe' }) }, credit_window: window, autoaccept: true });
    const g = await readGroup(rcv, { onRecord: (n) => progress.update(n) });
    const tEnd = performance.now();
    const firstLive = await new Promise<number>((resolve) => {
      const timer = setTimeout(() => resolve(NaN), 5000);
      rcv.on('message', (ctx: any) => { if (!isMarker(ctx.message)) { clearTimeout(timer); resolve(performance.now() - tEnd); } });
    });
    progress.end();
    return {
      snapshot_records: g.records, attach_to_group_end_ms: tEnd - t0, attach_to_first_record_ms: g.firstRecordMs,
      group_end_to_first_live_ms: firstLive, snapshot_rate: g.records / ((tEnd - t0) / 1000), load_rate_target: loadRate, load_published: load.published(),
    };
  } finally { if (tick) clearInterval(tick); progress.end(); await cr.close(); await cp.close(); }
}

export interface BootstrapResult { snapshot_records: number; catchup_events: number; seconds: number; load_rate_target: number; load_published: number; paused_seconds?: number }

/**
 * Bootstrap of a consumer that fell off the log (semantics.md 8): a `tidemark:checkpoint:map`
 * with windowScn 0 on the SOW dataset; measures attach to the `completed` marker (snapshot +
 * catch-up done, consumer online).
 *
 * With `catchup` = 0, a publisher keeps writing at `loadRate` meanwhile, so the catch-up holds
 * whatever arrived during the snapshot. With `catchup` = N, the catch-up holds exactly N
 * events: the consumer takes the group_begin marker (sent once the snapshot point is fixed),
 * N events are published and accepted while it holds no more credit, then it reads on at full
 * speed; the pause is reported and not counted (`seconds` is the consumer's streaming time).
 */
export async function bootstrap(t: Target, ds: SowDataset, size: number, window: number, loadRate: number, progress: Progress, catchup = 0): Promise<BootstrapResult> {
  const cp = await connect(t.url, t.connectionOptions);
  const cr = await connect(t.url, t.connectionOptions);
  let tick: NodeJS.Timeout | undefined;
  try {
    const load = catchup > 0 ? undefined : startLoad(await openSender(cp, senderTarget(t, ds.queue)), ds, size, loadRate);
    tick = load?.timer;
    progress.begin(`bootstrap ${t.side}`, ds.keys + catchup);
    const t0 = performance.now();
    let paused = 0;
    const checkpoint = { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 0, prevScn: 0, windowOffset: -1 };
    const rcv = cr.connection.open_receiver({ source: { address: ds.queue, filter: tmFilters({ checkpoint }) }, credit_window: 0, autoaccept: true });
    // Manual credit: one message (group_begin) first when the catch-up is prepared, then a window topped up at half.
    const topUp = () => { if (rcv.credit < window / 2) rcv.add_credit(window - rcv.credit); };
    rcv.once('receiver_open', () => (catchup > 0 ? rcv.add_credit(1) : topUp()));
    const res = await new Promise<{ records: number; events: number }>((resolve, reject) => {
      let records = 0, events = 0, last = performance.now(), preparing = false;
      const stall = setInterval(() => { if (!preparing && performance.now() - last > 15000) { clearInterval(stall); reject(new Error(`bootstrap stalled after ${records} records, ${events} events`)); } }, 500);
      stall.unref?.();
      rcv.on('message', (ctx: any) => {
        last = performance.now();
        const cmd = cmdOf(ctx.message);
        if (cmd === 'completed') { clearInterval(stall); resolve({ records, events }); return; }
        if (cmd === 'sow') { records++; progress.update(records + events); } else if (cmd === 'publish' || cmd === 'delete') { events++; progress.update(records + events); }
        // group_begin comes once the snapshot point is fixed (its checkpoint names it).
        if (catchup > 0 && cmd === 'group_begin' && !preparing && paused === 0) {
          preparing = true;
          const p0 = performance.now();
          const quiet: Progress = { begin() {}, update() {}, end() {} } as unknown as Progress;
          publish(t, ds.queue, { count: catchup, size, keys: ds.keys, window }, quiet, { keyOffset: 0 }).then((r) => {
            if (r.accepted !== catchup) throw new Error(`catch-up load: only ${r.accepted}/${catchup} accepted`);
            paused = (performance.now() - p0) / 1000;
            preparing = false;
            last = performance.now();
            topUp();
          }).catch((e) => { clearInterval(stall); reject(e); });
          return;
        }
        if (!preparing) topUp();
      });
    });
    const seconds = (performance.now() - t0) / 1000 - paused;
    progress.end();
    return { snapshot_records: res.records, catchup_events: res.events, seconds, load_rate_target: catchup > 0 ? 0 : loadRate, load_published: catchup > 0 ? catchup : load!.published(), ...(catchup > 0 ? { paused_seconds: paused } : {}) };
  } finally { if (tick) clearInterval(tick); progress.end(); await cr.close(); await cp.close(); }
}

export interface ReplayResult { events: number; seconds: number; rate: number; from_scn: number }

/** `subscribe` from bookmark SCN `from`: replays `count` logged events. */
export async function replay(t: Target, queue: string, fromScn: number, count: number, window: number, progress: Progress): Promise<ReplayResult> {
  const c = await connect(t.url, t.connectionOptions);
  try {
    progress.begin(`replay ${t.side}`, count);
    const t0 = performance.now();
    const rcv = c.connection.open_receiver({ source: { address: queue, filter: tmFilters({ command: 'subscribe', bookmark: String(fromScn) }) }, credit_window: window, autoaccept: true });
    const events = await new Promise<number>((resolve, reject) => {
      let n = 0; let last = performance.now();
      const stall = setInterval(() => { if (performance.now() - last > 15000) { clearInterval(stall); reject(new Error(`replay stalled at ${n}/${count}`)); } }, 500);
      rcv.on('message', (ctx: any) => {
        last = performance.now();
        if (cmdOf(ctx.message) === 'completed') { clearInterval(stall); resolve(n); return; }
        if (isMarker(ctx.message)) return;
        n++;
        progress.update(n);
        if (n === count) { clearInterval(stall); resolve(n); }
      });
    });
    const seconds = (performance.now() - t0) / 1000;
    progress.end();
    return { events, seconds, rate: events / seconds, from_scn: fromScn };
  } finally { progress.end(); await c.close(); }
}

export interface MemoryResult {
  from_events: number; to_events: number; rss_from_kb: number; rss_to_kb: number; growth: number;
  /** The two readings split: anonymous memory (heap, buffers, LevelDB's caches) and file pages mapped (LevelDB reads its tables through mmap). */
  anon_from_kb?: number; anon_to_kb?: number; file_from_kb?: number; file_to_kb?: number;
  /** Seconds waited for the broker to go quiet before each reading. */
  settled_s: [number, number];
}

/**
 * Broker memory as retained events grow: publishes `from` events into a fresh queue, reads
 * the broker's RSS once it is quiet, publishes up to `to`, reads it again. On Tidemark a
 * SOW queue keeps every event (log + SOW + history G = 0), so the events stay retained.
 * "Quiet" (settleBroker: two seconds in a row under 10 % of a core, at most 60 s) so each
 * reading is the broker at rest with those events, not a moment inside the compactions a
 * load leaves behind (LevelDB maps the tables it merges, which lifts RSS for those seconds).
 * Needs the broker's PID on this machine.
 */
export async function memory(t: Target, queue: string, load: Load, from: number, to: number, pid: number | undefined, progress: Progress): Promise<MemoryResult> {
  if (!pid) throw new Error(`memory needs the PID of broker ${t.side} on this machine (--broker-pid / --vs-broker-pid)`);
  await publish(t, queue, { ...load, count: from }, progress, { label: `memory ${t.side}: first ${from}` });
  const s1 = await settleBroker(pid, 60);
  const a = await memoryKb(pid);
  await publish(t, queue, { ...load, count: to - from }, progress, { keyOffset: from, label: `memory ${t.side}: up to ${to}` });
  const s2 = await settleBroker(pid, 60);
  const b = await memoryKb(pid);
  if (a === undefined || b === undefined) throw new Error(`cannot read /proc/${pid}/status`);
  return {
    from_events: from, to_events: to, rss_from_kb: a.rss, rss_to_kb: b.rss, growth: b.rss / a.rss,
    anon_from_kb: a.anon, anon_to_kb: b.anon, file_from_kb: a.file, file_to_kb: b.file,
    settled_s: [Math.round(s1 * 10) / 10, Math.round(s2 * 10) / 10],
  };
}

/** CPU time (user + system, ms) a local process has used, from /proc; undefined when not readable. */
export async function cpuMs(pid: number | undefined): Promise<number | undefined> {
  if (!pid) return undefined;
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces), in USER_HZ = 100 ticks/s.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) * 10;
  } catch { return undefined; }
}

/**
 * Waits up to `maxSeconds` for the broker to go quiet after a large load (LevelDB compacts
 * hundreds of MB for a while, and a query timed meanwhile measures the compaction too): with
 * its PID, until it used under 10% of a core over one second; without, the whole time.
 * Resolves with the seconds waited.
 */
export async function settleBroker(pid: number | undefined, maxSeconds: number): Promise<number> {
  const t0 = performance.now();
  const elapsed = () => (performance.now() - t0) / 1000;
  let before = await cpuMs(pid);
  let quiet = 0;
  while (elapsed() < maxSeconds) {
    await new Promise((res) => setTimeout(res, 1000));
    const now = await cpuMs(pid);
    // Two quiet seconds in a row: work a broker defers until it has been idle a moment
    // (LevelDB's compactions, Tidemark's idle compaction after 1 s) has then started and ended.
    quiet = before !== undefined && now !== undefined && now - before < 100 ? quiet + 1 : 0;
    if (quiet >= 2) break;
    before = now;
  }
  return elapsed();
}

/**
 * Runs a workload and adds the broker's CPU per message (`broker_cpu_us_per_msg`, over the
 * result's `countKey`) when the broker's PID is known.
 */
export async function withBrokerCpu<T extends object>(pid: number | undefined, countKey: keyof T & string, run: () => Promise<T>): Promise<T & { broker_cpu_us_per_msg?: number }> {
  const before = await cpuMs(pid);
  const res = await run();
  const after = await cpuMs(pid);
  const n = Number((res as Record<string, unknown>)[countKey]);
  if (before === undefined || after === undefined || !(n > 0)) return res;
  return { ...res, broker_cpu_us_per_msg: ((after - before) * 1000) / n };
}

/** Resident memory of a local process (kB), from /proc; undefined when not readable. */
export async function rssKb(pid: number | undefined): Promise<number | undefined> {
  return (await memoryKb(pid))?.rss;
}

/** VmRSS and its anonymous and file-backed parts (kB), from /proc/PID/status. */
export async function memoryKb(pid: number | undefined): Promise<{ rss: number; anon?: number; file?: number } | undefined> {
  if (!pid) return undefined;
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const field = (name: string) => { const m = new RegExp(`${name}:\\s+(\\d+)`).exec(status); return m ? Number(m[1]) : undefined; };
    const rss = field('VmRSS');
    return rss === undefined ? undefined : { rss, anon: field('RssAnon'), file: field('RssFile') };
  } catch { return undefined; }
}

export async function probe(url: string): Promise<Conn> { return connect(url); }
