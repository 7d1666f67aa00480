/**
 * tidemark-bench: load generator and side-by-side benchmark (issue 9, tools.md).
 *
 *   tidemark-bench --broker amqp://127.0.0.1:5672 --address bench \
 *     --vs amqp://guest:guest@127.0.0.1:5682 --vs-address /amq/queue/bench-quorum \
 *     -n 100000 --size 200 --keys 1000 --window 1000 --rounds 3 [--json]
 *
 * Workloads: publish, consume, latency, sow (sow query), historical, sow-and-subscribe,
 * replay, bootstrap, memory (RSS at --memory-from and --memory-to retained events; needs
 * --broker-pid; not in the default list). With --vs each round runs the workloads on both brokers, alternating
 * which goes first, and reports A/B ratios per round and their median. Workloads that need
 * Tidemark features run only where the peer says product=tidemark and the queue is a SOW
 * queue; elsewhere they are reported as skipped with the reason.
 */
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { main, ToolError, usageError, commonOptions, singleValues } from '../common/cli.js';
import { parseBrokerUrl, parseConnectionOptions } from '../common/connection.js';
import { connect, setCorkWrites } from './lib/amqp.js';
import { tuneRhea } from '../../lib/core/protocol/rhea-tuning.js';
import { Progress, formatRate } from './lib/progress.js';
import { median, round } from './lib/stats.js';
import * as W from './lib/workloads.js';
import { withRecordScan } from './lib/record-scan.js';

const ALL = ['publish', 'consume', 'latency', 'sow', 'historical', 'sow-and-subscribe', 'replay', 'bootstrap', 'memory'] as const;
/** What runs without --workloads: everything but `memory` (a million-message run). */
const DEFAULT_WORKLOADS = ALL.filter((w) => w !== 'memory');
type Workload = (typeof ALL)[number];

/** The figure of each workload that ratios compare, and which way is better. */
const METRIC: Record<Workload, { key: string; unit: string; better: 'higher' | 'lower' }> = {
  publish: { key: 'rate', unit: 'msg/s', better: 'higher' },
  consume: { key: 'rate', unit: 'msg/s', better: 'higher' },
  latency: { key: 'p99_ms', unit: 'ms p99', better: 'lower' },
  sow: { key: 'rate', unit: 'records/s', better: 'higher' },
  historical: { key: 'seconds', unit: 's', better: 'lower' },
  'sow-and-subscribe': { key: 'attach_to_group_end_ms', unit: 'ms to group_end', better: 'lower' },
  replay: { key: 'rate', unit: 'events/s', better: 'higher' },
  bootstrap: { key: 'seconds', unit: 's', better: 'lower' },
  memory: { key: 'growth', unit: 'RSS ratio', better: 'lower' },
};

const SOW_WORKLOADS: Workload[] = ['sow', 'historical', 'sow-and-subscribe', 'replay', 'bootstrap'];

type Result = Record<string, unknown> & { skipped?: string; error?: string };

main(async () => {
  const argv = await yargs(hideBin(process.argv))
    .scriptName('tidemark-bench')
    .usage('$0 [options]\n\nBenchmarks an AMQP 1.0 broker, optionally side by side with a second one (--vs).')
    .option('broker', { ...commonOptions.broker, alias: ['b', 'url'], describe: 'broker A: amqp[s]://[user:pass@]host[:port] or user/pass@host:port (--url is an alias)' })
    .option('connection-options', { ...commonOptions['connection-options'], describe: 'broker A\'s connection options, a Qpid map as the other tools take it: {username, password, sasl_mechanisms, container_id, idle_timeout, transport}' })
    .option('address', { alias: 'a', type: 'string', default: 'bench', describe: 'queue address on A (a per-round suffix is added when A declares the queue)' })
    .option('declare', { type: 'string', choices: ['auto', 'sow', 'plain', 'none'], default: 'auto', describe: 'how A gets its queue: sow/plain = create-on-demand (fresh queue per round); none = use the address as is; auto = sow on Tidemark, none elsewhere' })
    .option('vs', { type: 'string', describe: 'broker B URL: run the same workload there too, in alternating rounds' })
    .option('vs-connection-options', { type: 'string', requiresArg: true, describe: 'as --connection-options, for broker B' })
    .option('vs-address', { type: 'string', describe: 'queue address on B (default: --address); RabbitMQ 3.x: /amq/queue/NAME' })
    .option('vs-declare', { type: 'string', choices: ['auto', 'sow', 'plain', 'none'], default: 'auto', describe: 'as --declare, for B' })
    .option('count', { alias: 'n', type: 'number', default: 10000, describe: 'messages per publish/consume run' })
    .option('size', { alias: 's', type: 'number', default: 200, describe: 'message body bytes (JSON with an id key)' })
    .option('keys', { alias: 'k', type: 'number', default: 1000, describe: 'distinct keys the messages cycle over' })
    .option('window', { alias: 'w', type: 'number', default: 1000, describe: 'unsettled messages in flight (publish) and credit window (consume)' })
    .option('rounds', { alias: 'r', type: 'number', describe: 'rounds (default 3 with --vs, else 1)' })
    .option('workloads', { type: 'string', default: DEFAULT_WORKLOADS.join(','), describe: `comma list of: ${ALL.join(', ')} (memory is not in the default)` })
    .option('memory-from', { type: 'number', default: 100000, describe: 'memory: retained events at the first RSS reading' })
    .option('memory-to', { type: 'number', default: 1000000, describe: 'memory: retained events at the second RSS reading' })
    .option('latency-rate', { type: 'number', default: 1000, describe: 'latency run: messages per second' })
    .option('latency-count', { type: 'number', default: 5000, describe: 'latency run: messages sent' })
    .option('latency-trace', { type: 'string', describe: 'latency run: append one CSV line per message to this file (side, round, queue, send time on CLOCK_MONOTONIC in ms, latency in ms), to set slow messages beside a `perf record -k mono` scheduler trace' })
    .option('sow-keys', { type: 'number', default: 10000, describe: 'SOW workloads: keys in the dataset' })
    .option('sow-versions', { type: 'number', default: 10, describe: 'SOW workloads: versions per key (events = keys x versions)' })
    .option('load-rate', { type: 'number', default: 2000, describe: 'sow-and-subscribe, bootstrap: background publish rate (msg/s)' })
    .option('settle', { type: 'number', default: 0, describe: 'SOW workloads: seconds to let the broker settle after loading the dataset (LevelDB compaction), at most; with --broker-pid it ends once the broker is idle' })
    .option('settle-sides', { type: 'number', default: 60, describe: 'with --broker-pid / --vs-broker-pid: before each side\'s run, wait up to this many seconds until both brokers are idle, so one broker\'s deferred work (compaction after a run) does not fall into the other\'s run; 0 = do not wait' })
    .option('bootstrap-catchup', { type: 'number', default: 0, describe: 'bootstrap: exactly this many catch-up events, published while the consumer holds its snapshot point (instead of --load-rate during it); the pause is not timed' })
    .option('replay-count', { type: 'number', describe: 'replay: events replayed (default --count, at most the dataset)' })
    .option('query-timeout', { type: 'number', default: 120, describe: 'sow/historical query: seconds without any delivery before giving up' })
    .option('sow-key', { type: 'string', default: '/id', describe: 'sow.key of declared SOW queues' })
    .option('history-window', { type: 'string', default: '1d', describe: 'sow.history.window of declared SOW queues' })
    .option('history-granularity', { type: 'string', default: '0s', describe: 'sow.history.granularity of declared SOW queues' })
    .option('broker-pid', { type: 'number', describe: 'PID of broker A on this machine: report its RSS after each round and its CPU per message for publish and consume' })
    .option('vs-broker-pid', { type: 'number', describe: 'PID of broker B on this machine (RSS, CPU per message)' })
    .option('client', { type: 'string', choices: ['tuned', 'plain'], default: 'tuned', describe: "the bench's own rhea: tuned = with the broker's run-time tuning (lib/core/protocol/rhea-tuning.ts: quiet debug logging, pooled encode buffers, hand-coded transfer frames; byte-identical on the wire) and writes corked per tick, for both brokers alike; plain = rhea as shipped" })
    .option('record-decode', { type: 'string', choices: ['scan', 'full'], default: 'scan', describe: "Tidemark-only record streams (sow, historical, sow-and-subscribe, replay, bootstrap): scan = read only the two annotations the bench counts by (tools/bench/lib/record-scan.ts), so the client's decoding does not set the records/s; full = the client's whole-message decode (rhea's, tuned or not per --client), what a rhea consumer pays" })
    .option('json', { type: 'boolean', default: false, describe: 'print the result as JSON on stdout (the table goes to stderr)' })
    .option('progress', { type: 'boolean', describe: 'progress bar on stderr (default: when stderr is a terminal)' })
    .middleware(singleValues())
    .strict()
    .help()
    .fail((msg, err, y) => { throw usageError(msg, err, y); })
    .parseAsync();

  const workloads = String(argv.workloads).split(',').map((s) => s.trim()).filter(Boolean) as Workload[];
  for (const w of workloads) if (!(ALL as readonly string[]).includes(w)) throw new ToolError(`--workloads: unknown workload '${w}' (known: ${ALL.join(', ')})`);
  for (const [k, v] of Object.entries({ count: argv.count, size: argv.size, keys: argv.keys, window: argv.window, 'latency-rate': argv['latency-rate'], 'latency-count': argv['latency-count'], 'sow-keys': argv['sow-keys'], 'sow-versions': argv['sow-versions'] })) {
    if (!Number.isInteger(v) || (v as number) < 1) throw new ToolError(`--${k} expects an integer >= 1, got '${typed(k, v)}'`);
  }
  // bad URLs and connection options are errors before anything runs
  for (const [flag, url] of [['--broker', argv.broker], ['--vs', argv.vs]] as const) {
    if (url === undefined) continue;
    try { parseBrokerUrl(url); } catch (e) { throw new ToolError(`${flag}: ${(e as Error).message}`); }
  }
  parseConnectionOptions(argv['connection-options']);
  try { parseConnectionOptions(argv['vs-connection-options']); } catch (e) { throw new ToolError(`--vs-connection-options: ${(e as Error).message.replace(/^--connection-options: /, '')}`); }
  const rounds = argv.rounds ?? (argv.vs ? 3 : 1);
  // Less client CPU leaves more of a small machine to the brokers being compared.
  if (argv.client === 'tuned') { tuneRhea(); setCorkWrites(true); }
  const progress = new Progress(argv.progress ?? Boolean(process.stderr.isTTY));
  const sowProps = { 'sow.key': argv['sow-key'], 'sow.history.window': argv['history-window'], 'sow.history.granularity': argv['history-granularity'] };
  const runId = Date.now().toString(36);
  const load: W.Load = { count: argv.count, size: argv.size, keys: argv.keys, window: argv.window };

  async function makeTarget(side: 'A' | 'B', url: string, connectionOptions: string | undefined, address: string, declare: string): Promise<W.Target> {
    let c;
    try { c = await connect(url, connectionOptions); } catch (e) { throw new ToolError(`broker ${side}: ${(e as Error).message}`); }
    const product = c.product;
    await c.close();
    const tidemark = product.toLowerCase() === 'tidemark';
    const d = (declare === 'auto' ? (tidemark ? 'sow' : 'none') : declare) as W.Declare;
    return { side, url, connectionOptions, address, declare: d, tidemark, product: product || '(not announced)', sowProps };
  }
  const targets: W.Target[] = [await makeTarget('A', argv.broker, argv['connection-options'], argv.address, argv.declare)];
  if (argv.vs) targets.push(await makeTarget('B', argv.vs, argv['vs-connection-options'], argv['vs-address'] ?? argv.address, argv['vs-declare']));

  const roundsOut: Array<{ round: number; order: string[]; results: Record<string, Record<string, Result>>; rss_kb?: Record<string, number | undefined>; settled_seconds?: Record<string, number> }> = [];

  // Side B's queues carry its letter: with --vs at the same broker and no --vs-address, both
  // sides would otherwise share one queue per round (B publishing into A's SOW queue).
  const sideTag = (t: W.Target) => (t.side === 'B' ? '-B' : '');
  const queueFor = (t: W.Target, r: number, suffix = '') => (t.declare === 'none' ? t.address : `${t.address}-${runId}${sideTag(t)}-r${r}${suffix}`);

  async function guarded(fn: () => Promise<Record<string, unknown>>): Promise<Result> {
    try { return (await fn()) as Result; } catch (e) { progress.end(); return { error: (e as Error).message }; }
  }

  async function runOn(t: W.Target, r: number): Promise<Record<string, Result>> {
    const out: Record<string, Result> = {};
    const q = queueFor(t, r);
    const brokerPid = t.side === 'A' ? argv['broker-pid'] : argv['vs-broker-pid'];
    if (workloads.includes('publish') || workloads.includes('consume')) {
      // An existing queue (declare none) is emptied first, untimed: consume must read this round's messages, as many as the other side's.
      const pub = await guarded(async () => {
        const leftover = t.declare === 'none' ? await W.drainQueue(t, q, load.window) : 0;
        const res = await W.withBrokerCpu(brokerPid, 'accepted', () => W.publish(t, q, load, progress));
        return (t.declare === 'none' ? { ...res, leftover_drained: leftover } : res) as any;
      });
      if (workloads.includes('publish')) out.publish = pub;
      if (workloads.includes('consume')) {
        const n = typeof pub.accepted === 'number' ? (pub.accepted as number) : 0;
        out.consume = n > 0 ? await guarded(() => W.withBrokerCpu(brokerPid, 'received', () => W.consume(t, q, n, load.window, progress)) as any) : { skipped: 'nothing was published' };
      }
    }
    if (workloads.includes('memory')) {
      out.memory = await guarded(() => W.memory(t, queueFor(t, r, '-mem'), load, argv['memory-from'], argv['memory-to'], brokerPid, progress) as any);
    }
    if (workloads.includes('latency')) out.latency = await guarded(async () => (t.declare === 'none' ? W.drainQueue(t, queueFor(t, r, '-lat'), load.window) : Promise.resolve(0)).then(() => W.latency(t, queueFor(t, r, '-lat'), load, argv['latency-rate'], argv['latency-count'], progress, argv['latency-trace'] ? { file: argv['latency-trace'], side: t.side, round: r } : undefined)) as any);
    const sowWanted = SOW_WORKLOADS.filter((w) => workloads.includes(w));
    if (sowWanted.length) {
      const why = !t.tidemark ? `peer lacks Tidemark SOW (product: ${t.product})` : t.declare !== 'sow' ? `queue is not declared as a SOW queue (declare=${t.declare})` : '';
      if (why) { for (const w of sowWanted) out[w] = { skipped: why }; return out; }
      const dsq = `${t.address}-sow-${runId}${sideTag(t)}-r${r}`;
      const keys = argv['sow-keys']; const versions = argv['sow-versions'];
      let ds: W.SowDataset | undefined;
      const loadRes = await guarded(async () => { ds = await W.loadSowDataset(t, dsq, keys, versions, load.size, load.window, progress); return ds as any; });
      out.sow_dataset = loadRes;
      if (!ds) { for (const w of sowWanted) out[w] = { skipped: 'SOW dataset did not load: ' + loadRes.error }; return out; }
      if (argv.settle > 0) (out.sow_dataset as Record<string, unknown>).settled_seconds = await W.settleBroker(brokerPid, argv.settle);
      const d = ds;
      await withRecordScan(argv['record-decode'] === 'scan', async () => {
        // SCN numbering: the sow query's group_end is the last committed SCN; the dataset's first event is group_end - events + 1.
        let lastScn = -1;
        if (sowWanted.some((w) => w !== 'bootstrap')) {
          const sq = await guarded(() => W.withBrokerCpu(brokerPid, 'records', () => W.sowQuery(t, d.queue, load.window, progress, undefined, d.keys, argv['query-timeout'] * 1000)) as any);
          if (workloads.includes('sow')) out.sow = sq;
          lastScn = typeof sq.group_end_scn === 'number' ? (sq.group_end_scn as number) : -1;
        }
        const base = lastScn >= 0 ? lastScn - d.events : 0;
        if (workloads.includes('historical')) {
          const atVersion = Math.ceil(versions / 2);
          const scn = base + keys * atVersion;
          const h = await guarded(() => W.withBrokerCpu(brokerPid, 'records', () => W.sowQuery(t, d.queue, load.window, progress, String(scn), d.keys, argv['query-timeout'] * 1000)) as any);
          out.historical = { ...h, bookmark_scn: scn, as_of_version: atVersion, keys, versions };
        }
        if (workloads.includes('replay')) {
          const n = Math.min(argv['replay-count'] ?? argv.count, d.events);
          out.replay = await guarded(() => W.replay(t, d.queue, base + d.events - n, n, load.window, progress) as any);
        }
        if (workloads.includes('sow-and-subscribe')) out['sow-and-subscribe'] = await guarded(() => W.sowAndSubscribe(t, d, load.size, load.window, argv['load-rate'], progress) as any);
        if (workloads.includes('bootstrap')) out.bootstrap = await guarded(() => W.bootstrap(t, d, load.size, load.window, argv['load-rate'], progress, argv['bootstrap-catchup']) as any);
      });
    }
    return out;
  }

  for (let r = 1; r <= rounds; r++) {
    const order = r % 2 === 1 ? targets : [...targets].reverse();
    const results: Record<string, Record<string, Result>> = {};
    const settled: Record<string, number> = {};
    for (const t of order) {
      if (argv['settle-sides'] > 0 && targets.length > 1) {
        // Both brokers quiet before either side runs (each broker's PID when given).
        let s = 0;
        for (const pid of [argv['broker-pid'], argv['vs-broker-pid']]) if (pid) s += await W.settleBroker(pid, argv['settle-sides']);
        settled[t.side] = Math.round(s * 10) / 10;
      }
      results[t.side] = await runOn(t, r);
    }
    const rss = { A: await W.rssKb(argv['broker-pid']), B: await W.rssKb(argv['vs-broker-pid']) };
    roundsOut.push({ round: r, order: order.map((t) => t.side), results, ...(argv['broker-pid'] || argv['vs-broker-pid'] ? { rss_kb: rss } : {}), ...(Object.keys(settled).length ? { settled_seconds: settled } : {}) });
  }

  // summary: per workload, the metric on each side per round, ratios A/B per round, medians
  const summary: Record<string, unknown> = {};
  const rows: Array<[string, Workload, { key: string; unit: string; better: 'higher' | 'lower' }]> = workloads.map((w) => [w, w, METRIC[w]]);
  // Broker CPU per message (with --broker-pid / --vs-broker-pid): on a small shared machine the
  // client's own CPU caps both brokers' rates, so this is the figure that compares the brokers.
  for (const w of ['publish', 'consume', 'sow', 'historical'] as const) {
    if (workloads.includes(w) && roundsOut.some((ro) => typeof ro.results.A?.[w]?.broker_cpu_us_per_msg === 'number')) {
      rows.push([`${w} cpu`, w, { key: 'broker_cpu_us_per_msg', unit: w === 'sow' || w === 'historical' ? 'broker CPU µs/record' : 'broker CPU µs/msg', better: 'lower' }]);
    }
  }
  for (const [name, w, m] of rows) {
    const vals = (side: 'A' | 'B') => roundsOut.map((ro) => { const v = ro.results[side]?.[w]?.[m.key]; return typeof v === 'number' ? v : NaN; });
    const a = vals('A');
    const entry: Record<string, unknown> = { metric: m.key, unit: m.unit, better: m.better, A: a.map(round), A_median: round(median(a)) };
    const aRes = roundsOut[0].results.A?.[w];
    if (aRes?.skipped) entry.A_skipped = aRes.skipped;
    const aErr = roundsOut.map((ro) => ro.results.A?.[w]?.error).filter(Boolean);
    if (aErr.length) entry.A_errors = aErr;
    if (targets.length > 1) {
      const b = vals('B');
      const ratios = a.map((x, i) => x / b[i]);
      Object.assign(entry, { B: b.map(round), B_median: round(median(b)), ratios: ratios.map(round), ratio_median: round(median(ratios)) });
      const bRes = roundsOut[0].results.B?.[w];
      if (bRes?.skipped) entry.B_skipped = bRes.skipped;
      const bErr = roundsOut.map((ro) => ro.results.B?.[w]?.error).filter(Boolean);
      if (bErr.length) entry.B_errors = bErr;
    }
    summary[name] = entry;
  }

  // issue 9 targets, where this run measured them
  const tg: Array<{ target: string; value: number; met: boolean; note?: string }> = [];
  const s = (w: string) => summary[w] as any;
  if (targets.length > 1 && targets[0].tidemark) {
    if (Number.isFinite(s('publish')?.ratio_median)) tg.push({ target: 'publish >= 1.5x peer', value: s('publish').ratio_median, met: s('publish').ratio_median >= 1.5 });
    if (Number.isFinite(s('consume')?.ratio_median)) tg.push({ target: 'consume >= 1.2x peer', value: s('consume').ratio_median, met: s('consume').ratio_median >= 1.2 });
    if (Number.isFinite(s('latency')?.ratio_median)) tg.push({ target: `p99 latency at ${argv['latency-rate']}/s <= peer (ratio <= 1)`, value: s('latency').ratio_median, met: s('latency').ratio_median <= 1 });
  }
  if (Number.isFinite(s('memory')?.A_median)) tg.push({ target: 'memory flat (RSS within 20%)', value: s('memory').A_median, met: s('memory').A_median <= 1.2, note: `${argv['memory-from']} to ${argv['memory-to']} retained events` });
  if (Number.isFinite(s('sow')?.A_median)) tg.push({ target: 'sow query >= 150k records/s', value: s('sow').A_median, met: s('sow').A_median >= 150000, note: `${argv['sow-keys']} records` });
  if (Number.isFinite(s('bootstrap')?.A_median) && argv['bootstrap-catchup'] > 0) tg.push({ target: 'bootstrap <= 3 s', value: s('bootstrap').A_median, met: s('bootstrap').A_median <= 3, note: `${argv['sow-keys']} keys + ${argv['bootstrap-catchup']} catch-up events (target is stated for 100k + 50k)` });
  if (Number.isFinite(s('historical')?.A_median)) tg.push({ target: 'historical query <= 1 s', value: s('historical').A_median, met: s('historical').A_median <= 1, note: `${argv['sow-keys']} keys x ${argv['sow-versions']} versions (target is stated for 100k x 10)` });

  const out = {
    tool: 'tidemark-bench',
    version: 1,
    params: { count: load.count, size: load.size, keys: load.keys, window: load.window, rounds, workloads, latency_rate: argv['latency-rate'], latency_count: argv['latency-count'], sow_keys: argv['sow-keys'], sow_versions: argv['sow-versions'], load_rate: argv['load-rate'], bootstrap_catchup: argv['bootstrap-catchup'], settle: argv.settle, settle_sides: argv['settle-sides'], memory_from: argv['memory-from'], memory_to: argv['memory-to'], durable: true, client: argv.client, record_decode: argv['record-decode'] },
    targets: targets.map((t) => ({ side: t.side, url: redact(t.url), address: t.address, declare: t.declare, product: t.product, tidemark: t.tidemark })),
    rounds: roundsOut,
    summary,
    goals: tg,
  };
  const table = renderTable(out, targets);
  if (argv.json) { process.stderr.write(table); process.stdout.write(JSON.stringify(out, null, 2) + '\n'); }
  else process.stdout.write(table);
  // A workload that failed (as opposed to one that ran and missed its target) fails the run.
  const failed = roundsOut.flatMap((ro) => Object.entries(ro.results).flatMap(([side, res]) =>
    Object.entries(res).filter(([, v]) => v && typeof v.error === 'string').map(([w, v]) => `round ${ro.round} ${w} on ${side}: ${v.error}`)));
  if (failed.length) throw new ToolError(`${failed.length} workload run(s) failed: ${failed.slice(0, 3).join('; ')}${failed.length > 3 ? '; …' : ''}`);
  return 0;
});

/** What the user typed for a number option yargs turned into NaN (the last --name value on the command line). */
function typed(name: string, parsed: unknown): string {
  if (!Number.isNaN(parsed)) return String(parsed);
  const args = hideBin(process.argv);
  const short: Record<string, string> = { count: '-n', size: '-s', keys: '-k', window: '-w' };
  let found: string | undefined;
  args.forEach((a, i) => {
    if (a.startsWith(`--${name}=`)) found = a.slice(name.length + 3);
    else if ((a === `--${name}` || a === short[name]) && i + 1 < args.length) found = args[i + 1];
  });
  return found ?? String(parsed);
}

/** The URL without its password, in either form (amqp://user:pass@host, Qpid's user/pass@host). */
function redact(url: string): string {
  const at = url.lastIndexOf('@');
  if (at < 0) return url;
  const m = /^([a-zA-Z][a-zA-Z0-9+.-]*:\/\/)?([^@]*)$/.exec(url.slice(0, at));
  if (!m) return url;
  const sep = m[2].search(/[/:]/);
  return sep < 0 ? url : `${m[1] ?? ''}${m[2].slice(0, sep + 1)}***${url.slice(at)}`;
}

function fmt(v: unknown, unit: string): string {
  if (typeof v !== 'number' || !Number.isFinite(v)) return '-';
  if (unit.includes('/s')) return formatRate(v);
  return v < 10 ? v.toFixed(2) : v.toFixed(1);
}

function renderTable(out: any, targets: W.Target[]): string {
  const lines: string[] = [];
  lines.push(`tidemark-bench: ${out.params.count} x ${out.params.size} B durable over ${out.params.keys} keys, window ${out.params.window}, ${out.params.rounds} round(s)`);
  for (const t of out.targets) lines.push(`  ${t.side}: ${t.url} ${t.address} (product ${t.product}, declare ${t.declare})`);
  const two = targets.length > 1;
  const head = ['workload', 'unit', 'A median', ...(two ? ['B median', 'A/B per round', 'A/B median'] : ['per round'])];
  const rows: string[][] = [head];
  for (const [w, e] of Object.entries(out.summary) as Array<[string, any]>) {
    const note = e.A_skipped ? `skipped: ${e.A_skipped}` : e.A_errors ? `error: ${e.A_errors[0]}` : '';
    if (note && !two) { rows.push([w, e.unit, note]); continue; }
    const row = [w, e.unit, e.A_skipped ? 'skipped' : fmt(e.A_median, e.unit)];
    if (two) {
      row.push(e.B_skipped ? 'skipped' : fmt(e.B_median, e.unit));
      row.push(e.ratios.map((x: number) => (Number.isFinite(x) ? x.toFixed(2) : '-')).join(' '));
      row.push(Number.isFinite(e.ratio_median) ? e.ratio_median.toFixed(2) + (e.better === 'lower' ? ' (lower is better)' : '') : '-');
    } else row.push(e.A.map((x: number) => fmt(x, e.unit)).join(' '));
    rows.push(row);
  }
  const widths = head.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  for (const r of rows) lines.push(r.map((c, i) => (c ?? '').padEnd(widths[i])).join('  ').trimEnd());
  for (const [w, e] of Object.entries(out.summary) as Array<[string, any]>) {
    if (e.B_skipped && !e.A_skipped) lines.push(`  ${w} on B skipped: ${e.B_skipped}`);
    if (e.A_skipped && two) lines.push(`  ${w} on A skipped: ${e.A_skipped}`);
    for (const side of ['A', 'B']) if (e[`${side}_errors`]) lines.push(`  ${w} on ${side} failed: ${e[`${side}_errors`][0]}`);
  }
  // What the publish rate left out (it counts accepted messages only; nothing is retried), and what an existing queue held before a round.
  for (const r of out.rounds) for (const side of ['A', 'B']) {
    const p = r.results[side]?.publish;
    if (p && typeof p.accepted === 'number' && p.rejected + p.released + p.modified > 0) lines.push(`  round ${r.round} publish on ${side}: ${p.accepted} accepted, ${p.rejected} rejected, ${p.released} released, ${p.modified} modified (the rate counts accepted only)`);
    if (p && p.leftover_drained > 0) lines.push(`  round ${r.round} on ${side}: ${p.leftover_drained} message(s) left in ${out.targets.find((t: any) => t.side === side)?.address} drained before publishing`);
  }
  const lat = out.rounds.map((r: any) => ['A', 'B'].map((s) => r.results[s]?.latency).filter(Boolean));
  if (lat.flat().some((l: any) => typeof l.p50_ms === 'number')) {
    lines.push('latency detail (ms, p50/p90/p99/p99.9/max):');
    out.rounds.forEach((r: any) => { for (const s of ['A', 'B']) { const l = r.results[s]?.latency; if (l && typeof l.p50_ms === 'number') lines.push(`  round ${r.round} ${s}: ${[l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms].map((x: number) => x.toFixed(2)).join(' / ')}`); } });
  }
  if (out.goals.length) {
    lines.push('targets (issue 9):');
    for (const g of out.goals) lines.push(`  ${g.met ? 'met   ' : 'MISSED'} ${g.target}: ${Number(g.value).toFixed(g.value < 10 ? 2 : 0)}${g.note ? ` (${g.note})` : ''}`);
  }
  return lines.join('\n') + '\n';
}
