/**
 * Smoke test of tidemark-bench (issue 9): a tiny run against a test broker, checking the
 * shape of the --json result and that every measured rate is non-zero. No timing
 * thresholds: the figures depend on the machine.
 */
import { expect } from 'chai';
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { useBroker, startTestBroker } from '../support/broker.js';
import { runTool } from '../support/tools.js';

describe('tidemark-bench (smoke)', function () {
  this.timeout(90000);
  const b = useBroker();
  /** tidemark-bench against the test broker, JSON on stdout (the table goes to stderr). */
  const bench = (address: string, args: string[], timeoutMs: number) =>
    runTool('tidemark-bench', ['--url', b.get().url, '--address', address, '--json', '--no-progress', ...args], { timeoutMs });
  /** A run that must succeed: exit 0 (stderr shown otherwise), its JSON, and side A's first-round results. */
  const benchOk = async (address: string, args: string[], timeoutMs: number) => {
    const res = await bench(address, args, timeoutMs);
    expect(res.timedOut, res.stderr).to.equal(false);
    expect(res.code, res.stderr).to.equal(0);
    const out = JSON.parse(res.stdout);
    return { res, out, A: out.rounds[0].results.A };
  };

  it('with --broker-pid, reports the broker CPU per published and consumed message', async () => {
    // The test broker runs in this process, so its PID is ours.
    const { res, out, A: r } = await benchOk('cpu', [
      '-n', '2000', '--size', '100', '--keys', '20', '--workloads', 'publish,consume', '--broker-pid', String(process.pid),
    ], 80000);
    for (const w of ['publish', 'consume']) {
      expect(r[w].broker_cpu_us_per_msg, w).to.be.a('number').and.greaterThan(0);
      expect(out.summary[`${w} cpu`]).to.include({ unit: 'broker CPU µs/msg', better: 'lower' });
      expect(out.summary[`${w} cpu`].A_median).to.be.closeTo(r[w].broker_cpu_us_per_msg, 0.1);
    }
    expect(res.stderr).to.match(/publish cpu\s+broker CPU µs\/msg/);
  });

  it('with --broker-pid, reports the broker CPU per record of the sow and historical queries', async () => {
    const { res, out, A: r } = await benchOk('cpusow', [
      // (enough records that a query takes several of the 10 ms CPU ticks /proc counts in)
      '--workloads', 'sow,historical', '--sow-keys', '3000', '--sow-versions', '2', '--broker-pid', String(process.pid),
    ], 80000);
    for (const w of ['sow', 'historical']) {
      expect(r[w].records, w).to.equal(3000);
      expect(r[w].broker_cpu_us_per_msg, w).to.be.a('number').and.greaterThan(0);
      expect(out.summary[`${w} cpu`]).to.include({ unit: 'broker CPU µs/record', better: 'lower' });
    }
    expect(res.stderr).to.match(/sow cpu\s+broker CPU µs\/record/);
  });

  it('with --vs and both PIDs, waits before each side until both brokers have been idle for two seconds', async () => {
    // Both sides are the test broker (this process): a run of one round, ratios of ~1.
    const pid = String(process.pid);
    const { out, A } = await benchOk('sides', [
      '--vs', b.get().url, '-n', '200', '--keys', '10', '--window', '50', '--workloads', 'publish', '--rounds', '1',
      '--broker-pid', pid, '--vs-broker-pid', pid, '--settle-sides', '10',
    ], 80000);
    expect(A.publish.accepted).to.equal(200);
    const settled = out.rounds[0].settled_seconds;
    // per side: two quiet seconds for each of the two PIDs, and well before the 10 s limit each
    for (const side of ['A', 'B']) expect(settled[side], side).to.be.within(3.9, 19);
    expect(out.params.settle_sides).to.equal(10);
    expect(out.summary.publish.ratio_median).to.be.a('number');
  });

  it('--vs at the same broker without --vs-address: each side publishes into queues of its own', async () => {
    // Side A a SOW queue, side B a plain one, two rounds (B goes first in round 2): B's queue
    // used to be A's, so B published into a SOW queue and A's attach failed in round 2.
    const { out } = await benchOk('same', [
      '--vs', b.get().url, '--vs-declare', 'plain', '-n', '100', '--keys', '10', '--window', '50', '--workloads', 'publish', '--rounds', '2', '--settle-sides', '0',
    ], 60000);
    for (const ro of out.rounds) for (const side of ['A', 'B']) expect(ro.results[side].publish.accepted, `round ${ro.round} ${side}`).to.equal(100);
    const names = b.get().broker.nodes.list().map((q: any) => q.name).filter((n: string) => n.startsWith('same-'));
    const sow = names.filter((n: string) => b.get().broker.nodes.get(n)!.arguments['sow.key'] !== undefined);
    expect(names).to.have.length(4);
    expect(sow).to.have.length(2);
    for (const n of names) expect(n.includes('-B-'), n).to.equal(!sow.includes(n));
  });

  it('bootstrap with --bootstrap-catchup N: exactly N catch-up events after the snapshot, the pause reported', async () => {
    const { out, A } = await benchOk('bootcu', [
      '--workloads', 'bootstrap', '--sow-keys', '50', '--sow-versions', '1', '--bootstrap-catchup', '30', '--settle', '1',
    ], 80000);
    const r = A.bootstrap;
    expect(r).to.include({ snapshot_records: 50, catchup_events: 30, load_published: 30 });
    expect(r.paused_seconds).to.be.greaterThan(0);
    expect(r.seconds).to.be.greaterThan(0);
    expect(out.params.bootstrap_catchup).to.equal(30);
    // --settle without --broker-pid waits the whole time it is given
    expect(A.sow_dataset.settled_seconds).to.be.within(0.9, 3);
    expect(out.goals.map((g: any) => g.target)).to.include('bootstrap <= 3 s');
  });

  it('runs every workload with tiny N and prints a JSON result', async () => {
    const { out, A: r } = await benchOk('smoke', [
      '-n', '200', '--size', '100', '--keys', '20', '--window', '500',
      '--latency-rate', '200', '--latency-count', '50',
      '--sow-keys', '50', '--sow-versions', '2', '--load-rate', '100', '--replay-count', '60',
    ], 80000);
    expect(out.tool).to.equal('tidemark-bench');
    expect(out.params).to.include({ count: 200, size: 100, keys: 20, window: 500, rounds: 1, durable: true });
    expect(out.targets).to.have.length(1);
    expect(out.targets[0]).to.include({ side: 'A', product: 'tidemark', declare: 'sow', tidemark: true });
    expect(out.rounds).to.have.length(1);
    expect(r.publish).to.include({ accepted: 200, rejected: 0 });
    expect(r.publish.rate).to.be.greaterThan(0);
    expect(r.consume.received).to.equal(200);
    expect(r.consume.rate).to.be.greaterThan(0);
    expect(r.latency.received).to.equal(50);
    for (const k of ['p50_ms', 'p90_ms', 'p99_ms', 'p999_ms', 'max_ms']) expect(r.latency[k]).to.be.a('number').and.to.be.at.least(0);
    expect(r.latency.p50_ms).to.be.at.most(r.latency.p99_ms);
    expect(r.sow.records).to.equal(50);
    expect(r.sow.rate).to.be.greaterThan(0);
    expect(r.historical.records).to.equal(50);
    expect(r.historical.seconds).to.be.greaterThan(0);
    expect(r.replay.events).to.equal(60);
    expect(r.replay.rate).to.be.greaterThan(0);
    expect(r['sow-and-subscribe'].snapshot_records).to.equal(50);
    expect(r.bootstrap.snapshot_records).to.equal(50);
    expect(r.bootstrap.seconds).to.be.greaterThan(0);
    for (const w of ['publish', 'consume', 'latency', 'sow', 'historical', 'sow-and-subscribe', 'replay', 'bootstrap']) {
      expect(out.summary[w], w).to.have.property('A_median').that.is.a('number');
    }
  });

  it('--latency-trace: one line per message, sent on CLOCK_MONOTONIC, the latencies the summary is made of', async () => {
    const file = join(await mkdtemp(join(tmpdir(), 'tm-lat-')), 'lat.csv');
    const before = Number(process.hrtime.bigint()) / 1e6; // same clock in every process
    const { out, A } = await benchOk('lattrace', [
      '--workloads', 'latency', '--latency-rate', '200', '--latency-count', '40', '--rounds', '2', '--latency-trace', file,
    ], 60000);
    const after = Number(process.hrtime.bigint()) / 1e6;
    const lines = (await readFile(file, 'utf8')).trim().split('\n');
    expect(lines[0]).to.match(/^# tidemark-bench latency trace, client pid \d+$/);
    expect(lines[1]).to.equal('side,round,queue,sent_mono_ms,latency_ms');
    const rows = lines.slice(2).map((l) => l.split(','));
    expect(rows).to.have.length(80); // the header once, then both rounds
    for (const [side, round, queue, sent, lat] of rows) {
      expect(side).to.equal('A');
      expect(queue).to.match(new RegExp(`^lattrace-.*-r${round}-lat$`));
      expect(Number(sent)).to.be.within(before, after);
      expect(Number(lat)).to.be.at.least(0);
    }
    for (const r of [1, 2]) {
      const lat = rows.filter((x) => x[1] === String(r)).map((x) => Number(x[4]));
      expect(lat).to.have.length(40);
      expect(Math.max(...lat)).to.be.closeTo(out.rounds[r - 1].results.A.latency.max_ms, 0.001);
    }
    expect(A.latency.received).to.equal(40);
  });

  it('memory: RSS of the broker at two retained-event counts, and a clear error without its PID', async () => {
    // The test broker runs in this process, so its PID is ours.
    const { A } = await benchOk('mem', [
      '--keys', '20', '--window', '200',
      '--workloads', 'memory', '--memory-from', '100', '--memory-to', '300', '--broker-pid', String(process.pid),
    ], 60000);
    const m = A.memory;
    expect(m).to.include({ from_events: 100, to_events: 300 });
    expect(m.rss_from_kb).to.be.greaterThan(0);
    expect(m.growth).to.be.closeTo(m.rss_to_kb / m.rss_from_kb, 1e-9);
    const noPid = await bench('mem2', ['--workloads', 'memory', '--memory-from', '10', '--memory-to', '20'], 30000);
    expect(JSON.parse(noPid.stdout).rounds[0].results.A.memory.error).to.match(/needs the PID of broker A/);
    // a workload that could not run fails the run (tools.md: exit 1 with Error: …)
    expect(noPid.code).to.equal(1);
    expect(noPid.stderr).to.match(/Error: 1 workload run\(s\) failed: round 1 memory on A: memory needs the PID/);
  });

  it('skips the SOW workloads against a peer queue that is not a SOW queue, with the reason', async () => {
    const { A: r } = await benchOk('smoke-plain', [
      '--declare', 'plain', '-n', '50', '--keys', '5', '--window', '20', '--workloads', 'publish,consume,sow',
    ], 40000);
    expect(r.publish.accepted).to.equal(50);
    expect(r.consume.received).to.equal(50);
    expect(r.sow.skipped).to.match(/not declared as a SOW queue/);
  });

  it('takes -b/--broker and --connection-options as every tool does (tools.md); --url stays an alias', async () => {
    // QA: `tidemark-bench --broker URL` failed with "Unknown argument: broker"
    const help = await runTool('tidemark-bench', ['--help'], { timeoutMs: 20000 });
    expect(help.code).to.equal(0);
    for (const f of ['--broker', '--connection-options', '--vs-connection-options', '--url']) expect(help.stdout).to.include(f);
    const res = await runTool('tidemark-bench', ['--broker', b.get().url, '--connection-options', '{container_id: bench-co, idle_timeout: 30, protocol: amqp1.0}',
      '--address', 'broker-flag', '--json', '--no-progress', '-n', '20', '--keys', '5', '--window', '10', '--workloads', 'publish'], { timeoutMs: 40000 });
    expect(res.code, res.stderr).to.equal(0);
    expect(JSON.parse(res.stdout).rounds[0].results.A.publish.accepted).to.equal(20);
    const badOpt = await runTool('tidemark-bench', ['--broker', b.get().url, '--connection-options', '{bogus: 1}'], { timeoutMs: 20000 });
    expect(badOpt.code).to.equal(1);
    expect(badOpt.stderr).to.match(/^Error: --connection-options: unknown option 'bogus'/);
    const unknown = await runTool('tidemark-bench', ['--bogus'], { timeoutMs: 20000 });
    expect(unknown.code).to.equal(1);
    expect(unknown.stderr).to.equal('Error: Unknown argument: bogus\n');
  });

  it('connects with the credentials of --connection-options or of a Qpid user/pass@host:port URL, and redacts the password', async () => {
    const tb = await startTestBroker({ auth: { anonymous: false, users: { dev: { password: 'devpass' } } } });
    try {
      const args = ['--json', '--no-progress', '-n', '10', '--keys', '2', '--window', '10', '--workloads', 'publish'];
      const none = await runTool('tidemark-bench', ['--broker', tb.url, ...args], { timeoutMs: 20000 });
      expect(none.code).to.equal(1);
      expect(none.stderr).to.match(/^Error: broker A: cannot connect to .*: authentication required: .*--connection-options/);
      const opts = await runTool('tidemark-bench', ['--broker', tb.url, '--connection-options', '{username: dev, password: devpass}', ...args], { timeoutMs: 40000 });
      expect(opts.code, opts.stderr).to.equal(0);
      expect(JSON.parse(opts.stdout).rounds[0].results.A.publish.accepted).to.equal(10);
      const qpid = await runTool('tidemark-bench', ['-b', `dev/devpass@127.0.0.1:${tb.port}`, ...args], { timeoutMs: 40000 });
      expect(qpid.code, qpid.stderr).to.equal(0);
      const out = JSON.parse(qpid.stdout);
      expect(out.targets[0].url).to.equal(`dev/***@127.0.0.1:${tb.port}`);
      expect(qpid.stdout + qpid.stderr).to.not.include('devpass');
    } finally { await tb.stop(); }
  });

  it('refuses an unknown workload', async () => {
    const res = await runTool('tidemark-bench', ['--url', b.get().url, '--workloads', 'publish,nope'], { timeoutMs: 20000 });
    expect(res.code).to.equal(1);
    expect(res.stderr).to.match(/unknown workload 'nope'/);
  });
});
