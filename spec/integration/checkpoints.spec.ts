import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openReceiver, collect, send, openSender, sendAll, sleep, type Received } from '../support/client.js';
import { tmFilters, cmdOf, scnOf, keyOf, bodyJson, sowQuery, checkpointOf } from '../support/sow-client.js';
import { runRetention } from '../../lib/ext/sow/index.js';

const sowQ = (name: string, args: Record<string, unknown> = {}) => ({ address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', ...args } });
const rec = (id: string, v: number) => ({ body: JSON.stringify({ id, v }) });
const FLEX = { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: -1, prevScn: -1, windowOffset: -1 };

/** Plain JS copy of a checkpoint annotation (rhea gives a map with typed longs unwrapped). */
const plainCp = (m: Received) => JSON.parse(JSON.stringify(checkpointOf(m), (_k, v) => {
  if (typeof v === 'bigint') return Number(v);
  // rhea decodes a long beyond 2^53 (tsNsecs) as its 8 bytes
  if (v && v.type === 'Buffer' && Array.isArray(v.data) && v.data.length === 8) return Number(Buffer.from(v.data).readBigInt64BE(0));
  return v;
}));

async function read(url: string, q: string, checkpoint: unknown, opts: { count?: number; until?: (m: Received) => boolean; idleMs?: number } = {}): Promise<Received[]> {
  const c = await connect(url);
  try {
    const rcv = await openReceiver(c, { address: q, filter: tmFilters({ checkpoint }) });
    return await collect(rcv, { idleMs: opts.idleMs ?? 700, credit: 200, count: opts.count, until: opts.until });
  } finally { await c.close(); }
}

/** Applies a checkpoint stream to a state map, as a Databus consumer would. */
function apply(state: Map<string, number>, msgs: Received[]): void {
  for (const m of msgs) {
    const cmd = cmdOf(m);
    const cp = checkpointOf(m) as any;
    // a full bootstrap (since 0) is the whole state again; an incremental one brings the changes
    if (cmd === 'group_begin' && cp?.consumption_mode === 'BOOTSTRAP_SNAPSHOT' && cp.snapshot_offset === undefined && !(Number(cp.bootstrap_since_scn) > 0)) state.clear();
    if (cmd === 'sow' || cmd === 'publish') state.set(keyOf(m), bodyJson(m).v);
    if (cmd === 'delete') state.delete(keyOf(m));
  }
}

describe('consumer checkpoints and bootstrap (semantics.md 8, wire.md 6)', function () {
  this.timeout(60000);
  const b = useBroker();

  it('a consumer that fell off gets an incremental bootstrap: the records changed since its position and tombstones for the keys deleted since, after a restart too', async function () {
    const q = 'cp.incr';
    const url = b.get().url;
    await send(url, sowQ(q, { 'log.max_count': 10 }), ['a1', 'a2', 'a3', 'a4', 'a5'].map((id) => rec(id, 1))); // SCN 1-5
    const mine = new Map<string, number>();
    const first = await read(url, q, FLEX, { count: 5 }); // flexible: online from the oldest
    apply(mine, first);
    expect([...mine.keys()]).to.deep.equal(['a1', 'a2', 'a3', 'a4', 'a5']); // the consumer's state after SCN 5
    const cp = plainCp(first[first.length - 1]);
    expect(cp).to.include({ consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 5, prevScn: 5 });
    await send(url, q, [{ message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id: 'a1' }) }, rec('a2', 2)]); // SCN 6, 7
    await send(url, q, Array.from({ length: 30 }, (_, i) => rec(`b${String(i).padStart(2, '0')}`, i))); // SCN 8-37
    await runRetention(b.get().broker);
    expect(b.get().broker.queueInfo(b.get().broker.nodes.get(q)!).scn_oldest).to.equal(28);
    const got = await read(url, q, cp, { until: (m) => cmdOf(m) === 'completed' });
    const begin = plainCp(got[0]);
    expect(cmdOf(got[0])).to.equal('group_begin');
    expect(begin).to.include({ consumption_mode: 'BOOTSTRAP_SNAPSHOT', bootstrap_since_scn: 6, bootstrap_start_scn: 37 });
    const snapshot = got.slice(1, got.findIndex((m) => cmdOf(m) === 'group_end'));
    // in key order: a1's tombstone, a2's new version, the b's; nothing for a3-a5 (unchanged)
    expect(snapshot.map((m) => `${cmdOf(m)} ${keyOf(m)} ${scnOf(m)}`)).to.deep.equal(['delete a1 6', 'sow a2 7', ...Array.from({ length: 30 }, (_, i) => `sow b${String(i).padStart(2, '0')} ${8 + i}`)]);
    for (const m of snapshot) expect(plainCp(m)).to.include({ bootstrap_since_scn: 6, snapshot_offset: keyOf(m) });
    apply(mine, got);
    const sow = new Map((await sowQuery(url, q)).records.map((m) => [keyOf(m), bodyJson(m).v] as [string, number]));
    expect(mine).to.deep.equal(sow);
    // resumed mid-snapshot (after b04): the same since, on from the next key
    const resumed = await read(url, q, plainCp(snapshot[6]), { until: (m) => cmdOf(m) === 'completed' });
    expect(plainCp(resumed[0])).to.include({ bootstrap_since_scn: 6, snapshot_offset: 'b04' });
    expect(keyOf(resumed[1])).to.equal('b05');
    // a filtered link gets its whole (filtered) state: a record changed to no longer match would otherwise stay
    const c = await connect(url);
    try {
      const rcv = await openReceiver(c, { address: q, filter: tmFilters({ checkpoint: cp, filter: '/v >= 0' }) });
      const filtered = await collect(rcv, { idleMs: 700, credit: 200, until: (m) => cmdOf(m) === 'completed' });
      expect(plainCp(filtered[0])).to.include({ bootstrap_since_scn: 0 });
      expect(filtered.filter((m) => cmdOf(m) === 'sow')).to.have.length(sow.size);
    } finally { await c.close(); }
    // a checkpoint without the time of its last event cannot show it is from this queue: full
    const { tsNsecs: _ts, ...noTs } = cp;
    const blind = await read(url, q, noTs, { until: (m) => cmdOf(m) === 'completed' });
    expect(plainCp(blind[0])).to.include({ bootstrap_since_scn: 0 });
    // the tombstones are stored: after a restart the same checkpoint gets the same incremental bootstrap
    await b.get().restart();
    const again = await read(b.get().url, q, cp, { until: (m) => cmdOf(m) === 'completed' });
    expect(plainCp(again[0])).to.include({ consumption_mode: 'BOOTSTRAP_SNAPSHOT', bootstrap_since_scn: 6, bootstrap_start_scn: 37 });
    const againSnap = again.slice(1, again.findIndex((m) => cmdOf(m) === 'group_end'));
    expect(againSnap.map((m) => `${cmdOf(m)} ${keyOf(m)} ${scnOf(m)}`)).to.deep.equal(snapshot.map((m) => `${cmdOf(m)} ${keyOf(m)} ${scnOf(m)}`));
    // deletes after the restart join them; a key deleted and re-created leaves no tombstone
    await send(b.get().url, q, [
      { message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id: 'a3' }) }, // SCN 38
      { message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id: 'b01' }) }, // SCN 39
      rec('b01', 99), // SCN 40
    ]);
    await b.get().restart();
    const later = await read(b.get().url, q, cp, { until: (m) => cmdOf(m) === 'completed' });
    expect(plainCp(later[0])).to.include({ bootstrap_since_scn: 6, bootstrap_start_scn: 40 });
    const laterSnap = later.slice(1, later.findIndex((m) => cmdOf(m) === 'group_end'));
    expect(laterSnap.filter((m) => cmdOf(m) === 'delete').map((m) => `${keyOf(m)} ${scnOf(m)}`)).to.deep.equal(['a1 6', 'a3 38']);
    const mine2 = new Map(mine);
    apply(mine2, later);
    const sow2 = new Map((await sowQuery(b.get().url, q)).records.map((m) => [keyOf(m), bodyJson(m).v] as [string, number]));
    expect(mine2).to.deep.equal(sow2);
    expect(sow2.get('b01')).to.equal(99);
  });

  it('a checkpoint from a queue since deleted and re-created (SCNs start again) gets a full bootstrap, not an incremental one', async function () {
    const q = 'cp.again';
    const url = b.get().url;
    await send(url, sowQ(q, { 'log.max_count': 20 }), Array.from({ length: 50 }, (_, i) => rec(`old${i}`, i)));
    const seen = await read(url, q, FLEX, { count: 50 });
    const cp = plainCp(seen[seen.length - 1]);
    expect(cp).to.include({ windowScn: 50 });
    await sleep(5); // the new queue's clock start is after the old queue's last event
    expect(await b.get().broker.nodes.delete(q)).to.equal(true);
    await send(url, sowQ(q, { 'log.max_count': 20 }), Array.from({ length: 100 }, (_, i) => rec(`new${i}`, i))); // SCN 1-100
    await runRetention(b.get().broker);
    const got = await read(url, q, cp, { until: (m) => cmdOf(m) === 'completed' });
    expect(plainCp(got[0])).to.include({ consumption_mode: 'BOOTSTRAP_SNAPSHOT', bootstrap_since_scn: 0 });
    const state = new Map<string, number>();
    for (let i = 0; i < 50; i++) state.set(`old${i}`, i);
    apply(state, got);
    expect([...state.keys()].sort()).to.deep.equal(Array.from({ length: 100 }, (_, i) => `new${i}`).sort());
  });

  it('every message carries its checkpoint; re-attaching with any of them resumes with no gap and no duplicate', async function () {
    const url = b.get().url;
    await send(url, sowQ('cp.online'), Array.from({ length: 20 }, (_, i) => rec(`k${i % 5}`, i)));
    const first = await read(url, 'cp.online', FLEX, { count: 7 });
    expect(first.map(scnOf)).to.deep.equal([1, 2, 3, 4, 5, 6, 7]);
    const cp7 = plainCp(first[6]);
    expect(cp7).to.include({ consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 7, prevScn: 7, windowOffset: -1 });
    const rest = await read(url, 'cp.online', cp7);
    expect(rest.map(scnOf)).to.deep.equal(Array.from({ length: 13 }, (_, i) => i + 8));
    // a checkpoint as JSON text works the same way
    const fromJson = await read(url, 'cp.online', JSON.stringify(plainCp(rest[10])));
    expect(fromJson.map(scnOf)).to.deep.equal([19, 20]);
  });

  it('invalid checkpoints are amqp:invalid-field naming the field', async function () {
    const url = b.get().url;
    await send(url, sowQ('cp.bad'), [rec('a', 1)]);
    const c = await connect(url);
    try {
      for (const [cp, field] of [
        [{ consumption_mode: 'SIDEWAYS', windowScn: 1, prevScn: 1, windowOffset: -1 }, 'consumption_mode'],
        [{ consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 1, prevScn: 2, windowOffset: 0 }, 'prevScn'],
        [{ consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 'x', prevScn: 1, windowOffset: -1 }, 'windowScn'],
        [{ consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: 1, prevScn: 1, windowOffset: -1, bootstrap_start_scn: 1 }, 'bootstrap_target_scn'],
        [{ colour: 'red' }, 'colour'],
      ] as const) {
        let err: any;
        try { await openReceiver(c, { address: 'cp.bad', filter: tmFilters({ checkpoint: cp }) }); } catch (e) { err = e; }
        expect(err?.condition, JSON.stringify(cp)).to.equal('amqp:invalid-field');
        expect(err?.message).to.contain(field);
      }
    } finally { await c.close(); }
  });

  it('a position older than the log on a queue without SOW is tidemark:scn-not-found', async function () {
    const url = b.get().url;
    await send(url, { address: 'cp.plain', capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.browse-only': true, 'qpid.max_count': 3, 'qpid.policy_type': 'ring' } }, Array.from({ length: 10 }, (_, i) => ({ body: i })));
    const c = await connect(url);
    try {
      let err: any;
      try { await openReceiver(c, { address: 'cp.plain', filter: tmFilters({ checkpoint: { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 2, prevScn: 2, windowOffset: -1 } }) }); } catch (e) { err = e; }
      expect(err?.condition).to.equal('tidemark:scn-not-found');
    } finally { await c.close(); }
    const ok = await read(url, 'cp.plain', { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 8, prevScn: 8, windowOffset: -1 });
    expect(ok.map((m) => m.message.body)).to.deep.equal([8, 9]);
  });

  it('falling off the log bootstraps (snapshot, catch-up, online) while a publisher writes; state ends equal to the SOW', async function () {
    const url = b.get().url;
    const q = 'cp.boot';
    await send(url, sowQ(q, { 'log.max_count': 20 }), Array.from({ length: 60 }, (_, i) => rec(`k${i % 15}`, i)));
    await runRetention(b.get().broker);
    const pc = await connect(url);
    const sender = await openSender(pc, { address: q });
    let stop = false, n = 1000;
    const publisher = (async () => { while (!stop && n < 1300) { await sendAll(sender, [rec(`k${n % 15}`, n), rec(`x${n % 7}`, n)]); n++; } })();
    const state = new Map<string, number>();
    // first pass: a consumer that fell off, killed mid-snapshot after 5 records
    const part1 = await read(url, q, { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 3, prevScn: 3, windowOffset: -1 }, { until: (m) => cmdOf(m) === 'sow' && Number(plainCp(m).snapshot_offset !== undefined) === 1 && (checkpointOf(m) as any).snapshot_offset === 'k12' });
    expect(cmdOf(part1[0])).to.equal('group_begin');
    expect(plainCp(part1[0]).consumption_mode).to.equal('BOOTSTRAP_SNAPSHOT');
    apply(state, part1);
    const cpSnap = plainCp(part1[part1.length - 1]);
    expect(cpSnap).to.include({ consumption_mode: 'BOOTSTRAP_SNAPSHOT', snapshot_offset: 'k12' });
    // second pass: resume the snapshot, then stop somewhere in catch-up or online
    const part2 = await read(url, q, cpSnap, { count: 12 });
    apply(state, part2);
    const last = part2[part2.length - 1];
    expect(keyOf(part2[0]) > 'k12' || cmdOf(part2[0]) === 'group_begin').to.equal(true);
    // third pass: resume from the last checkpoint and read until quiet
    stop = true;
    await publisher;
    await pc.close();
    const part3 = await read(url, q, plainCp(last), { idleMs: 1500 });
    apply(state, part3);
    const final = await sowQuery(url, q);
    expect(Object.fromEntries(state)).to.deep.equal(Object.fromEntries(final.records.map((m) => [keyOf(m), bodyJson(m).v])));
    const modes = [...part2, ...part3].map((m) => (checkpointOf(m) as any)?.consumption_mode).filter(Boolean);
    expect(modes[modes.length - 1]).to.equal('ONLINE_CONSUMPTION');
  });
});

void sleep;
