/**
 * amqps:// (wire.md 1): with `tls: {port, key, cert}` the broker also listens with TLS. A
 * self-signed certificate is made here with openssl; the client skips verification.
 */
import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { startTestBroker, tempDir, type TestBroker } from '../support/broker.js';
import { connect, openSender, sendAll, openReceiver, collect } from '../support/client.js';

describe('TLS (amqps://)', function () {
  let tb: TestBroker;
  let dir: string;
  before(async function () {
    try { execFileSync('openssl', ['version'], { stdio: 'ignore' }); } catch { this.skip(); }
    dir = tempDir('tidemark-tls-');
    const key = path.join(dir, 'key.pem'), cert = path.join(dir, 'cert.pem');
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=localhost'], { stdio: 'ignore' });
    tb = await startTestBroker({ tls: { port: 0, key, cert }, auth: { anonymous: 'loopback', users: { tls: { password: 'tls-pw' } } } });
  });
  after(async () => { await tb?.stop(); if (dir) rmSync(dir, { recursive: true, force: true }); });

  const amqps = () => tb.broker.urls.find((u) => u.startsWith('amqps://'))!;

  it('listens on amqps:// next to amqp://', function () {
    expect(tb.broker.urls[0]).to.match(/^amqp:\/\//);
    expect(amqps()).to.match(/^amqps:\/\/127\.0\.0\.1:\d+$/);
  });

  it('publishes over TLS with PLAIN and receives over TLS anonymously (loopback)', async function () {
    const tlsOpts = { transport: 'tls', rejectUnauthorized: false, servername: 'localhost' };
    const c = await connect(amqps(), { ...tlsOpts, username: 'tls', password: 'tls-pw' });
    try {
      expect(c.connection.socket.encrypted).to.equal(true);
      const s = await openSender(c, { address: 'tls.q' });
      expect((await sendAll(s, [{ body: 'secret-1' }, { body: 'secret-2' }])).map((o) => o.state)).to.deep.equal(['accepted', 'accepted']);
    } finally { await c.close(); }
    const r = await connect(amqps(), tlsOpts);
    try {
      const rcv = await openReceiver(r, { address: 'tls.q' });
      expect((await collect(rcv, { count: 2 })).map((m) => m.message.body)).to.deep.equal(['secret-1', 'secret-2']);
    } finally { await r.close(); }
  });

  it('a bad password over TLS is refused like over plain TCP', async function () {
    let failed = false;
    try { const c = await connect(amqps(), { transport: 'tls', rejectUnauthorized: false, servername: 'localhost', username: 'tls', password: 'nope' }); await c.close(); } catch { failed = true; }
    expect(failed).to.equal(true);
  });

  it('a client that verifies certificates refuses the self-signed one (the listener really is TLS)', async function () {
    let failed = false;
    try { const c = await connect(amqps(), { transport: 'tls', rejectUnauthorized: true, servername: 'localhost' }); await c.close(); } catch { failed = true; }
    expect(failed).to.equal(true);
  });
});

describe('TLS with tls.ca: mutual TLS', function () {
  let tb: TestBroker;
  let dir: string;
  const files: Record<string, string> = {};
  before(async function () {
    try { execFileSync('openssl', ['version'], { stdio: 'ignore' }); } catch { this.skip(); }
    dir = tempDir('tidemark-mtls-');
    const f = (n: string) => (files[n] = path.join(dir, n));
    const ossl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'ignore' });
    // a CA, the server's certificate (self-signed is enough here), a client signed by the CA and one that is not
    ossl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('ca.key'), '-out', f('ca.pem'), '-days', '1', '-subj', '/CN=test-ca');
    ossl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('srv.key'), '-out', f('srv.pem'), '-days', '1', '-subj', '/CN=localhost');
    ossl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('cli.key'), '-out', f('cli.csr'), '-subj', '/CN=client');
    ossl('x509', '-req', '-in', f('cli.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial', '-out', f('cli.pem'), '-days', '1');
    ossl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('rogue.key'), '-out', f('rogue.pem'), '-days', '1', '-subj', '/CN=rogue');
    tb = await startTestBroker({ tls: { port: 0, key: files['srv.key'], cert: files['srv.pem'], ca: files['ca.pem'] } });
  });
  after(async () => { await tb?.stop(); if (dir) rmSync(dir, { recursive: true, force: true }); });

  const amqps = () => tb.broker.urls.find((u) => u.startsWith('amqps://'))!;
  const tryConnect = async (extra: Record<string, unknown>) => {
    try { const c = await connect(amqps(), { transport: 'tls', rejectUnauthorized: false, servername: 'localhost', ...extra }); await c.close(); return 'open'; } catch { return 'refused'; }
  };

  it('admits a client certificate the CA signed, and refuses none or another one', async function () {
    const { readFileSync } = await import('node:fs');
    expect(await tryConnect({ key: readFileSync(files['cli.key']), cert: readFileSync(files['cli.pem']) })).to.equal('open');
    expect(await tryConnect({})).to.equal('refused');
    expect(await tryConnect({ key: readFileSync(files['rogue.key']), cert: readFileSync(files['rogue.pem']) })).to.equal('refused');
  });
});
