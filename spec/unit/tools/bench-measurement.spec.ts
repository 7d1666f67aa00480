/**
 * What tidemark-bench measures, against a small in-process rhea "broker" that answers as
 * a test asks: outcomes other than accepted, dispositions held back, credit withheld, a
 * queue left with messages, a connection dropped mid-run. Session 24 review of the bench
 * (docs/robustness.md 14, "tidemark-bench").
 */
import { expect } from 'chai';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import * as W from '../../../tools/bench/lib/workloads.js';
import { percentile } from '../../../tools/bench/lib/stats.js';
import type { Progress } from '../../../tools/bench/lib/progress.js';

const rhea = createRequire(import.meta.url)('rhea');
const quiet = { begin() {}, update() {}, end() {} } as unknown as Progress;

type Outcome = 'accept' | 'reject' | 'release' | 'modify';
interface FakeOpts {
  /** outcome of the i-th message received (default accept) */
  outcome?: (i: number) => Outcome;
  /** ms before publishers get any credit */
  holdCreditMs?: number;
  /** settle received messages in batches, once per tick of this many ms (default: at once) */
  settleEveryMs?: number;
  /** destroy the consumer's socket after this many deliveries */
  dropAfter?: number;
}

/** An in-memory single-queue broker: accepted messages are queued, consumers take them in order. */
async function fakeBroker(opts: FakeOpts = {}) {
  const container = rhea.create_container({ id: 'fake-broker' });
  const queue: any[] = [];
  const consumers = new Set<any>();
  let received = 0; let unsettled = 0; let maxUnsettled = 0; let delivered = 0;
  const pending: Array<[any, Outcome]> = [];
  const settle = () => {
    for (const [d, o] of pending.splice(0)) {
      unsettled--;
      if (o === 'accept') d.accept(); else if (o === 'reject') d.reject({ condition: 'amqp:precondition-failed', description: 'no' });
      else if (o === 'release') d.release(); else d.modified({ delivery_failed: true });
    }
  };
  const timer = opts.settleEveryMs ? setInterval(settle, opts.settleEveryMs) : undefined;
  const feed = () => {
    for (const s of consumers) {
      while (queue.length && s.sendable()) {
        s.send(queue.shift());
        if (opts.dropAfter !== undefined && ++delivered >= opts.dropAfter) { s.connection.socket?.destroy(); consumers.delete(s); break; }
      }
      if (!queue.length) s.set_drained(true);
    }
  };
  container.on('receiver_open', (ctx: any) => {
    ctx.receiver.set_target(ctx.receiver.remote.attach.target ?? {});
    setTimeout(() => ctx.receiver.add_credit(100000), opts.holdCreditMs ?? 0);
  });
  container.on('sender_open', (ctx: any) => { ctx.sender.set_source(ctx.sender.remote.attach.source ?? {}); consumers.add(ctx.sender); });
  container.on('sendable', feed);
  container.on('sender_draining', feed);
  container.on('sender_close', (ctx: any) => consumers.delete(ctx.sender));
  container.on('disconnected', (ctx: any) => { for (const s of [...consumers]) if (s.connection === ctx.connection) consumers.delete(s); });
  container.on('message', (ctx: any) => {
    const o = opts.outcome?.(received) ?? 'accept';
    received++;
    unsettled++; maxUnsettled = Math.max(maxUnsettled, unsettled);
    if (o === 'accept') queue.push(ctx.message);
    pending.push([ctx.delivery, o]);
    if (!opts.settleEveryMs) settle();
    feed();
  });
  const server = container.listen({ port: 0, host: '127.0.0.1', credit_window: 0, autoaccept: false });
  await new Promise<void>((res) => server.once('listening', () => res()));
  const port = (server.address() as AddressInfo).port;
  const target: W.Target = { side: 'B', url: `amqp://127.0.0.1:${port}`, address: 'q', declare: 'none', tidemark: false, product: 'fake', sowProps: {} };
  return {
    target, queue,
    stats: () => ({ received, maxUnsettled }),
    close: () => { if (timer) clearInterval(timer); server.close(); },
  };
}

describe('bench: what the workloads measure (fake broker)', function () {
  this.timeout(20000);
  const load = (count: number, window: number): W.Load => ({ count, size: 100, keys: 10, window });

  it('publish counts each outcome once, only accepted in the rate, and keeps at most W unsettled', async () => {
    // Every 4th message modified, every 7th rejected, every 11th released; dispositions held
    // back a few ms so that the window is what limits the publisher.
    const kind = (i: number): Outcome => (i % 4 === 3 ? 'modify' : i % 7 === 6 ? 'reject' : i % 11 === 10 ? 'release' : 'accept');
    const b = await fakeBroker({ outcome: kind, settleEveryMs: 3 });
    try {
      const res = await W.publish(b.target, 'q', load(2000, 50), quiet);
      const want = { accept: 0, reject: 0, release: 0, modify: 0 };
      for (let i = 0; i < 2000; i++) want[kind(i)]++;
      expect(b.stats().received).to.equal(2000);
      expect({ accepted: res.accepted, rejected: res.rejected, released: res.released, modified: res.modified })
        .to.deep.equal({ accepted: want.accept, rejected: want.reject, released: want.release, modified: want.modify });
      expect(res.rate).to.be.closeTo(res.accepted / res.seconds, 1e-6);
      expect(b.stats().maxUnsettled, 'unsettled at the broker').to.be.at.most(50);
      expect(res.max_unsettled).to.be.at.most(50);
    } finally { b.close(); }
  });

  it('consume reads exactly the messages asked for when the broker sends them with its attach', async () => {
    const b = await fakeBroker();
    try {
      await W.publish(b.target, 'q', load(500, 100), quiet);
      const res = await W.consume(b.target, 'q', 500, 100, quiet);
      expect(res.received).to.equal(500);
    } finally { b.close(); }
  });

  it('a broker that drops the connection mid-consume fails the run at once, naming the loss', async () => {
    const b = await fakeBroker({ dropAfter: 100 });
    try {
      await W.publish(b.target, 'q', load(500, 100), quiet);
      const t0 = performance.now();
      let err: Error | undefined;
      try { await W.consume(b.target, 'q', 500, 100, quiet); } catch (e) { err = e as Error; }
      expect(err?.message).to.match(/consume from q: connection lost/);
      expect(performance.now() - t0, 'failed without waiting for the stall timeout').to.be.below(5000);
    } finally { b.close(); }
  });

  it('latency counts from the scheduled send time: a publisher held back is not hidden (coordinated omission)', async () => {
    // No credit for the first 400 ms: the first ~400 messages of a 1000/s run wait that long.
    const b = await fakeBroker({ holdCreditMs: 400 });
    try {
      const res = await W.latency(b.target, 'q', load(0, 1000), 1000, 600, quiet);
      expect(res.received).to.equal(600);
      expect(res.max_ms).to.be.above(300);
      expect(res.p50_ms).to.be.above(50);
    } finally { b.close(); }
  });

  it('drainQueue empties what an earlier round left, so consume reads this round\'s messages', async () => {
    const b = await fakeBroker();
    try {
      await W.publish(b.target, 'q', load(300, 100), quiet); // "an earlier round" never consumed
      expect(await W.drainQueue(b.target, 'q', 100)).to.equal(300);
      expect(b.queue.length).to.equal(0);
      expect(await W.drainQueue(b.target, 'q', 100)).to.equal(0);
    } finally { b.close(); }
  });
});

describe('bench: statistics and /proc', () => {
  it('percentile by nearest rank, p99.9 of 5000 samples is the 4995th', () => {
    const sorted = Float64Array.from({ length: 5000 }, (_, i) => i + 1);
    expect(percentile(sorted, 50)).to.equal(2500);
    expect(percentile(sorted, 99)).to.equal(4950);
    expect(percentile(sorted, 99.9)).to.equal(4995);
    expect(percentile(Float64Array.from({ length: 2000 }, (_, i) => i + 1), 99.9)).to.equal(1998);
    expect(percentile([7], 99.9)).to.equal(7);
  });

  it('a Float64Array sorts by value (latency samples are not sorted as strings)', () => {
    expect([...Float64Array.from([10, 9, 100, 1.5]).sort()]).to.deep.equal([1.5, 9, 10, 100]);
  });

  it('broker CPU from /proc/PID/stat: utime + stime in CLK_TCK ticks, a command name with spaces and parentheses', () => {
    const stat = '1234 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 250 50 7000 7000 20 0 1 0';
    expect(W.cpuMsFromStat(stat, 100)).to.equal(3000);
    expect(W.cpuMsFromStat(stat, 250)).to.equal(1200);
    expect(W.clockTicks()).to.be.a('number').and.greaterThan(0);
  });
});
