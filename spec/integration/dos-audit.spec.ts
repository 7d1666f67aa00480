/**
 * A hostile client must not stop others being served (session 22 security review,
 * docs/robustness.md section 13). Each case measures the longest a control client's
 * publish waits while the attack runs: the broker runs as a child process, as in production.
 */
import { expect } from 'chai';
import { child, pinger, rssMB, type Child } from '../support/child-broker.js';
import { connect, openSender, sendAll, createOnDemand, sleep } from '../support/client.js';
import { RawClient, SASL_HEADER, saslInit, plainResponse, attach, begin, target, transfer, t } from '../support/amqp-frames.js';
import { hashPassword } from '../../lib/index.js';

describe('resource exhaustion (session 22 review)', function () {
  this.timeout(120000);

  describe('SASL PLAIN floods and the thread pool', function () {
    for (const withUsers of [false, true]) {
      it(`300 failed logins do not hold other clients' publishes for a second (${withUsers ? 'a user configured: scrypt gated' : 'no users: no scrypt at all'})`, async function () {
        const users = withUsers ? { alice: { scrypt: hashPassword('wonderland') } } : {};
        const b: Child = await child({ auth: { anonymous: 'loopback', users } });
        try {
          const port = Number(new URL(b.url).port);
          const ping = await pinger(b.url, 20);
          await sleep(300);
          const raws = await Promise.all(Array.from({ length: 300 }, () => RawClient.connect(port)));
          for (const c of raws) c.write(SASL_HEADER, saslInit('PLAIN', plainResponse('nobody', 'wrong')));
          await Promise.all(raws.map((c) => c.waitClosed(60000)));
          await sleep(200);
          const worst = await ping.stop();
          for (const c of raws) c.destroy();
          expect(worst, 'ms a publish of another client waited').to.be.below(1000);
          if (withUsers) {
            // The flood is over: a real login goes through.
            const c = await connect(b.url, { username: 'alice', password: 'wonderland' });
            await c.close();
          }
        } finally { await b.stop(); }
      });
    }
  });

  it('a relayed message to a 120 KB queue name under an ACL glob of two *: refused at once, nobody else waits', async function () {
    const b = await child({ acl: { default: 'allow', rules: [{ user: '*', queue: '*.*.reply', allow: ['publish', 'consume', 'browse'] }] } });
    try {
      const ping = await pinger(b.url, 20);
      await sleep(300);
      const c = await connect(b.url);
      const relay = await openSender(c, {});
      const out = await sendAll(relay, [{ to: 'a.'.repeat(60000), body: 'x' }]);
      await sleep(200);
      const worst = await ping.stop();
      await c.close();
      expect(out[0]?.state, 'a name past 1024 characters makes no queue').to.equal('rejected');
      expect(String((out[0] as any)?.error?.description ?? (out[0] as any)?.description ?? '')).to.include('longer than 1024');
      expect(worst, 'ms a publish of another client waited').to.be.below(1000);
    } finally { await b.stop(); }
  });

  it('a SOW publish holding a 12M-digit JSON integer does not hold other clients (BigInt of it took 3.2 s)', async function () {
    const b = await child();
    try {
      const c = await connect(b.url);
      const s = await openSender(c, createOnDemand('big.sow', { 'sow.key': '/id' }));
      await sendAll(s, [{ body: JSON.stringify({ id: 'warm', x: 1 }) }]);
      const ping = await pinger(b.url, 20);
      await sleep(300);
      const out = await sendAll(s, [{ body: '{"id":"k","x":' + '7'.repeat(12_000_000) + '}' }]);
      await sleep(300);
      const worst = await ping.stop();
      await c.close();
      expect(out[0]?.state).to.equal('accepted');
      expect(worst, 'ms a publish of another client waited').to.be.below(1000);
    } finally { await b.stop(); }
  });

  it('one connection cannot make the broker hold 30 × 15 MB of unfinished messages: past twice max-message-size a link is detached', async function () {
    const b = await child();
    try {
      const LINKS = 30, FRAMES = 15, CHUNK = 1_000_000;
      const c = await RawClient.connect(Number(new URL(b.url).port));
      await c.handshake({ begin: false });
      // rhea keeps one unfinished delivery per link: a session and a link for each
      for (let h = 0; h < LINKS; h++) c.write(begin(h), attach({ channel: h, name: t.str(`p${h}`), handle: t.uint(0), target: target({ address: t.str('mine.partial') }) }));
      expect(await c.waitFor((x) => x.frames.filter((f) => f.name === 'flow').length >= LINKS, 5000), 'credit on every link').to.equal(true);
      await sleep(300);
      const before = rssMB(b.pid);
      const chunk = Buffer.alloc(CHUNK, 0x41);
      const head = Buffer.from([0x00, 0x53, 0x77, 0xb0, 0x7f, 0xff, 0xff, 0xff]); // amqp-value binary of 2^31 bytes: never complete
      for (let h = 0; h < LINKS; h++) {
        c.write(transfer({ channel: h, handle: t.uint(0), deliveryId: t.uint(0), tag: t.bin(Buffer.from([h])), more: t.bool(true), payload: Buffer.concat([head, chunk]) }));
        for (let i = 1; i < FRAMES; i++) c.write(transfer({ channel: h, handle: t.uint(0), deliveryId: null, tag: null, more: t.bool(true), payload: chunk }));
        await new Promise((r) => { if (c.socket.writableLength <= 8e6) { r(true); return; } const tm = setTimeout(() => r(false), 10000); c.socket.once('drain', () => { clearTimeout(tm); r(true); }); });
      }
      await sleep(1500);
      const grew = rssMB(b.pid) - before;
      const detaches = c.frames.filter((f) => f.name === 'detach');
      c.destroy();
      expect(grew, 'MB held for one connection\'s unfinished deliveries').to.be.below(150);
      expect(detaches.length, 'links detached past the budget').to.be.greaterThan(20);
      expect(JSON.stringify(detaches[0])).to.include('amqp:resource-limit-exceeded');
    } finally { await b.stop(); }
  });
});
