/** lib/core/storage/idle-compaction.ts: what is written gets compacted once quiet, within bounds. */
import { expect } from 'chai';
import { IdleCompactor } from '../../../lib/core/storage/idle-compaction.js';
import { Store } from '../../../lib/core/storage/store.js';
import { scnKey, queueKey } from '../../../lib/core/storage/keyspace.js';
import { tempDir } from '../../support/broker.js';
import { rmSync } from 'node:fs';
import type { BatchOp } from '../../../lib/core/storage/store.js';

const MiB = 1024 * 1024;
const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));
/** Polls until `cond` holds (timers may run late on a loaded machine). */
async function waitFor(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  for (const t0 = Date.now(); !cond(); await sleep(5)) if (Date.now() - t0 > ms) throw new Error('timed out waiting for ' + what);
}

/** A store that records what it is asked; sizes per range from a table; `hold` keeps the next compaction running until released. */
function fakeStore(sizes: Record<string, number> = {}) {
  const calls: string[] = [];
  let held: (() => void) | undefined;
  const st = {
    calls,
    hold: false,
    release() { const r = held; held = undefined; r?.(); },
    async approximateSize(gte: Buffer) { return sizes[gte.toString('hex')] ?? 1000; },
    async compactRange(gte: Buffer, lt: Buffer) {
      calls.push(`${gte.toString('hex')}-${lt.toString('hex')}`);
      if (st.hold) { st.hold = false; await new Promise<void>((res) => { held = res; }); }
    },
  };
  return st;
}

/** `n` puts of `size` bytes into table `tag` of queue `qid`. */
function puts(tag: number, qid: number, n: number, size: number): BatchOp[] {
  return Array.from({ length: n }, (_, i) => ({ type: 'put' as const, key: scnKey(tag, qid, i), value: Buffer.alloc(size) }));
}

describe('IdleCompactor', () => {
  it('forgets a deleted queue\'s ranges, and keeps no pooled slab per range', async () => {
    // Each range listed kept a 5-byte slice of Node's 8 KiB buffer pool, and a deleted
    // queue's ranges stayed listed until a pass: 8 KiB for every queue ever written to.
    const c = new IdleCompactor(fakeStore(), { idleMs: 60000, afterMB: 64, maxMB: 512 });
    c.written([...puts(0x10, 7, 2, 10), ...puts(0x20, 7, 2, 10), ...puts(0x10, 8, 2, 10), ...puts(0x21, 8, 2, 10)]);
    expect(c.pendingRanges).to.equal(4);
    c.forgetQueue(7);
    expect(c.pendingRanges).to.equal(2);
    c.forgetQueue(8);
    expect(c.pendingRanges).to.equal(0);
    await c.close();
  });

  it('one batch interleaving many ranges (more than it sums in its own list) counts each range\'s bytes to that range', async () => {
    // 12 queues, ops interleaved as a SOW publish's are: each range gets 10 x ~1 KiB. A range
    // whose fake size is 5 KiB holds less than was written to it (compacted); one of 20 KiB
    // holds more (left to LevelDB). Wrongly summed bytes would flip one of the two.
    const sizes: Record<string, number> = {};
    for (let q = 1; q <= 12; q++) sizes[Buffer.from([0x10, 0, 0, 0, q]).toString('hex')] = q % 2 ? 5 * 1024 : 20 * 1024;
    const st = fakeStore(sizes);
    const c = new IdleCompactor(st, { idleMs: 10, afterMB: 0.1, maxMB: 512 });
    const ops: BatchOp[] = [];
    for (let i = 0; i < 10; i++) for (let q = 1; q <= 12; q++) ops.push({ type: 'put', key: scnKey(0x10, q, i), value: Buffer.alloc(1000) });
    c.written(ops);
    expect(c.pendingRanges).to.equal(12);
    await waitFor(() => c.stats.passes === 1, 'a pass');
    expect(st.calls.map((x) => parseInt(x.slice(8, 10), 16)).sort((a, b) => a - b)).to.deep.equal([1, 3, 5, 7, 9, 11]);
    expect(c.stats).to.include({ ranges: 6, older: 6 });
    await c.close();
  });

  it('once afterMB are written and nothing follows for idleMs, compacts exactly the [table][queue] ranges written', async () => {
    const st = fakeStore();
    const c = new IdleCompactor(st, { idleMs: 30, afterMB: 1, maxMB: 512 });
    c.written(puts(0x10, 7, 600, 1000)); // 0.6 MiB: not yet
    c.written([{ type: 'put', key: Buffer.from([0x01, 0x41]), value: Buffer.alloc(10) }]); // a broker-wide table: not tracked
    await sleep(60);
    expect(st.calls).to.deep.equal([]);
    c.written(puts(0x21, 7, 300, 1000));
    c.written(puts(0x10, 9, 200, 1000));
    await waitFor(() => c.stats.passes === 1, 'a pass');
    expect(st.calls).to.deep.equal(['1000000007-1000000008', '2100000007-2100000008', '1000000009-100000000a']);
    expect(c.stats).to.include({ passes: 1, ranges: 3 });
    await sleep(60);
    expect(st.calls, 'nothing more without new writes').to.have.length(3);
    await c.close();
  });

  it('every batch pushes the quiet moment back', async () => {
    const st = fakeStore();
    const c = new IdleCompactor(st, { idleMs: 300, afterMB: 0.1, maxMB: 512 });
    for (let i = 0; i < 6; i++) { c.written(puts(0x10, 1, 200, 1000)); await sleep(20); }
    expect(st.calls).to.deep.equal([]); // 6 x 20 ms, each under the 300 ms quiet time
    await waitFor(() => st.calls.length === 1, 'the pass');
    await c.close();
  });

  it('a client reading (no writes) also holds the pass back, and a client turning up ends a pass between ranges', async () => {
    const st = fakeStore();
    const c = new IdleCompactor(st, { idleMs: 150, afterMB: 0.1, maxMB: 512 });
    c.written([...puts(0x10, 1, 200, 1000), ...puts(0x10, 2, 200, 1000)]);
    for (let i = 0; i < 8; i++) { await sleep(40); c.activity(); } // a query streaming for 320 ms
    expect(st.calls, 'no pass while a client is active').to.deep.equal([]);
    st.hold = true;
    await waitFor(() => st.calls.length === 1, 'the pass, once quiet');
    c.activity(); // a client arrives while the first range is compacted
    st.release();
    await sleep(20);
    expect(st.calls, 'the pass stopped after the range it was on').to.have.length(1);
    await waitFor(() => st.calls.length === 2, 'the rest at the next quiet moment');
    await c.close();
  });

  it('leaves a range larger than maxMB to LevelDB', async () => {
    const big = Buffer.from([0x21, 0, 0, 0, 3]).toString('hex');
    const st = fakeStore({ [big]: 600 * MiB });
    const c = new IdleCompactor(st, { idleMs: 10, afterMB: 0.1, maxMB: 512 });
    c.written(puts(0x21, 3, 200, 1000));
    c.written(puts(0x10, 3, 200, 1000));
    await waitFor(() => c.stats.passes === 1, 'a pass');
    expect(st.calls).to.deep.equal(['1000000003-1000000004']);
    expect(c.stats.skipped).to.equal(1);
    await c.close();
  });

  it('leaves a range holding more than was written to it since its last compaction to LevelDB, until enough is written', async () => {
    const old = Buffer.from([0x21, 0, 0, 0, 5]).toString('hex');
    const st = fakeStore({ [old]: 5 * MiB }); // an old 5 MiB history range that takes a burst
    const c = new IdleCompactor(st, { idleMs: 10, afterMB: 1, maxMB: 512 });
    c.written(puts(0x21, 5, 1000, 2000)); // ~2 MiB into it
    c.written(puts(0x10, 5, 1000, 1000)); // ~1 MiB into a range that is all new (fake size 1000 bytes)
    await waitFor(() => c.stats.passes === 1, 'a pass');
    expect(st.calls).to.deep.equal(['1000000005-1000000006']);
    expect(c.stats.older).to.equal(1);
    c.written(puts(0x21, 5, 1000, 2000)); // ~4 MiB written to it in all: still less than it holds
    await waitFor(() => c.stats.passes === 2, 'a second pass');
    expect(st.calls).to.have.length(1);
    c.written(puts(0x21, 5, 1000, 2000)); // ~6 MiB: now more than it holds
    await waitFor(() => c.stats.passes === 3, 'a third pass');
    expect(st.calls).to.deep.equal(['1000000005-1000000006', '2100000005-2100000006']);
    await c.close();
  });

  it('a batch during a pass ends it; the rest is compacted at the next quiet moment, however little was written', async () => {
    const st = fakeStore();
    const c = new IdleCompactor(st, { idleMs: 20, afterMB: 0.5, maxMB: 512 });
    st.hold = true; // the first compaction runs until released
    c.written([...puts(0x10, 1, 300, 1000), ...puts(0x10, 2, 300, 1000), ...puts(0x10, 3, 10, 1000)]);
    await waitFor(() => st.calls.length === 1, 'the first compaction');
    c.written(puts(0x10, 4, 1, 2000)); // a little (far below afterMB; above the fake range size), during the pass
    st.release();
    await sleep(5);
    expect(st.calls, 'the pass stopped after queue 1').to.have.length(1);
    await waitFor(() => st.calls.length === 4, 'the rest');
    expect(st.calls.map((x) => x.slice(8, 10))).to.deep.equal(['01', '02', '03', '04']);
    await c.close();
  });

  it('idleMs 0 is off; close() stops a pending pass', async () => {
    const st = fakeStore();
    const off = new IdleCompactor(st, { idleMs: 0, afterMB: 0, maxMB: 512 });
    off.written(puts(0x10, 1, 100, 1000));
    const c = new IdleCompactor(st, { idleMs: 30, afterMB: 0, maxMB: 512 });
    c.written(puts(0x10, 2, 100, 1000));
    await c.close();
    await sleep(60);
    expect(st.calls).to.deep.equal([]);
  });

  it('works on the real store: the compaction runs and the data reads back the same', async () => {
    const dir = tempDir();
    const store = await Store.open(dir);
    try {
      const c = new IdleCompactor(store, { idleMs: 20, afterMB: 1, maxMB: 512 });
      for (let b = 0; b < 10; b++) {
        const ops = puts(0x10, 5, 500, 300).map((o, i) => ({ ...o, key: queueKey(0x10, 5, Buffer.from(`${b}-${i}`)) }));
        await store.batch(ops, false);
        c.written(ops);
      }
      await waitFor(() => c.stats.ranges === 1, 'the compaction');
      const rows = await store.all({ gte: queueKey(0x10, 5, Buffer.alloc(0)), lt: queueKey(0x10, 6, Buffer.alloc(0)), keysOnly: true });
      expect(rows).to.have.length(5000);
      await c.close();
    } finally { await store.close(); rmSync(dir, { recursive: true, force: true }); }
  });
});
