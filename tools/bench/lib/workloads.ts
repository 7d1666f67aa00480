/**
 * The workloads. Each takes a connected target and returns plain figures; none of them
 * knows whether the peer is Tidemark except through `Target.tidemark` / `declare`.
 * Counting rules: publish counts only `accepted` outcomes; consume and replay count data
 * messages only (Tidemark's group/completed markers are not counted).
 */
import { appendFile, readFile, stat } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { r, connect, openSender, openReceiver, watchLoss, tmFilters, cmdOf, scnOf, isMarker, type Conn } from './amqp.js';
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

export interface PublishResult { accepted: number; rejected: number; released: number; modified: number; seconds: number; rate: number; mb_per_s: number; max_unsettled: number; leftover_drained?: number }

/** The outcome a settled delivery carries ('none' when the broker settled it without one). */
function outcomeOf(delivery: any): 'accepted' | 'rejected' | 'released' | 'modified' | 'none' {
  const name = delivery?.remote_state?.constructor?.composite_type;
  return name === 'accepted' || name === 'rejected' || name === 'released' || name === 'modified' ? name : 'none';
}

/**
 * Publishes `load.count` durable messages over `load.keys` keys with at most `load.window`
 * unsettled. Each delivery is counted once, when the broker settles it, by the outcome it
 * carries: rhea's outcome events are not one per delivery (a `modified` outcome is also
 * dispatched as `released`, and an unsettled disposition followed by the settled one fires
 * the event twice). Only `accepted` counts towards the rate; nothing is retried.
 */
export async function publish(t: Target, queue: string, load: Load, progress: Progress, opts: { keyOffset?: number; label?: string } = {}): Promise<PublishResult> {
  const c = await connect(t.url, t.connectionOptions);
  let unwatch = () => {};
  try {
    const s = await openSender(c, senderTarget(t, queue));
    progress.begin(opts.label ?? `publish ${t.side}`, load.count);
    const res = await new Promise<PublishResult>((resolve, reject) => {
      let sent = 0; let settled = 0; let maxUnsettled = 0;
      const n = { accepted: 0, rejected: 0, released: 0, modified: 0, none: 0 };
      let start = 0;
      const stall = setInterval(() => { if (performance.now() - lastActivity > 30000) fail(new Error(`publish to ${t.url} ${queue} stalled at ${settled}/${load.count} settled`)); }, 1000);
      let lastActivity = performance.now();
      const fail = (e: Error) => { clearInterval(stall); reject(e); };
      const finish = () => {
        const seconds = (performance.now() - start) / 1000;
        clearInterval(stall);
        if (n.none) { reject(new Error(`publish to ${queue}: ${n.none} message(s) settled by the broker without an outcome`)); return; }
        resolve({ accepted: n.accepted, rejected: n.rejected, released: n.released, modified: n.modified, seconds, rate: n.accepted / seconds, mb_per_s: (n.accepted * load.size) / seconds / 1e6, max_unsettled: maxUnsettled });
      };
      const pump = () => {
        if (start === 0) start = performance.now();
        while (sent < load.count && sent - settled < load.window && s.sendable()) {
          const i = sent++;
          s.send(encodedMessage(i, (i + (opts.keyOffset ?? 0)) % load.keys, load.size), undefined, 0);
        }
        if (sent - settled > maxUnsettled) maxUnsettled = sent - settled;
      };
      const counted = new WeakSet<object>();
      s.on('settled', (ctx: any) => {
        const d = ctx.delivery;
        if (!d || counted.has(d)) return;
        counted.add(d);
        lastActivity = performance.now();
        settled++;
        n[outcomeOf(d)]++;
        progress.update(settled);
        if (settled === load.count) finish(); else pump();
      });
      s.on('sendable', pump);
      unwatch = watchLoss(c, s, `publish to ${queue}`, fail);
      pump();
    });
    progress.end();
    return res;
  } finally { unwatch(); progress.end(); await c.close(); }
}

/**
 * Empties an existing queue (one the bench does not declare, `--declare none`) before a run
 * uses it: messages an earlier round or run left there would otherwise be read back by
 * `consume` (in place of this round's, and at another depth than the other broker's) or sit
 * in front of the latency run's messages. Rounds of `window` credit in drain mode, one at a
 * time, each message accepted: a round answered by the drained flow with no message in it
 * ends the drain. A round whose credit was used up without that flow (the peer need not send
 * one then) is followed by the next after 250 ms; a peer that ignores drain altogether ends
 * it after `quietMs` without a delivery. Not timed. Resolves with the messages removed.
 */
export async function drainQueue(t: Target, queue: string, window: number, quietMs = 2000): Promise<number> {
  const c = await connect(t.url, t.connectionOptions);
  let unwatch = () => {};
  try {
    let n = 0; let inRound = 0;
    let onMessage: (ctx: any) => void = () => {}; // no credit is given before the handler below is set
    const rcv = await openReceiver(c, { address: queue }, { creditWindow: 0, autoaccept: true, onMessage: (ctx) => onMessage(ctx) });
    return await new Promise<number>((resolve, reject) => {
      let quiet: NodeJS.Timeout | undefined; let next: NodeJS.Timeout | undefined;
      const end = (e?: Error) => { clearTimeout(quiet); clearTimeout(next); unwatch(); e ? reject(e) : resolve(n); };
      const arm = () => { clearTimeout(quiet); quiet = setTimeout(() => end(), quietMs); };
      // Drain mode only with Tidemark: RabbitMQ 3.10's AMQP 1.0 plugin answers a drain with the
      // credit still set, which rhea reports on stderr ("received flow with drain set, but non
      // zero credit") and never takes as drained; other peers end by the quiet time.
      const round = () => { clearTimeout(next); next = undefined; inRound = 0; rcv.drain = t.tidemark; rcv.add_credit(window); arm(); };
      onMessage = () => {
        n++; inRound++; arm();
        if (inRound === window) next = setTimeout(round, 250);
      };
      rcv.on('receiver_drained', () => { if (inRound === 0) end(); else round(); });
      unwatch = watchLoss(c, rcv, `draining ${queue}`, end);
      round();
    });
  } finally { unwatch(); await c.close(); }
}

export interface ConsumeResult { received: number; seconds: number; rate: number; credit_window: number }

/** Reads `count` messages back with a credit window of `window`, accepting each. */
export async function consume(t: Target, queue: string, count: number, window: number, progress: Progress, label = `consume ${t.side}`): Promise<ConsumeResult> {
  const c = await connect(t.url, t.connectionOptions);
  let unwatch = () => {};
  try {
    const start = performance.now();
    let received = 0;
    progress.begin(label, count);
    const seconds = await new Promise<number>((resolve, reject) => {
      let last = performance.now();
      const fail = (e: Error) => { clearInterval(stall); reject(e); };
      const stall = setInterval(() => { if (performance.now() - last > 15000) fail(new Error(`consume from ${queue} stalled at ${received}/${count}`)); }, 500);
      const onMessage = (ctx: any) => {
        if (isMarker(ctx.message) || received >= count) return;
        last = performance.now();
        received++;
        progress.update(received);
        if (received === count) { clearInterval(stall); resolve((performance.now() - start) / 1000); }
      };
      openReceiver(c, readBackSource(t, queue), { creditWindow: window, autoaccept: true, onMessage }).then((rcv) => {
        unwatch = watchLoss(c, rcv, `consume from ${queue}`, (e) => fail(new Error(`${e.message} after ${received}/${count}`)));
      }, fail);
    });
    progress.end();
    return { received, seconds, rate: received / seconds, credit_window: window };
  } finally { unwatch(); progress.end(); await c.close(); }
}

/** Where `latency` appends one line per message (`--latency-trace`), and what to label them with. */
export interface LatencyTrace { file: string; side: string; round: number }

export const LATENCY_TRACE_HEADER = 'side,round,queue,sent_mono_ms,latency_ms';

/**
 * One CSV line per received message, its scheduled send time on CLOCK_MONOTONIC in ms (the clock of
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
 * scheduled send time; latency = receive time - scheduled send time, same process clock
 * (so time a message waited to be sent counts: no coordinated omission).
 */
export async function latency(t: Target, queue: string, load: Load, rate: number, count: number, progress: Progress, trace?: LatencyTrace): Promise<LatencyResult> {
  const cr = await connect(t.url, t.connectionOptions);
  const cs = await connect(t.url, t.connectionOptions);
  try {
    // a sender first so that the queue exists before the receiver attaches (create-on-demand)
    const s = await openSender(cs, senderTarget(t, queue));
    const src = t.declare === 'sow' ? { address: queue, filter: tmFilters({ command: 'subscribe' }) } : { address: queue };
    const rcv = await openReceiver(cr, src, { creditWindow: load.window, autoaccept: true });
    let fail: (e: Error) => void = () => {};
    const unwatch = [watchLoss(cr, rcv, `latency receiver on ${queue}`, (e) => fail(e)), watchLoss(cs, s, `latency sender on ${queue}`, (e) => fail(e))];
    const lat = new Float64Array(count);
    const sentAt = trace ? new Float64Array(count) : undefined;
    let received = 0; let sent = 0;
    progress.begin(`latency ${t.side} @${rate}/s`, count);
    await new Promise<void>((resolve, reject) => {
      let last = performance.now();
      fail = (e: Error) => { clearInterval(stall); clearInterval(tick); reject(e); };
      const stall = setInterval(() => { if (performance.now() - last > 15000) fail(new Error(`latency run on ${queue} stalled at ${received}/${count}`)); }, 500);
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
      // Pace by schedule, not by interval count: timers drift, the schedule does not. Each
      // message carries the time it was due (t0 + i/rate), not the time it left: a sender held
      // back (no credit, a late timer) would otherwise leave the wait out of the latency
      // (coordinated omission) and the messages sent late in a burst would look fast.
      const tick = setInterval(() => {
        const due = Math.min(count, Math.floor(((performance.now() - t0) / 1000) * rate) + 1);
        while (sent < due && s.sendable()) { const i = sent++; s.send(message(i, i % load.keys, load.size, t0 + (i * 1000) / rate)); }
        if (sent >= count) clearInterval(tick);
      }, 1);
    });
    for (const u of unwatch) u();
    progress.end();
    if (trace && sentAt) await writeLatencyTrace(trace, queue, sentAt.subarray(0, received), lat.subarray(0, received));
    const sorted = lat.slice(0, received).sort(); // a Float64Array: sorts by value
    return {
      sent, received, rate_target: rate,
      p50_ms: percentile(sorted, 50), p90_ms: percentile(sorted, 90), p99_ms: percentile(sorted, 99),
      p999_ms: percentile(sorted, 99.9), max_ms: sorted[sorted.length - 1],
    };
  } finally { progress.end(); await cr.close(); await cs.close(); }
}

/** Reads a Tidemark command stream until `group_end` (or `until` says stop). */
function readGroup(rcv: any, opts: { until?: (records: number, m: any) => boolean; timeoutMs?: number; onRecord?: (n: number) => void; conn?: Conn } = {}): Promise<{ records: number; groupEndScn: number; firstRecordMs: number; endMs: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    let records = 0; let first = NaN; let last = performance.now();
    const fail = (e: Error) => { clearInterval(stall); unwatch(); reject(e); };
    const stall = setInterval(() => { if (performance.now() - last > (opts.timeoutMs ?? 20000)) fail(new Error(`no group_end after ${records} records`)); }, 500);
    const unwatch = opts.conn ? watchLoss(opts.conn, rcv, `stream from ${rcv.source?.address ?? 'the queue'}`, (e) => fail(new Error(`${e.message} after ${records} records`))) : () => {};
    rcv.on('message', (ctx: any) => {
      last = performance.now();
      const m = ctx.message;
      const cmd = cmdOf(m);
      if (cmd === 'group_end') {
        clearInterval(stall);
        unwatch();
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
    const g = await readGroup(rcv, { onRecord: (n) => progress.update(n), timeoutMs, conn: c });
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
    const g = await readGroup(rcv, { onRecord: (n) => progress.update(n), conn: cr });
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
      const unwatch = watchLoss(cr, rcv, `bootstrap from ${ds.queue}`, (e) => { clearInterval(stall); reject(new Error(`${e.message} after ${records} records, ${events} events`)); });
      rcv.on('message', (ctx: any) => {
        last = performance.now();
        const cmd = cmdOf(ctx.message);
        if (cmd === 'completed') { clearInterval(stall); unwatch(); resolve({ records, events }); return; }
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
      const fail = (e: Error) => { clearInterval(stall); unwatch(); reject(e); };
      const stall = setInterval(() => { if (performance.now() - last > 15000) fail(new Error(`replay stalled at ${n}/${count}`)); }, 500);
      const unwatch = watchLoss(c, rcv, `replay from ${queue}`, (e) => fail(new Error(`${e.message} after ${n}/${count}`)));
      rcv.on('message', (ctx: any) => {
        last = performance.now();
        if (cmdOf(ctx.message) === 'completed') { clearInterval(stall); unwatch(); resolve(n); return; }
        if (isMarker(ctx.message)) return;
        n++;
        progress.update(n);
        if (n === count) { clearInterval(stall); unwatch(); resolve(n); }
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

let ticksPerSecond: number | undefined;
/** Clock ticks per second of /proc's CPU times (`getconf CLK_TCK`; 100 if that cannot be run). */
export function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try { ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()); } catch { /* below */ }
    if (!ticksPerSecond || !Number.isFinite(ticksPerSecond) || ticksPerSecond <= 0) ticksPerSecond = 100;
  }
  return ticksPerSecond;
}

/**
 * CPU time (ms) of a process from its /proc/PID/stat text: utime + stime (fields 14 and 15,
 * all its threads), in `ticks` per second. Children's times (cutime, cstime) are not added:
 * they count only children the process has waited for, and a broker's work is its own threads.
 */
export function cpuMsFromStat(stat: string, ticks: number): number {
  // Fields after the command name (which may hold spaces and parentheses): f[0] is field 3.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(f[11]) + Number(f[12])) * 1000) / ticks;
}

/** CPU time (user + system, ms) a local process has used, from /proc; undefined when not readable. */
export async function cpuMs(pid: number | undefined): Promise<number | undefined> {
  if (!pid) return undefined;
  try {
    const ms = cpuMsFromStat(await readFile(`/proc/${pid}/stat`, 'utf8'), clockTicks());
    return Number.isFinite(ms) ? ms : undefined;
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
