/**
 * The HTTP listener (issue 10): Prometheus text at /metrics with known values, /healthz,
 * /readyz, the read-only JSON API, and the `tidemark` CLI announcing the HTTP URL with
 * pino JSON logs on stderr.
 */
import { expect } from 'chai';
import { request as httpRequest } from 'node:http';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { startTestBroker, tempDir, ROOT, type TestBroker } from '../support/broker.js';
import { send, connect, openReceiver, collect, sleep } from '../support/client.js';

/** Value of one sample line (`name{labels} value`), or undefined. */
function sample(text: string, name: string, labels = ''): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(labels ? `${name}{${labels}} ` : `${name} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

const sowQueue = { address: 'm.prices', capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'sow.key': '/id', 'sow.history.window': '1h' } };

describe('metrics, health and the HTTP API (issue 10)', function () {
  this.timeout(60_000);
  let tb: TestBroker;
  let http: string;

  before(async function () {
    tb = await startTestBroker({ http: { enabled: true, host: '127.0.0.1', port: 0 } });
    http = tb.broker.httpUrl!;
    // m.prices: a and b, a updated, b deleted -> 1 record; 4 history versions (b's tombstone included).
    await send(tb.url, sowQueue, [{ body: JSON.stringify({ id: 'a', px: 1 }) }, { body: JSON.stringify({ id: 'b', px: 2 }) }]);
    await send(tb.url, 'm.prices', [{ body: JSON.stringify({ id: 'a', px: 3 }) }, { message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id: 'b' }) }]);
    // m.orders: 4 messages, 3 consumed and accepted.
    await send(tb.url, 'm.orders', ['x', 'y', 'z', 'w'].map((body) => ({ body })));
    const c = await connect(tb.url);
    try { await collect(await openReceiver(c, 'm.orders'), { count: 3, credit: 3 }); } finally { await c.close(); }
  });
  after(async function () { await tb?.stop(); });

  it('announces its URL on the broker (loopback, port 0 chooses one)', function () {
    expect(http).to.match(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(Number(new URL(http).port)).to.be.above(0);
  });

  it('serves /healthz and /readyz', async function () {
    const h = await fetch(http + '/healthz');
    expect(h.status).to.equal(200);
    expect(await h.json()).to.deep.equal({ status: 'ok' });
    const r = await fetch(http + '/readyz');
    expect(r.status).to.equal(200);
    expect(await r.json()).to.deep.equal({ status: 'ready', storage: 'open', amqp: tb.url });
  });

  it('serves Prometheus text at /metrics with per-queue, broker, commit and event-loop metrics', async function () {
    const c = await connect(tb.url); // one open connection to count
    try {
      await sleep(50);
      const res = await fetch(http + '/metrics');
      expect(res.status).to.equal(200);
      expect(res.headers.get('content-type')).to.match(/^text\/plain; version=0\.0\.4/);
      const t = await res.text();
      for (const name of ['tidemark_queue_depth', 'tidemark_queue_bytes', 'tidemark_queue_consumers', 'tidemark_queue_scn_head', 'tidemark_queue_scn_oldest',
        'tidemark_queue_sow_records', 'tidemark_queue_history_versions', 'tidemark_queue_published_total', 'tidemark_queue_delivered_total',
        'tidemark_queue_acknowledged_total', 'tidemark_connections', 'tidemark_links', 'tidemark_commit_batch_size', 'tidemark_commit_fsync_seconds',
        'nodejs_eventloop_lag_seconds']) {
        expect(t, name).to.match(new RegExp(`^# TYPE ${name} `, 'm'));
      }
      expect(t).to.match(/^# TYPE tidemark_queue_published_total counter$/m);
      expect(t).to.match(/^# TYPE tidemark_commit_fsync_seconds histogram$/m);
      expect(sample(t, 'tidemark_queue_depth', 'queue="m.prices"')).to.equal(1);
      expect(sample(t, 'tidemark_queue_sow_records', 'queue="m.prices"')).to.equal(1);
      expect(sample(t, 'tidemark_queue_history_versions', 'queue="m.prices"')).to.equal(4);
      expect(sample(t, 'tidemark_queue_scn_head', 'queue="m.prices"')).to.equal(4);
      expect(sample(t, 'tidemark_queue_scn_oldest', 'queue="m.prices"')).to.equal(1);
      expect(sample(t, 'tidemark_queue_published_total', 'queue="m.prices"')).to.equal(4);
      expect(sample(t, 'tidemark_queue_bytes', 'queue="m.prices"')).to.be.above(0);
      expect(sample(t, 'tidemark_queue_depth', 'queue="m.orders"')).to.equal(1);
      expect(sample(t, 'tidemark_queue_published_total', 'queue="m.orders"')).to.equal(4);
      expect(sample(t, 'tidemark_queue_delivered_total', 'queue="m.orders"')).to.be.at.least(3); // the test client may prefetch one more (released)
      expect(sample(t, 'tidemark_queue_acknowledged_total', 'queue="m.orders"')).to.equal(3);
      expect(sample(t, 'tidemark_queue_info', 'queue="m.prices",kind="sow",durable="true"')).to.equal(1);
      expect(sample(t, 'tidemark_queues')).to.equal(2);
      expect(sample(t, 'tidemark_connections')).to.be.at.least(1);
      expect(sample(t, 'tidemark_storage_open')).to.equal(1);
      // Every publish went through group commit: 10 publishes in 3 separate sends -> at least 3 batches.
      expect(sample(t, 'tidemark_commit_batch_size_count')).to.be.at.least(3);
      expect(sample(t, 'tidemark_commit_batch_size_sum')).to.be.at.least(10);
      // fsync counts every batch; batch size only those carrying publishes (acks are quiet deletes).
      expect(sample(t, 'tidemark_commit_fsync_seconds_count')).to.be.at.least(sample(t, 'tidemark_commit_batch_size_count')!);
      expect(sample(t, 'tidemark_commit_fsync_seconds_sum')).to.be.above(0);
      expect(sample(t, 'nodejs_eventloop_lag_seconds')).to.be.at.least(0);
    } finally { await c.close(); }
  });

  it('serves the read-only JSON API: queues, SOW query over AMQP, key history', async function () {
    const qs = await (await fetch(http + '/api/queues')).json();
    expect(qs.map((q: any) => q.name)).to.deep.equal(['m.orders', 'm.prices']);
    const p = qs.find((q: any) => q.name === 'm.prices');
    expect(p).to.include({ kind: 'sow', depth: 1, sow_records: 1, history_versions: 4, scn_head: 4, history_window_ms: 3600000 });
    expect(p.arguments).to.deep.equal({ 'sow.key': '/id', 'sow.history.window': 3600000 });
    const sow = await (await fetch(http + '/api/queues/m.prices/sow')).json();
    expect(sow.records.map((r: any) => [r.key, r.scn, r.body])).to.deep.equal([['a', 3, { id: 'a', px: 3 }]]);
    expect(sow.group_end_scn).to.equal(4);
    const past = await (await fetch(http + '/api/queues/m.prices/sow?at=2')).json();
    expect(past.records.map((r: any) => [r.key, r.body.px])).to.deep.equal([['a', 1], ['b', 2]]);
    const hist = await (await fetch(http + '/api/queues/m.prices/history?key=b')).json();
    expect(hist.versions.map((v: any) => [v.scn, v.op])).to.deep.equal([[2, 'publish'], [4, 'delete']]);
    expect(hist.window_ms).to.equal(3600000);
    const bad = await fetch(http + '/api/queues/m.prices/sow?filter=' + encodeURIComponent('(('));
    expect(bad.status).to.equal(400);
    expect((await bad.json()).error).to.equal('amqp:invalid-field');
    expect((await fetch(http + '/api/queues/nope')).status).to.equal(404);
    const post = await fetch(http + '/api/queues', { method: 'POST', body: '{}' });
    expect(post.status).to.equal(405);
    expect(post.headers.get('allow')).to.equal('GET, HEAD');
    const page = await fetch(http + '/');
    expect(page.status).to.equal(200);
    expect(await page.text()).to.contain('<script type="module" src="/app.js">');
  });

  it('every response says nosniff; live event streams are capped (each holds a link of the console\'s session), and the SOW view still answers', async function () {
    for (const p of ['/api/queues', '/api/queues/nope', '/metrics', '/healthz']) {
      expect((await fetch(http + p)).headers.get('x-content-type-options'), p).to.equal('nosniff');
    }
    const streams: AbortController[] = [];
    try {
      const open = async () => {
        const ac = new AbortController(); streams.push(ac);
        const r = await fetch(http + '/api/queues/m.prices/events', { signal: ac.signal });
        if (r.status === 200) {
          // wait for the `ready` event: the stream's link is attached
          const reader = r.body!.getReader(); let text = '';
          while (!text.includes('event: ready')) { const { value, done } = await reader.read(); if (done) break; text += Buffer.from(value!).toString(); }
        }
        return r;
      };
      const first = await Promise.all(Array.from({ length: 100 }, open));
      expect(first.map((r) => r.status).filter((st) => st !== 200), 'the first 100 are served').to.deep.equal([]);
      expect(first[0].headers.get('x-content-type-options')).to.equal('nosniff');
      const over = await open();
      expect(over.status).to.equal(503);
      expect((await over.json()).error).to.equal('too-many-streams');
      const sow = await fetch(http + '/api/queues/m.prices/sow');
      expect(sow.status).to.equal(200);
    } finally { for (const ac of streams) ac.abort(); }
  });

  it('serves only Hosts that are IP literals or localhost (DNS rebinding): another name gets 403 naming http.allowedHosts', async function () {
    const port = Number(new URL(http).port);
    const get = (host: string) => new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, path: '/api/queues', headers: { host } }, (res) => {
        let body = ''; res.on('data', (d) => { body += d; }); res.on('end', () => resolve({ status: res.statusCode!, body }));
      });
      req.on('error', reject); req.end();
    });
    for (const ok of [`127.0.0.1:${port}`, `localhost:${port}`, 'LOCALHOST', `[::1]:${port}`]) expect((await get(ok)).status, ok).to.equal(200);
    for (const bad of ['rebind.attacker.example', `attacker.example:${port}`, 'localhost.attacker.example']) {
      const r = await get(bad);
      expect(r.status, bad).to.equal(403);
      expect(JSON.parse(r.body).description).to.match(/http\.allowedHosts/);
    }
  });
});

describe('tidemark CLI: HTTP announcement and JSON logs (issue 10)', function () {
  this.timeout(30_000);

  function run(args: string[], until: RegExp): Promise<{ stdout: string; stderr: string; stop(): Promise<number | null> }> {
    return new Promise((resolve, reject) => {
      const proc = spawn(process.execPath, [path.join(ROOT, 'bin/tidemark.js'), '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '', stderr = '';
      const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
      const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error(`no ${until} in: ${stdout}\n${stderr}`)); }, 15000);
      const res = { get stdout() { return stdout; }, get stderr() { return stderr; }, stop: async () => { proc.kill('SIGTERM'); return exited; } };
      proc.stdout!.on('data', (d) => { stdout += d; if (until.test(stdout)) { clearTimeout(timer); resolve(res); } });
      proc.stderr!.on('data', (d) => { stderr += d; });
      proc.once('exit', (code) => { clearTimeout(timer); if (!until.test(stdout)) reject(new Error(`exited ${code}: ${stdout}\n${stderr}`)); });
    });
  }

  it('prints the http URL after the amqp one (--http-port 0), serves it, and logs JSON lines through pino', async function () {
    const data = tempDir();
    try {
      const b = await run(['--data', data, '--http-port', '0', '--log-level', 'info'], /http:\/\/127\.0\.0\.1:\d+/);
      const lines = b.stdout.trim().split('\n');
      expect(lines[0]).to.match(/^Tidemark listening on amqp:\/\/127\.0\.0\.1:\d+$/);
      expect(lines[1]).to.match(/^Tidemark metrics and console on http:\/\/127\.0\.0\.1:\d+$/);
      const amqp = /amqp:\/\/[\d.]+:\d+/.exec(lines[0])![0];
      const url = /http:\/\/[\d.]+:\d+/.exec(lines[1])![0];
      expect((await fetch(url + '/readyz')).status).to.equal(200);
      await send(amqp, 'cli.q', [{ body: 'top-secret-body-text' }]);
      await sleep(100);
      expect(await b.stop()).to.equal(0);
      const logs = b.stderr.trim().split('\n').map((l) => JSON.parse(l));
      expect(logs.length).to.be.above(2);
      for (const l of logs) {
        expect(l.level).to.be.oneOf(['error', 'warn', 'info', 'debug']);
        expect(l.time).to.match(/^\d{4}-\d\d-\d\dT/);
        expect(l.ns).to.match(/^tidemark:/);
        expect(l.msg).to.be.a('string');
      }
      expect(logs.some((l) => l.ns === 'tidemark:http' && l.msg === 'http listening' && l.url === url)).to.equal(true);
      expect(logs.some((l) => l.ns === 'tidemark:protocol' && /connection open/.test(l.msg))).to.equal(true);
      expect(b.stderr).to.not.contain('top-secret-body-text');
    } finally { rmSync(data, { recursive: true, force: true }); }
  });

  it('--no-http prints no http line; --log-level silent prints no log', async function () {
    const data = tempDir();
    try {
      const b = await run(['--data', data, '--no-http', '--log-level', 'silent'], /amqp:\/\/127\.0\.0\.1:\d+\n/);
      await sleep(200);
      expect(await b.stop()).to.equal(0);
      expect(b.stdout).to.not.contain('http://');
      expect(b.stderr).to.equal('');
    } finally { rmSync(data, { recursive: true, force: true }); }
  });
});
