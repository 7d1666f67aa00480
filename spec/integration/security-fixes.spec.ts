/**
 * Security audit fixes (docs/security.md, docs/observability.md):
 *  1. the HTTP views that return message content (SOW, a key's history — a direct storage
 *     read —, the live tail) answer 503 when `auth.anonymous` is false, and the history
 *     follows the ACL of `anonymous` otherwise; statistics stay served;
 *  2. the console's internal AMQP client never lets rhea print a non-JSON line on stderr
 *     (a spawned broker's stderr is all JSON lines after the content views were asked);
 *  3. and 4. (scrypt parameters, plain-text timing) are in spec/unit/auth/.
 */
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { startTestBroker, tempDir, ROOT, type TestBroker } from '../support/broker.js';
import { connect, openSender, sendAll, sleep } from '../support/client.js';
import { SelfClient } from '../../lib/ext/http/self-client.js';

const SECRET = '123-45-6789';
const ALL = ['create', 'publish', 'consume', 'browse', 'manage'];
const sowArgs = { 'sow.key': '/id', 'sow.history.window': '1d' };
const ADMIN = { username: 'admin', password: 'adminpw' };

/** A broker with HTTP on, user admin (all rights), a default-deny ACL plus `rules`, and SOW queues with history. */
function startSecureBroker(anonymous: boolean | 'loopback', rules: object[], queues: string[]): Promise<TestBroker> {
  return startTestBroker({
    http: { enabled: true, host: '127.0.0.1', port: 0 },
    auth: { anonymous, users: { admin: { password: ADMIN.password } } },
    acl: { default: 'deny', rules: [{ user: 'admin', queue: '*', allow: ALL }, ...rules] },
    queues: Object.fromEntries(queues.map((q) => [q, { durable: true, arguments: sowArgs }])),
  });
}

/** Publishes JSON bodies as a PLAIN user; expects every one accepted. */
async function publishAs(url: string, user: { username: string; password: string }, address: string, bodies: object[]): Promise<void> {
  const c = await connect(url, user);
  try {
    const s = await openSender(c, { address });
    const out = await sendAll(s, bodies.map((b) => ({ body: JSON.stringify(b), content_type: 'application/json' })));
    expect(out.map((o) => o.state)).to.deep.equal(bodies.map(() => 'accepted'));
  } finally { await c.close(); }
}

/** GET with a time limit; the body is read as text (an event stream is cut at the limit). */
async function get(url: string, ms = 3000): Promise<{ status: number; type: string; text: string }> {
  const ac = new AbortController();
  const t = setTimeout(() => ac.abort(), ms);
  try {
    const res = await fetch(url, { signal: ac.signal });
    let text = '';
    try { text = await res.text(); } catch { /* aborted stream: what came is enough */ }
    return { status: res.status, type: res.headers.get('content-type') ?? '', text };
  } finally { clearTimeout(t); }
}

describe('security fixes: HTTP content views with auth.anonymous false (audit 1)', function () {
  this.timeout(60_000);
  let tb: TestBroker;
  let http: string;
  const admin = ADMIN;

  before(async function () {
    tb = await startSecureBroker(false, [], ['secret.sow']);
    http = tb.broker.httpUrl!;
    await publishAs(tb.url, admin, 'secret.sow', [{ id: 'k1', ssn: SECRET }, { id: 'k1', ssn: SECRET, v: 2 }]);
  });
  after(async function () { await tb?.stop(); });

  it('a key\'s history (a direct storage read) answers 503 with the explanation, no body', async function () {
    const r = await get(`${http}/api/queues/secret.sow/history?key=k1`);
    expect(r.status).to.equal(503);
    expect(r.text).to.not.contain(SECRET);
    const j = JSON.parse(r.text);
    expect(j.error).to.equal('unavailable');
    expect(j.description).to.match(/auth\.anonymous is false/);
  });

  it('the SOW view and the live tail answer the same 503 (no event stream is opened)', async function () {
    for (const p of ['sow', 'sow?at=1', 'events']) {
      const r = await get(`${http}/api/queues/secret.sow/${p}`);
      expect(r.status, p).to.equal(503);
      expect(r.type, p).to.match(/^application\/json/);
      expect(r.text, p).to.not.contain(SECRET);
      const j = JSON.parse(r.text);
      expect(j.error, p).to.equal('unavailable');
      expect(j.description, p).to.match(/auth\.anonymous is false/);
    }
  });

  it('statistics without content stay served: /metrics, /healthz, /readyz, /api/overview, /api/queues[/NAME]', async function () {
    for (const p of ['/metrics', '/healthz', '/readyz', '/api/overview', '/api/queues', '/api/queues/secret.sow']) {
      const r = await get(http + p);
      expect(r.status, p).to.equal(200);
      expect(r.text, p).to.not.contain(SECRET);
    }
    const q = JSON.parse((await get(`${http}/api/queues/secret.sow`)).text);
    expect(q.name).to.equal('secret.sow');
    expect(q.sow_records).to.equal(1);
    expect(q.history_versions).to.equal(2);
  });

  it('the console client handles rhea protocol errors itself (no console.error), e.g. SASL demanded', async function () {
    // The API no longer connects when auth.anonymous is false; the client on its own still
    // must not let rhea print "error on read: ProtocolError: SASL layer not enabled".
    const client = new SelfClient(() => tb.url);
    const printed: unknown[][] = [];
    const orig = console.error;
    console.error = (...a: unknown[]) => { printed.push(a); };
    let err: Error | undefined;
    try {
      try { await client.query('secret.sow', {}, 5000); } catch (e) { err = e as Error; }
      await sleep(100);
    } finally { console.error = orig; await client.close(); }
    expect(err?.message).to.match(/could not connect/);
    expect(printed.map((a) => a.join(' '))).to.deep.equal([]);
  });
});

describe('security fixes: the history view follows the ACL of anonymous (audit 1)', function () {
  this.timeout(60_000);
  let tb: TestBroker;
  let http: string;
  const admin = ADMIN;

  before(async function () {
    tb = await startSecureBroker('loopback', [{ user: 'anonymous', queue: 'open.*', allow: ['browse'] }], ['secret.sow', 'open.sow']);
    http = tb.broker.httpUrl!;
    await publishAs(tb.url, admin, 'secret.sow', [{ id: 'k1', ssn: SECRET }]);
    await publishAs(tb.url, admin, 'open.sow', [{ id: 'k1', v: 'public' }]);
  });
  after(async function () { await tb?.stop(); });

  it('a queue anonymous may not browse: 403, like the SOW view over AMQP', async function () {
    const h = await get(`${http}/api/queues/secret.sow/history?key=k1`);
    expect(h.status).to.equal(403);
    expect(h.text).to.not.contain(SECRET);
    expect(JSON.parse(h.text).error).to.equal('amqp:unauthorized-access');
    const s = await get(`${http}/api/queues/secret.sow/sow`);
    expect(s.status).to.equal(403);
    expect(s.text).to.not.contain(SECRET);
  });

  it('a queue anonymous may browse: the history is served', async function () {
    const h = await get(`${http}/api/queues/open.sow/history?key=k1`);
    expect(h.status).to.equal(200);
    const j = JSON.parse(h.text);
    expect(j.versions.map((v: any) => v.body)).to.deep.equal([{ id: 'k1', v: 'public' }]);
  });
});

describe('security fixes: stderr stays JSON lines when the console meets auth.anonymous false (audit 2)', function () {
  this.timeout(60_000);

  it('a spawned broker (--http, --config with anonymous false): every stderr line is JSON after the content views were asked', async function () {
    const dir = tempDir('tidemark-secfix-');
    const cfg = path.join(dir, 'broker.json');
    writeFileSync(cfg, JSON.stringify({
      auth: { anonymous: false, users: { admin: { password: 'adminpw' } } },
      acl: { default: 'deny', rules: [{ user: 'admin', queue: '*', allow: ALL }] },
      queues: { 'secret.sow': { durable: true, arguments: sowArgs } },
    }));
    const proc = spawn(process.execPath, [path.join(ROOT, 'bin/tidemark.js'), '--port', '0', '--http', '--http-port', '0', '--data', path.join(dir, 'data'), '--log-level', 'info', '--config', cfg], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '', stderr = '';
    proc.stdout!.on('data', (d) => { stdout += d; });
    proc.stderr!.on('data', (d) => { stderr += d; });
    const exited = new Promise<number | null>((res) => proc.once('exit', (code) => res(code)));
    const statuses: Record<string, number> = {};
    try {
      const t0 = Date.now();
      let m: RegExpExecArray | null = null;
      while (!(m = /console on (http:\/\/\S+)/.exec(stdout))) {
        if (proc.exitCode !== null || Date.now() - t0 > 15000) throw new Error(`broker did not start:\n${stdout}\n${stderr}`);
        await sleep(50);
      }
      const http = m[1];
      await publishAs(/amqp:\/\/\S+/.exec(stdout)![0], { username: 'admin', password: 'adminpw' }, 'secret.sow', [{ id: 'k1', ssn: SECRET }]);
      for (const p of ['sow', 'sow?at=1', 'history?key=k1', 'events']) {
        statuses[p] = (await get(`${http}/api/queues/secret.sow/${p}`)).status;
      }
      await sleep(300); // anything the requests made reaches stderr
    } finally {
      proc.kill('SIGTERM');
      await exited;
      rmSync(dir, { recursive: true, force: true });
    }
    const lines = stderr.split('\n').filter((l) => l !== '');
    expect(lines.length).to.be.above(0);
    const notJson = lines.filter((l) => { try { return typeof JSON.parse(l) !== 'object'; } catch { return true; } });
    expect(notJson).to.deep.equal([]);
    expect(stderr).to.not.contain(SECRET);
    expect(statuses).to.deep.equal({ 'sow': 503, 'sow?at=1': 503, 'history?key=k1': 503, 'events': 503 });
  });
});
