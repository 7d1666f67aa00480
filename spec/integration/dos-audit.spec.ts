/**
 * A hostile client must not stop others being served (session 22 security review,
 * docs/robustness.md section 13). Each case measures the longest a control client's durable
 * publish waits while the attack runs: the broker runs as a child process, as in production.
 */
import { expect } from 'chai';
import { child, pinger, type Child } from '../support/child-broker.js';
import { connect, openSender, sendAll, createOnDemand, sleep } from '../support/client.js';
import { RawClient, SASL_HEADER, saslInit, plainResponse } from '../support/amqp-frames.js';
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
          expect(worst, 'ms a durable publish of another client waited').to.be.below(1000);
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
      expect(worst, 'ms a durable publish of another client waited').to.be.below(1000);
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
      expect(worst, 'ms a durable publish of another client waited').to.be.below(1000);
    } finally { await b.stop(); }
  });
});
