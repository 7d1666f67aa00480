/**
 * A bounded protocol fuzzer (acceptance E.2): N seeded random or mutated frame sequences,
 * each on its own socket with a short time-out, against a child-process broker; afterwards
 * (and every 50 cases) a control client must still publish and receive, the broker must
 * still accept connections, and nothing may have escaped to its uncaught-exception handler.
 *
 *   TIDEMARK_FUZZ_N=300      number of sequences (default 300)
 *   TIDEMARK_FUZZ_SEED=1234  PRNG seed (default fixed, so runs repeat; printed on failure)
 *
 * See docs/robustness.md for the long run.
 */
import { expect } from 'chai';
import { writeFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { spawnBroker, tempDir, type ChildBroker } from '../support/broker.js';
import { connect, openSender, openReceiver, sendAll, collect, type Conn } from '../support/client.js';
import * as F from '../support/amqp-frames.js';
import { RawClient, t } from '../support/amqp-frames.js';
import { prng } from '../../tools/crash/common.js'; // the seeded PRNG the crash test uses

const N = Number(process.env.TIDEMARK_FUZZ_N ?? 300);
const SEED = Number(process.env.TIDEMARK_FUZZ_SEED ?? 0x7de3a);
const CONCURRENCY = 8;
const CASE_MS = 150;

type Rand = () => number;
const int = (r: Rand, n: number) => Math.floor(r() * n);
const pick = <T>(r: Rand, xs: readonly T[]): T => xs[int(r, xs.length)];

const ADDRESSES = ['fuzz.a', 'fuzz.b', 'fuzz.c'];

/** A valid sequence to start from: header, open, begin, then some link traffic. */
function validSequence(r: Rand): Buffer[] {
  const addr = t.str(pick(r, ADDRESSES));
  const seq: Buffer[] = [F.AMQP_HEADER, F.open({ containerId: t.str('fz-' + int(r, 1e9)) }), F.begin(0)];
  const kind = int(r, 4);
  if (kind === 0 || kind === 1) {
    seq.push(F.attach({ name: t.str('fz-s' + int(r, 1e6)), handle: t.uint(0), role: t.bool(false), target: F.target({ address: addr }) }));
    const n = 1 + int(r, 4);
    for (let i = 0; i < n; i++) seq.push(F.transfer({ handle: t.uint(0), deliveryId: t.uint(i), tag: t.bin(Buffer.from([i])), payload: F.amqpValueMessage('fuzz-' + i), settled: t.bool(kind === 1) }));
  } else if (kind === 2) {
    seq.push(F.attach({ name: t.str('fz-r' + int(r, 1e6)), handle: t.uint(0), role: t.bool(true), source: F.source({ address: addr }), target: F.target() }));
    // Credit small enough to be fair to the queue; accepted messages would be lost, so no disposition.
    seq.push(F.flow({ handle: t.uint(0), linkCredit: t.uint(int(r, 3)), deliveryCount: t.uint(0), drain: t.bool(r() < 0.3) }));
  } else {
    seq.push(F.attach({ name: t.str('fz-x' + int(r, 1e6)), handle: t.uint(0), role: t.bool(false), target: F.target({ address: addr, capabilities: t.sym('create-on-demand'), dynamicNodeProperties: t.map({ 'qpid.max_count': int(r, 5) }) }) }));
  }
  if (r() < 0.5) seq.push(F.detach(0));
  if (r() < 0.3) seq.push(F.end(0));
  if (r() < 0.2) seq.push(F.close());
  return seq;
}

/** Mutations on one frame (never on the protocol header, which has its own cases). */
const mutators: Array<(r: Rand, b: Buffer) => Buffer> = [
  // flip 1-4 random bytes
  (r, b) => { const c = Buffer.from(b); for (let i = 0, n = 1 + int(r, 4); i < n; i++) c[int(r, c.length)] ^= 1 << int(r, 8); return c; },
  // truncate
  (r, b) => b.subarray(0, int(r, b.length)),
  // lie about the size
  (r, b) => { const c = Buffer.from(b); c.writeUInt32BE(pick(r, [0, 1, 7, 8, c.length - 1, c.length + 1, c.length * 2, 0xffff, 0x7fffffff, 0xffffffff, int(r, 0x100000)]) >>> 0, 0); return c; },
  // change the descriptor code (byte after 0x00 0x53 at the doff offset)
  (r, b) => { const c = Buffer.from(b); const at = c[4] * 4; if (at + 2 < c.length && c[at] === 0x00) c[at + 2] = pick(r, [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x1d, 0x23, 0x28, 0x40, 0x41, 0x44, 0x77, int(r, 256)]); return c; },
  // change doff or frame type or channel
  (r, b) => { const c = Buffer.from(b); const which = int(r, 3); if (which === 0) c[4] = int(r, 256); else if (which === 1) c[5] = int(r, 4); else c.writeUInt16BE(int(r, 0x10000), 6); return c; },
  // insert random bytes inside
  (r, b) => { const at = int(r, b.length); const junk = Buffer.from(Array.from({ length: 1 + int(r, 16) }, () => int(r, 256))); return Buffer.concat([b.subarray(0, at), junk, b.subarray(at)]); },
  // change a type code somewhere in the body to another valid-looking one
  (r, b) => { const c = Buffer.from(b); if (c.length > 10) c[10 + int(r, c.length - 10)] = pick(r, [0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x50, 0x52, 0x53, 0x70, 0x80, 0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xc0, 0xc1, 0xd0, 0xd1, 0xe0, 0xf0]); return c; },
];

/** One fuzz case: a valid sequence with mutations, or pure random bytes after a header. */
export function fuzzCase(seed: number): Buffer[] {
  const r = prng(seed);
  const style = r();
  if (style < 0.1) {
    const junk = Buffer.from(Array.from({ length: int(r, 200) }, () => int(r, 256)));
    return [pick(r, [F.AMQP_HEADER, F.SASL_HEADER, Buffer.alloc(0)]), junk];
  }
  const seq = validSequence(r);
  const mutations = 1 + int(r, 3);
  for (let m = 0; m < mutations; m++) {
    const op = r();
    if (op < 0.8) {
      const i = 1 + int(r, seq.length - 1);
      const mutate = pick(r, mutators);
      try { seq[i] = mutate(r, seq[i]); } catch { seq[i] = Buffer.concat([seq[i], Buffer.from([int(r, 256)])]); } // frame too short for that mutation
    } else if (op < 0.9) {
      const i = 1 + int(r, seq.length - 1);
      seq.splice(i, 0, seq[i]); // duplicate a frame
    } else {
      const i = 1 + int(r, seq.length - 1), j = 1 + int(r, seq.length - 1);
      [seq[i], seq[j]] = [seq[j], seq[i]]; // reorder
    }
  }
  return seq;
}

async function runCase(port: number, frames: Buffer[]): Promise<void> {
  const c = await RawClient.connect(port);
  try {
    // Write in one or several chunks to exercise partial-frame reassembly.
    const all = Buffer.concat(frames);
    const cut = all.length > 2 ? 1 + (all.length * 7919 % (all.length - 1)) : all.length;
    c.write(all.subarray(0, cut));
    await new Promise((res) => setImmediate(res));
    c.write(all.subarray(cut));
    await c.waitClosed(CASE_MS);
  } finally { c.destroy(); }
}

describe(`protocol fuzzer (N=${N}, seed=${SEED})`, function () {
  this.timeout(Math.max(60000, N * 400));
  let broker: ChildBroker;
  let dir: string;
  let control: Conn;
  let sender: any, receiver: any;
  let controlErrors: string[] = [];
  let seq = 0;

  before(async function () {
    dir = tempDir('tidemark-fuzz-');
    const cfg = path.join(dir, 'broker.json');
    writeFileSync(cfg, JSON.stringify({ limits: { maxFrameSize: 65536, maxMessageSize: 65536, maxLinksPerSession: 16, maxConnections: 200 } }));
    broker = await spawnBroker(['--port', '0', '--data', path.join(dir, 'data'), '--config', cfg]);
    control = await connect(broker.url);
    for (const ev of ['connection_error', 'disconnected', 'session_error', 'sender_error', 'receiver_error', 'sender_close', 'receiver_close']) control.connection.on(ev, () => controlErrors.push(ev));
    sender = await openSender(control, { address: 'fuzz.control' });
    receiver = await openReceiver(control, { address: 'fuzz.control' });
  });
  after(async function () {
    await control?.close();
    await broker?.kill('SIGTERM');
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  // Round trips run one at a time (workers may ask concurrently).
  let rtChain: Promise<void> = Promise.resolve();
  function roundTrip(): Promise<void> {
    const p = rtChain.then(roundTripOnce);
    rtChain = p.catch(() => undefined);
    return p;
  }
  async function roundTripOnce(): Promise<void> {
    const bodies = Array.from({ length: 5 }, () => `ctl-${seq++}`);
    const got = collect(receiver, { count: 5, idleMs: 3000 });
    const outcomes = await sendAll(sender, bodies.map((body) => ({ body })));
    expect(outcomes.map((o) => o.state)).to.deep.equal(Array(5).fill('accepted'));
    expect((await got).map((m) => m.message.body)).to.deep.equal(bodies);
    expect(controlErrors).to.deep.equal([]);
  }

  it(`survives ${N} random and mutated frame sequences`, async function () {
    let next = 0;
    const worker = async () => {
      while (next < N) {
        const i = next++;
        const caseSeed = (SEED + i * 0x9e3779b1) >>> 0;
        try { await runCase(broker.port, fuzzCase(caseSeed)); }
        catch (e) { throw new Error(`fuzz case ${i} (case seed ${caseSeed}, run seed ${SEED}): ${(e as Error).message}`); }
        expect(broker.proc.exitCode, `broker exited during case ${i} (seed ${caseSeed}):\n${broker.output()}`).to.equal(null);
        if (i % 50 === 49) await roundTrip();
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    await roundTrip();
    const fresh = await RawClient.connect(broker.port);
    await fresh.handshake();
    expect(fresh.find('begin'), 'broker still opens sessions').to.not.equal(undefined);
    fresh.destroy();
    expect(broker.proc.exitCode).to.equal(null);
    expect(broker.output(), 'nothing escaped to the uncaught-exception handler').to.not.match(/uncaught exception|unhandled rejection/);
  });
});
