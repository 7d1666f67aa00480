/**
 * Session 24 review of access: listeners, SASL and routing (docs/robustness.md 15). One block
 * per finding; each failed on the code before its fix.
 */
import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { startTestBroker, tempDir, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, openSender, sendAll, collect, sleep } from '../support/client.js';
import { RawClient, AMQP_HEADER, SASL_HEADER, open, begin, attach, saslInit, plainResponse, t } from '../support/amqp-frames.js';
import { setDerivationObserver, hashPassword } from '../../lib/core/auth.js';
import { loadConfig } from '../../lib/core/config.js';

/** Opens `n` raw TCP sockets, writing `send` once each is connected; notes when each closes. */
async function rawSockets(port: number, n: number, send?: Buffer): Promise<Array<net.Socket & { closedAt?: number }>> {
  return Promise.all(Array.from({ length: n }, () => new Promise<net.Socket & { closedAt?: number }>((resolve, reject) => {
    const s: net.Socket & { closedAt?: number } = net.connect(port, '127.0.0.1', () => { if (send) s.write(send); resolve(s); });
    s.on('error', () => { /* reset by the broker */ });
    s.on('close', () => { s.closedAt = performance.now(); });
    setTimeout(() => reject(new Error('connect timed out')), 5000).unref();
  })));
}
const stillOpen = (ss: Array<{ closedAt?: number }>) => ss.filter((s) => s.closedAt === undefined).length;

/** Waits until `pred` holds or `ms` pass. */
async function until(pred: () => boolean, ms: number): Promise<boolean> {
  const end = performance.now() + ms;
  while (!pred() && performance.now() < end) await sleep(20);
  return pred();
}

/** The code of the sasl-outcome the broker sent, or undefined. */
const outcomeCode = (c: RawClient): number | undefined => c.find('saslOutcome')?.fields[0] as number | undefined;

describe('access audit (session 24)', function () {
  this.timeout(60000);

  describe('1. TLS: sockets that never finish the handshake count and are closed at the open deadline', function () {
    let tb: TestBroker;
    let dir: string;
    before(async function () {
      try { execFileSync('openssl', ['version'], { stdio: 'ignore' }); } catch { this.skip(); }
      dir = tempDir('tidemark-access-tls-');
      const key = path.join(dir, 'key.pem'), cert = path.join(dir, 'cert.pem');
      execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=localhost'], { stdio: 'ignore' });
      tb = await startTestBroker({ tls: { port: 0, key, cert }, limits: { maxConnections: 5, openTimeoutMs: 1000 } });
    });
    after(async () => { await tb?.stop(); if (dir) rmSync(dir, { recursive: true, force: true }); });
    const tlsPort = () => Number(new URL(tb.broker.urls.find((u) => u.startsWith('amqps://'))!).port);
    const tlsOpts = { transport: 'tls', rejectUnauthorized: false, servername: 'localhost' };

    it('five silent sockets fill maxConnections; more are reset at once; all are closed after openTimeoutMs', async function () {
      const t0 = performance.now();
      const silent = await rawSockets(tlsPort(), 5);
      await sleep(200);
      // a TLS record header announcing a 512-byte ClientHello, then nothing
      const partial = await rawSockets(tlsPort(), 10, Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]));
      expect(await until(() => stillOpen(partial) === 0, 800), 'sockets over maxConnections reset at once').to.equal(true);
      // the handshakes count for the plain listener too: a client there is told the limit
      const plain = await RawClient.connect(tb.port);
      plain.write(AMQP_HEADER, open());
      expect(await plain.waitFor((x) => x.find('close') !== undefined, 1000)).to.equal(true);
      expect(String(plain.find('close')?.error?.description)).to.match(/maximum of 5 connections/);
      plain.destroy();
      expect(await until(() => stillOpen(silent) === 0, 2500), 'silent sockets closed at the deadline').to.equal(true);
      const lived = Math.max(...silent.map((s) => s.closedAt! - t0));
      expect(lived).to.be.within(900, 2500);
      silent.concat(partial).forEach((s) => s.destroy());
      // a real TLS client connects once they are gone
      const c = await connect(`amqps://127.0.0.1:${tlsPort()}`, tlsOpts);
      await c.close();
    });

    it('a TLS client opens within the deadline that started at its TCP connect', async function () {
      const c = await connect(`amqps://127.0.0.1:${tlsPort()}`, tlsOpts);
      await sleep(1300); // past openTimeoutMs: the open came in time, so the connection stays
      expect(c.connection.is_open()).to.equal(true);
      await c.close();
    });
  });

  describe('2. frames before the peer\'s open are at most 64 KiB (AMQP 2.4.1)', function () {
    let tb: TestBroker;
    before(async () => { tb = await startTestBroker({ auth: { anonymous: 'loopback', users: { u: { password: 'p' } } } }); });
    after(async () => { await tb?.stop(); });

    it('a SASL frame announcing 1 MiB is refused as its size arrives, not buffered until the open deadline', async function () {
      const c = await RawClient.connect(tb.port);
      const head = Buffer.alloc(8); head.writeUInt32BE(1048576, 0); head[4] = 2; head[5] = 1;
      c.write(SASL_HEADER, head, Buffer.alloc(1000));
      expect(await c.waitClosed(1500), 'closed at once').to.equal(true);
      c.destroy();
    });

    it('an AMQP open announcing 200 KiB is refused with amqp:connection:framing-error', async function () {
      const c = await RawClient.connect(tb.port);
      const head = Buffer.alloc(8); head.writeUInt32BE(200 * 1024, 0); head[4] = 2;
      c.write(AMQP_HEADER, head, Buffer.alloc(1000));
      expect(await c.waitFor((x) => x.find('close') !== undefined, 1500)).to.equal(true);
      expect(c.find('close')?.error?.condition).to.equal('amqp:connection:framing-error');
      expect(String(c.find('close')?.error?.description)).to.match(/before open/);
      c.destroy();
    });

    it('room for long PLAIN credentials: a 40 KiB password gets a sasl-outcome (auth), not a framing error', async function () {
      const c = await RawClient.connect(tb.port);
      c.write(SASL_HEADER, saslInit('PLAIN', plainResponse('u', 'x'.repeat(40 * 1024))));
      expect(await c.waitFor((x) => outcomeCode(x) !== undefined, 3000)).to.equal(true);
      expect(outcomeCode(c)).to.equal(1);
      c.destroy();
    });

    it('after the open, frames up to max-frame-size: an open, begin and a 200 KiB attach in one write', async function () {
      const c = await RawClient.connect(tb.port);
      c.write(AMQP_HEADER, open({ maxFrameSize: t.uint(1048576) }), begin(0), attach({ name: t.str('n'.repeat(200 * 1024)) }));
      expect(await c.waitFor((x) => x.find('attach') !== undefined || x.find('close') !== undefined, 3000)).to.equal(true);
      expect(c.find('close'), 'no framing error').to.equal(undefined);
      c.destroy();
    });
  });

  describe('3. one sasl-init per connection (AMQP 5.3.2), and no check for a connection gone', function () {
    let tb: TestBroker;
    const HASH = hashPassword('right');
    before(async () => { tb = await startTestBroker({ auth: { anonymous: false, users: { u: { scrypt: HASH } } } }); });
    after(async () => { setDerivationObserver(undefined); await tb?.stop(); });

    it('40 sasl-init frames on one connection start one check and end the connection', async function () {
      let derivations = 0;
      setDerivationObserver(() => { derivations++; });
      const c = await RawClient.connect(tb.port);
      c.write(SASL_HEADER, ...Array.from({ length: 40 }, () => saslInit('PLAIN', plainResponse('u', 'wrong'))));
      expect(await c.waitClosed(2000), 'connection ended').to.equal(true);
      await sleep(500);
      expect(derivations).to.equal(1);
      // the gate is free: a real login goes through at once
      const ok = await connect(tb.url, { username: 'u', password: 'right' });
      await ok.close();
      setDerivationObserver(undefined);
    });

    it('checks waiting at the login gate for connections already closed are skipped', async function () {
      let derivations = 0;
      setDerivationObserver(() => { derivations++; });
      const cs = await Promise.all(Array.from({ length: 10 }, () => RawClient.connect(tb.port)));
      for (const c of cs) c.write(SASL_HEADER, saslInit('PLAIN', plainResponse('u', 'wrong')));
      await sleep(20);
      for (const c of cs) c.destroy();
      await sleep(1500);
      setDerivationObserver(undefined);
      expect(derivations).to.be.at.most(2);
    });

    it('a mechanism name is one of those offered: "enable_plain" or "toString" fails as unknown (auth), it was "started" and threw', async function () {
      for (const name of ['enable_plain', 'toString']) {
        const c = await RawClient.connect(tb.port);
        c.write(SASL_HEADER, saslInit(name, Buffer.from('x')));
        await c.waitFor((x) => outcomeCode(x) !== undefined, 2000);
        c.destroy();
        expect(outcomeCode(c), name).to.equal(1);
      }
    });
  });

  describe('4. PLAIN with an empty user name or password', function () {
    let tb: TestBroker;
    before(async () => { tb = await startTestBroker({ auth: { anonymous: false, users: { dev: { password: 'pw' }, null: { password: 'n' } } } }); });
    after(async () => { await tb?.stop(); });

    async function attempt(response: Buffer): Promise<number | undefined> {
      const c = await RawClient.connect(tb.port);
      c.write(SASL_HEADER, saslInit('PLAIN', response));
      await c.waitFor((x) => outcomeCode(x) !== undefined, 3000);
      c.destroy();
      return outcomeCode(c);
    }

    it('an existing plain-text user with an empty password fails as auth (1), as a wrong one does', async function () {
      expect(await attempt(plainResponse('dev', 'wrong'))).to.equal(1);
      expect(await attempt(plainResponse('dev', ''))).to.equal(1);
      expect(await attempt(plainResponse('nobody', ''))).to.equal(1);
    });

    it('an empty user name is no user (rhea read it as null, which found the user "null")', async function () {
      expect(await attempt(plainResponse('', 'n'))).to.equal(1);
      expect(await attempt(plainResponse('null', 'n'))).to.equal(0);
    });

    it('a user with an empty name is refused at config load (no PLAIN login could name it)', function () {
      expect(() => loadConfig(undefined, { auth: { users: { '': { password: 'x' } } } })).to.throw(/config\.auth\.users: a user name must not be empty/);
    });
  });

  describe('5. a message on a $management link goes to $management, whatever its `to`', function () {
    let tb: TestBroker;
    before(async () => { tb = await startTestBroker({ queues: { orders: { durable: true } } }); });
    after(async () => { await tb?.stop(); });
    const depth = () => tb.broker.nodes.get('orders')!.structure.stats().depth;

    it('a QUERY with to: "orders" is answered and stores nothing in orders', async function () {
      const c = await connect(tb.url);
      const reply = await openReceiver(c, { dynamic: true });
      const s = await openSender(c, { address: '$management' });
      const out = await sendAll(s, [{ to: 'orders', reply_to: reply.remote.attach.source.address, message_id: 'm1', application_properties: { operation: 'QUERY', type: 'queue' }, body: {} }]);
      const answers = await collect(reply, { count: 1, idleMs: 1500 });
      await c.close();
      expect(out[0].state).to.equal('accepted');
      expect(depth()).to.equal(0);
      expect(answers.length).to.equal(1);
      expect(answers[0].message.application_properties.statusCode).to.equal(200);
    });

    it('the anonymous relay still routes by `to`: a queue, and $management', async function () {
      const before = depth();
      const c = await connect(tb.url);
      const reply = await openReceiver(c, { dynamic: true });
      const relay = await openSender(c, { address: null });
      const out = await sendAll(relay, [
        { to: 'orders', body: 'o1' },
        { to: '$management', reply_to: reply.remote.attach.source.address, message_id: 'm2', application_properties: { operation: 'QUERY', type: 'queue' }, body: {} },
      ]);
      const answers = await collect(reply, { count: 1, idleMs: 1500 });
      await c.close();
      expect(out.map((o) => o.state)).to.deep.equal(['accepted', 'accepted']);
      expect(depth()).to.equal(before + 1);
      expect(answers.length).to.equal(1);
    });
  });

  describe('6. the refusal of another user\'s temporary queue does not name its owner', function () {
    let tb: TestBroker;
    const users = { alice: { password: 'a' }, bob: { password: 'b' } };
    before(async () => { tb = await startTestBroker({ auth: { anonymous: false, users } }); });
    after(async () => { await tb?.stop(); });

    it('bob reading alice\'s reply queue: unauthorized, without "alice"', async function () {
      const a = await connect(tb.url, { username: 'alice', password: 'a' });
      const tmp = await openReceiver(a, { dynamic: true });
      const name = String(tmp.remote.attach.source.address);
      const b = await connect(tb.url, { username: 'bob', password: 'b' });
      const err = await openReceiver(b, { address: name }).then(() => undefined, (e) => e);
      await a.close(); await b.close();
      expect(err?.condition).to.equal('amqp:unauthorized-access');
      expect(err?.message).to.equal(`user bob may not read temporary queue ${name}: it is read only by links of the connection that created it`);
      expect(err?.message).not.to.contain('alice');
    });
  });

  describe('7. a temporary queue is read only by links of the connection that created it', function () {
    let tb: TestBroker;
    before(async () => { tb = await startTestBroker(); }); // anonymous from loopback: every client is "anonymous"
    after(async () => { await tb?.stop(); });

    it('another ANONYMOUS connection may send to it but not read it; the creating connection reads it by name too', async function () {
      const a = await connect(tb.url);
      const b = await connect(tb.url);
      try {
        const mine = await openReceiver(a, { dynamic: true });
        const name = String(mine.remote.attach.source.address);
        // Before: both were user "anonymous", so b took a's replies.
        const err = await openReceiver(b, { address: name }).then(() => undefined, (e) => e);
        expect(err?.condition).to.equal('amqp:unauthorized-access');
        const s = await openSender(b, { address: name });
        expect((await sendAll(s, [{ body: 'reply' }]))[0].state).to.equal('accepted');
        const again = await openReceiver(a, { address: name });
        expect(again.remote.attach.source.address).to.equal(name);
        again.close();
        expect((await collect(mine, { count: 1 })).map((m) => m.message.body)).to.deep.equal(['reply']);
      } finally { await a.close(); await b.close(); }
    });
  });
});
