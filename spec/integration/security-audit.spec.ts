/**
 * Findings of a security audit (session 10), each case failing on the code before its fix:
 * management replies are publishes the ACL must allow, durable subscriptions belong to the
 * user who made them, connections that never authenticate are closed soon, TLS errors name
 * the config key.
 */
import { expect } from 'chai';
import path from 'node:path';
import { rmSync, writeFileSync } from 'node:fs';
import { startTestBroker, spawnBroker, tempDir, type TestBroker } from '../support/broker.js';
import { connect, openSender, sendAll, openReceiver, collect, sleep, type Conn } from '../support/client.js';
import { RawClient, SASL_HEADER } from '../support/amqp-frames.js';

const ALL = ['create', 'publish', 'consume', 'browse', 'manage'];
const users = Object.fromEntries(['admin', 'alice', 'bob'].map((u) => [u, { password: `${u}-pw` }]));
const acl = {
  default: 'deny',
  rules: [
    { user: 'admin', queue: '*', allow: ALL },
    { user: 'bob', queue: 'bob.*', allow: ['create', 'publish', 'consume', 'browse'] },
    { user: '*', queue: 'public.*', allow: ['create', 'publish', 'consume', 'browse'] },
  ],
};

describe('security audit findings', function () {
  this.timeout(30000);
  let tb: TestBroker;
  const conns: Conn[] = [];
  const as = async (user: string, opts: Record<string, unknown> = {}) => { const c = await connect(tb.url, { username: user, password: `${user}-pw`, ...opts }); conns.push(c); return c; };
  before(async () => { tb = await startTestBroker({ auth: { anonymous: false, users }, acl, queues: { 'secret.q': { durable: true }, 'public.bo': { arguments: { 'qpid.browse-only': true } } }, limits: { openTimeoutMs: 500 } }); });
  after(async () => { for (const c of conns) await c.close(); await tb?.stop(); });

  /** A $management request from `user`; the reply is read from a dynamic queue of its own. */
  async function mgmt(user: string, operation: string, body: unknown = {}, replyTo?: string): Promise<any> {
    const c = await as(user);
    const rcv = await openReceiver(c, { dynamic: true });
    const s = await openSender(c, { address: '$management' });
    const reply = collect(rcv, { count: 1, idleMs: 2000 });
    await sendAll(s, [{ message_id: `${operation}-${Math.random()}`, reply_to: replyTo ?? rcv.remote.attach.source.address, application_properties: { operation, type: 'queue' }, body }]);
    return (await reply)[0]?.message;
  }

  it('a management reply goes only to a queue the requester may publish to', async function () {
    await mgmt('bob', 'QUERY', {}, 'secret.q');
    await sleep(300);
    expect(tb.broker.queueInfo(tb.broker.nodes.get('secret.q')!).depth, 'nothing injected into secret.q').to.equal(0);
    // its own queue still gets the reply
    const c = await as('bob');
    await openSender(c, { address: 'bob.replies', capabilities: ['queue', 'create-on-demand'] });
    await mgmt('bob', 'QUERY', {}, 'bob.replies');
    for (let i = 0; i < 20 && tb.broker.queueInfo(tb.broker.nodes.get('bob.replies')!).depth === 0; i++) await sleep(50);
    expect(tb.broker.queueInfo(tb.broker.nodes.get('bob.replies')!).depth).to.equal(1);
  });

  it('durable subscriptions: another user can neither take one over, list it nor delete it; its owner and a manager can', async function () {
    const durableSource = { address: 'public.bo', durable: 2, expiry_policy: 'never' };
    const alice = await as('alice', { container_id: 'shared-id' });
    await openReceiver(alice, durableSource, { name: 'L' });
    const bob = await as('bob', { container_id: 'shared-id' });
    const err = await openReceiver(bob, durableSource, { name: 'L' }).then(() => undefined, (e) => e);
    expect(err?.condition).to.equal('amqp:unauthorized-access');
    expect(err?.message).to.not.include('public.bo');
    const list = (u: string) => mgmt(u, 'SUBSCRIPTION-QUERY').then((m) => (m.body as any[]).map((s) => `${s.container}/${s.link}`));
    expect(await list('bob')).to.deep.equal([]);
    expect(await list('alice')).to.deep.equal(['shared-id/L']);
    expect(await list('admin')).to.deep.equal(['shared-id/L']);
    expect((await mgmt('bob', 'SUBSCRIPTION-DELETE', { container: 'shared-id', link: 'L' })).application_properties.statusCode).to.equal(404);
    expect(await list('alice')).to.deep.equal(['shared-id/L']);
    expect((await mgmt('admin', 'SUBSCRIPTION-DELETE', { container: 'shared-id', link: 'L' })).application_properties.statusCode).to.equal(204);
  });

  it('a management reply goes to a temporary queue only if it is the requester\'s own (session 13 audit)', async function () {
    const admin = await as('admin');
    const adminTemp = await openReceiver(admin, { dynamic: true });
    const got = collect(adminTemp, { idleMs: 800 });
    await mgmt('bob', 'QUERY', {}, adminTemp.remote.attach.source.address);
    expect((await got).length, 'nothing injected into another user\'s reply queue').to.equal(0);
    expect((await mgmt('bob', 'QUERY'))?.application_properties?.statusCode, 'its own temporary queue gets the reply').to.equal(200);
  });

  it('SUBSCRIPTION-DELETE by name: a subscription that is not there is 404, not a queue ACL refusal (session 13 audit)', async function () {
    const c = await as('bob');
    const rcv = await openReceiver(c, { dynamic: true });
    const s = await openSender(c, { address: '$management' });
    const reply = collect(rcv, { count: 1, idleMs: 2000 });
    await sendAll(s, [{ message_id: 'sd-1', reply_to: rcv.remote.attach.source.address, application_properties: { operation: 'SUBSCRIPTION-DELETE', type: 'queue', name: 'nosuch/none' }, body: {} }]);
    const ap = (await reply)[0]?.message?.application_properties;
    expect(ap?.statusCode).to.equal(404);
    expect(String(ap?.statusDescription)).to.match(/^no durable subscription nosuch\/none/);
  });

  it('a connection that does not authenticate within limits.openTimeoutMs is closed', async function () {
    const silent = await RawClient.connect(tb.port);
    const saslOnly = await RawClient.connect(tb.port);
    saslOnly.write(SASL_HEADER);
    expect(await silent.waitClosed(3000), 'silent socket').to.equal(true);
    expect(await saslOnly.waitClosed(3000), 'SASL header, then nothing').to.equal(true);
  });
});

describe('TLS configuration errors name the key and the file', function () {
  this.timeout(30000);
  it('a missing key file and a key that is not PEM', async function () {
    const dir = tempDir();
    try {
      const garbage = path.join(dir, 'garbage.pem');
      writeFileSync(garbage, 'not a key');
      for (const [key, want] of [[path.join(dir, 'missing.pem'), /config\.tls\.key: cannot read .*missing\.pem/], [garbage, /config\.tls: the key .*garbage\.pem .*not usable PEM/]] as const) {
        const cfg = path.join(dir, 'tls.json');
        writeFileSync(cfg, JSON.stringify({ tls: { port: 0, key, cert: garbage } }));
        let err: Error | undefined;
        try { await spawnBroker(['--port', '0', '--data', path.join(dir, 'd'), '--config', cfg], { timeoutMs: 10000 }); } catch (e) { err = e as Error; }
        expect(err?.message).to.match(/exited 1/);
        expect(err?.message).to.match(want);
      }
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });
});
