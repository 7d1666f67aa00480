import { expect } from 'chai';
import path from 'node:path';
import { rmSync, writeFileSync } from 'node:fs';
import { spawnBroker, startTestBroker, tempDir } from '../support/broker.js';
import { send, receive, connect, openReceiver, openSender, collect } from '../support/client.js';

// tools.md "tidemark": the listening line, and SIGINT/SIGTERM/SIGHUP stop cleanly (exit 0) with
// in-flight deliveries released and storage flushed.
describe('the broker process', function () {
  this.timeout(60000);

  // SIGHUP is taken as SIGTERM (it used to end the process at once: session 23 audit).
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    it(`${signal}: exits 0, unsettled deliveries go back, every accepted message survives`, async function () {
      const dir = tempDir();
      try {
        const data = path.join(dir, 'data');
        const b1 = await spawnBroker(['--port', '0', '--data', data]);
        expect(b1.output()).to.match(/Tidemark listening on amqp:\/\/127\.0\.0\.1:\d+/);
        const out = await send(b1.url, 'proc.q', Array.from({ length: 20 }, (_, i) => ({ body: i, durable: true })));
        expect(out.every((o) => o.state === 'accepted')).to.equal(true);
        // a consumer holds 5 unsettled deliveries when the signal arrives
        const c = await connect(b1.url);
        const rcv = await openReceiver(c, { address: 'proc.q' });
        const held = await collect(rcv, { count: 5, settle: () => 'none' });
        expect(held).to.have.length(5);
        const code = await b1.kill(signal);
        expect(code).to.equal(0);
        await c.close().catch(() => undefined);
        const b2 = await spawnBroker(['--port', '0', '--data', data]);
        try {
          const got = await receive(b2.url, 'proc.q', { count: 20 });
          expect(got.map((m) => m.message.body)).to.deep.equal(Array.from({ length: 20 }, (_, i) => i));
        } finally { await b2.kill('SIGTERM'); }
      } finally { rmSync(dir, { recursive: true, force: true }); }
    });
  }

  it('SIGTERM under a running producer: messages being stored are settled accepted before the close, the client gets connection:forced, and what is stored is exactly what was accepted', async function () {
    const dir = tempDir();
    try {
      const data = path.join(dir, 'data');
      const b1 = await spawnBroker(['--port', '0', '--data', data]);
      const c = await connect(b1.url);
      const closeError = new Promise<any>((res) => { c.connection.once('connection_error', (ctx: any) => res(ctx.connection.error)); c.connection.once('disconnected', () => res(undefined)); });
      const snd = await openSender(c, { address: 'term.q' });
      const outcomes: Record<string, number> = { accepted: 0, released: 0, rejected: 0 };
      snd.on('accepted', () => { outcomes.accepted++; }); snd.on('released', () => { outcomes.released++; }); snd.on('rejected', () => { outcomes.rejected++; });
      let sent = 0;
      const pump = () => { while (snd.sendable() && sent < 200000) { snd.send({ body: `m${sent++}`, durable: true }); } };
      snd.on('sendable', pump); pump();
      while (outcomes.accepted < 2000) await new Promise((r) => setTimeout(r, 10));
      expect(await b1.kill('SIGTERM')).to.equal(0);
      expect((await closeError)?.condition).to.equal('amqp:connection:forced');
      expect(outcomes.rejected).to.equal(0);
      const b2 = await spawnBroker(['--port', '0', '--data', data]);
      try {
        const got = await receive(b2.url, 'term.q', { count: outcomes.accepted + 50, idleMs: 1500, credit: 5000 });
        // none lost, and none stored that its producer would retry (stored but never settled)
        expect(got.length).to.equal(outcomes.accepted);
        expect(got.map((m) => m.message.body)).to.deep.equal(Array.from({ length: outcomes.accepted }, (_, i) => `m${i}`));
      } finally { await b2.kill('SIGTERM'); }
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });

  it('SIGTERM under several producers: every delivery on its way gets an outcome (accepted or released), none is left unanswered (session 21 audit)', async function () {
    const dir = tempDir();
    try {
      const b1 = await spawnBroker(['--port', '0', '--data', path.join(dir, 'data')]);
      const producers = await Promise.all(Array.from({ length: 6 }, async (_, p) => {
        const c = await connect(b1.url);
        c.connection.on('connection_error', () => {});
        const snd = await openSender(c, { address: `term.many${p % 2}` });
        const st = { sent: 0, answered: 0, released: 0, stop: false, inflight: 0 };
        const pump = () => { while (!st.stop && snd.sendable() && st.inflight < 30 && st.sent < 100000) { snd.send({ body: `p${p}-${st.sent++}`, durable: true }); st.inflight++; } };
        snd.on('accepted', () => { st.answered++; st.inflight--; pump(); });
        snd.on('rejected', () => { st.answered++; st.inflight--; });
        snd.on('released', () => { st.answered++; st.released++; st.inflight--; st.stop = true; });
        snd.on('sendable', pump); pump();
        return st;
      }));
      while (producers.some((st) => st.answered < 300)) await new Promise((r) => setTimeout(r, 10));
      expect(await b1.kill('SIGTERM')).to.equal(0);
      await new Promise((r) => setTimeout(r, 200));
      expect(producers.map((st) => st.sent - st.answered), 'deliveries sent and never answered, per producer').to.deep.equal(producers.map(() => 0));
      expect(producers.reduce((n, st) => n + st.released, 0), 'some were released').to.be.greaterThan(0);
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });

  it('--port 0 runs side by side: the HTTP listener takes a free port too; a second broker on the same --data says the directory is in use', async function () {
    const dir = tempDir();
    const brokers: Array<Awaited<ReturnType<typeof spawnBroker>>> = [];
    try {
      // (spawnBroker passes --no-http first; --http turns it back on)
      // with a --config file that sets no HTTP port: still a free one (both took the default,
      // 8672, and the second failed to start)
      writeFileSync(path.join(dir, 'quiet.json'), JSON.stringify({ logLevel: 'warn' }));
      for (const d of ['a', 'b']) brokers.push(await spawnBroker(['--http', '--port', '0', '--data', path.join(dir, d), '--config', path.join(dir, 'quiet.json')]));
      for (const b of brokers) {
        for (let i = 0; i < 40 && !/console on/.test(b.output()); i++) await new Promise((r) => setTimeout(r, 50)); // the line after the AMQP one
        expect(b.output()).to.match(/metrics and console on http:\/\/127\.0\.0\.1:\d+/);
      }
      expect(brokers[0].output().match(/http:\/\/\S+/)![0]).to.not.equal(brokers[1].output().match(/http:\/\/\S+/)![0]);
      let err: Error | undefined;
      try { await spawnBroker(['--port', '0', '--data', path.join(dir, 'a')], { timeoutMs: 10000 }); } catch (e) { err = e as Error; }
      expect(err?.message).to.match(/exited 1/);
      expect(err?.message).to.match(/data directory .*\ba\b is in use by another process/);
      // a port in use: which listener, which setting (it said only "listen EADDRINUSE")
      const port = new URL(brokers[0].url).port;
      err = undefined;
      try { await spawnBroker(['--port', port, '--data', path.join(dir, 'c')], { timeoutMs: 10000 }); } catch (e) { err = e as Error; }
      expect(err?.message).to.match(/exited 1/);
      expect(err?.message).to.include(`AMQP listener cannot bind 127.0.0.1:${port}: the port is in use (another broker?); choose another with --port or listen.port`);
    } finally {
      for (const b of brokers) await b.kill('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a reader of its output that went away: the broker keeps serving, and SIGTERM still stops it (exit 0)', async function () {
    const dir = tempDir();
    try {
      const b = await spawnBroker(['--port', '0', '--data', path.join(dir, 'data')]);
      b.proc.stdout!.destroy();
      b.proc.stderr!.destroy(); // as when the parent that started it dies
      const out = await send(b.url, 'pipe.q', [{ body: 'still here', durable: true }]);
      expect(out[0].state).to.equal('accepted');
      const exited = await Promise.race([b.kill('SIGTERM'), new Promise<string>((r) => setTimeout(() => r('still running 5 s after SIGTERM'), 5000))]);
      if (exited !== 0) b.proc.kill('SIGKILL');
      expect(exited).to.equal(0);
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });

  it('a bad flag or port: one Error: line and exit 1, before anything is opened', async function () {
    const dir = tempDir();
    try {
      for (const [args, want] of [
        [['--bogus-flag'], /^Error: Unknown argument: bogus-flag\n/],
        [['--port', '70000'], /^Error: --port expects a port number from 0 to 65535 \(0 = any free port\), got "70000"\n/],
        [['--port', 'abc'], /^Error: --port expects a port number from 0 to 65535 \(0 = any free port\), got "abc"\n/],
        [['--http', '--http-port=-3'], /^Error: --http-port expects a port number from 0 to 65535 \(0 = any free port\), got "-3"\n$/],
        // one line, as the tools write it (was "Invalid values:\n  Argument: …" and a second line "Run tidemark --help …")
        [['--log-level', 'loud'], /^Error: --log-level must be "silent", "error", "warn", "info" or "debug", got "loud"\n$/],
        [['--bogus'], /^Error: Unknown argument: bogus\n$/],
        [['--port', '1', '--port', '2'], /^Error: --port was given 2 times \("1", "2"\): give it once\n$/],
      ] as const) {
        let err: Error | undefined;
        try { await spawnBroker([...args, '--data', path.join(dir, 'd')], { timeoutMs: 10000 }); } catch (e) { err = e as Error; }
        expect(err?.message, args.join(' ')).to.match(/exited 1/);
        expect(err!.message.replace(/^broker exited 1: /, ''), args.join(' ')).to.match(want);
      }
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });

  it('a data directory that cannot be made (--data /proc/nope): one Error: line at once, not a mkdir loop at 100 % CPU', async function () {
    let err: Error | undefined;
    const t0 = Date.now();
    try { await spawnBroker(['--port', '0', '--data', '/proc/nope/d'], { timeoutMs: 10000 }); } catch (e) { err = e as Error; }
    expect(err?.message).to.match(/exited 1/);
    expect(err!.message.replace(/^broker exited 1: /, '')).to.match(/^Error: cannot create the data directory \/proc\/nope\/d: ENOENT: no such file or directory, mkdir '\/proc\/nope'\n$/);
    expect(Date.now() - t0).to.be.below(8000);
  });

  it('TIDEMARK_LOG_LEVEL wins over the config file, --log-level over both; a bad value is one Error: line', async function () {
    const dir = tempDir();
    try {
      const cfg = path.join(dir, 'c.json');
      writeFileSync(cfg, JSON.stringify({ logLevel: 'info' }));
      const infoLines = async (args: string[], env: Record<string, string>) => {
        const b = await spawnBroker(['--port', '0', '--data', path.join(dir, 'd'), '--config', cfg, ...args], { logLevelFlag: false, env });
        try {
          const c = await connect(b.url); c.close();
          await new Promise((r) => setTimeout(r, 200));
          return b.output().split('\n').filter((l) => l.includes('"level":"info"')).length;
        } finally { await b.kill('SIGTERM'); }
      };
      expect(await infoLines([], {}), 'the file says info').to.be.greaterThan(0);
      expect(await infoLines([], { TIDEMARK_LOG_LEVEL: 'warn' }), 'the variable says warn').to.equal(0);
      expect(await infoLines(['--log-level', 'info'], { TIDEMARK_LOG_LEVEL: 'warn' }), 'the flag says info').to.be.greaterThan(0);
      let err: Error | undefined;
      try { await spawnBroker(['--port', '0', '--data', path.join(dir, 'd')], { logLevelFlag: false, env: { TIDEMARK_LOG_LEVEL: 'loud' }, timeoutMs: 10000 }); } catch (e) { err = e as Error; }
      expect(err?.message).to.match(/exited 1: Error: TIDEMARK_LOG_LEVEL expects one of silent, error, warn, info, debug, got "loud"\n/);
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });

  it('a queue in config.queues the broker refuses: the error names config.queues and the queue', async function () {
    for (const [queues, want] of [
      [{ '': {} }, /^config\.queues\."": .*name/],
      [{ 'cq.sow': { arguments: { 'sow.key': '/id', 'qpid.max_count': 10 } } }, /^config\.queues\."cq\.sow": .*qpid\.max_count/],
    ] as const) {
      let err: Error | undefined;
      const dir = tempDir();
      try { const tb = await startTestBroker({ queues }, { dataDir: path.join(dir, 'd') }); await tb.stop(); } catch (e) { err = e as Error; }
      finally { rmSync(dir, { recursive: true, force: true }); }
      expect(err?.message, JSON.stringify(queues)).to.match(want);
    }
  });

  it('refuses a bad config file with an error naming the key, exit 1', async function () {
    const dir = tempDir();
    try {
      const cfg = path.join(dir, 'bad.json');
      (await import('node:fs')).writeFileSync(cfg, JSON.stringify({ limits: { maxFrameSize: 'big' } }));
      let err: Error | undefined;
      try { await spawnBroker(['--port', '0', '--data', path.join(dir, 'd'), '--config', cfg], { timeoutMs: 10000 }); } catch (e) { err = e as Error; }
      expect(err?.message).to.match(/exited 1/);
      expect(err?.message).to.contain('config.limits.maxFrameSize');
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });
});
