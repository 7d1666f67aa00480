/**
 * Graceful degradation (issue 8): when a LevelDB batch fails (disk full, I/O error — here the
 * test-only fault injector in lib/core/storage/store.ts), publishers get `rejected` with a
 * description, nothing accepted is lost (in memory or after a restart), and publishing
 * works again once the fault clears. Covers the in-memory undo of the list structure
 * (standard, LVQ, ring) and of the SOW structure, and acknowledgements made during the fault.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openSender, sendAll, openReceiver, collect, sleep, type Outcome } from '../support/client.js';
import { sowQuery, bodyJson } from '../support/sow-client.js';
import { setFaultInjector } from '../../lib/core/storage/store.js';

const diskFull = () => Object.assign(new Error('IO error: No space left on device (injected)'), { code: 'LEVEL_IO_ERROR' });

describe('graceful degradation (LevelDB write failures)', function () {
  let tb: TestBroker;
  beforeEach(async () => { tb = await startTestBroker(); });
  afterEach(async () => { setFaultInjector(undefined); await tb?.stop(); });

  async function publish(target: any, messages: any[]): Promise<Outcome[]> {
    const c = await connect(tb.url);
    try { return await sendAll(await openSender(c, typeof target === 'string' ? { address: target } : target), messages); }
    finally { await c.close(); }
  }
  async function browse(address: string): Promise<unknown[]> {
    const c = await connect(tb.url);
    try { return (await collect(await openReceiver(c, { address, distribution_mode: 'copy' }), { idleMs: 300 })).map((m) => m.message.body); }
    finally { await c.close(); }
  }
  const states = (o: Outcome[]) => o.map((x) => x.state);

  it('standard queue: rejected with a description while failing, accepted messages still delivered, recovers, nothing lost or redelivered after restart', async function () {
    expect(states(await publish('deg.q', [{ body: 'a1' }, { body: 'a2' }, { body: 'a3' }]))).to.deep.equal(['accepted', 'accepted', 'accepted']);
    setFaultInjector(() => diskFull());
    const refused = await publish('deg.q', [{ body: 'f1' }, { body: 'f2' }]);
    expect(states(refused)).to.deep.equal(['rejected', 'rejected']);
    expect(refused[0].description).to.match(/storage write failed for deg\.q: .*No space left/);
    expect(tb.broker.nodes.get('deg.q')!.structure.stats().depth).to.equal(3);
    // accepted messages are still delivered (and acknowledged) while the disk is failing
    const c = await connect(tb.url);
    const got = await collect(await openReceiver(c, { address: 'deg.q' }), { count: 3 });
    expect(got.map((m) => m.message.body)).to.deep.equal(['a1', 'a2', 'a3']);
    await c.close();
    await sleep(100);
    setFaultInjector(undefined);
    expect(states(await publish('deg.q', [{ body: 'b1' }, { body: 'b2' }]))).to.deep.equal(['accepted', 'accepted']);
    await tb.restart();
    // b1, b2 survive; a1..a3 were acknowledged during the fault and stay gone; f1, f2 never existed
    const c2 = await connect(tb.url);
    try {
      const after = await collect(await openReceiver(c2, { address: 'deg.q' }), { idleMs: 400 });
      expect(after.map((m) => m.message.body)).to.deep.equal(['b1', 'b2']);
    } finally { await c2.close(); }
  });

  it('a transient failure: only the failing batch is refused, later publishes go through', async function () {
    expect(states(await publish('deg.t', [{ body: 1 }]))).to.deep.equal(['accepted']);
    let failures = 1;
    setFaultInjector(() => (failures-- > 0 ? diskFull() : undefined));
    expect(states(await publish('deg.t', [{ body: 2 }]))).to.deep.equal(['rejected']);
    expect(states(await publish('deg.t', [{ body: 3 }, { body: 4 }]))).to.deep.equal(['accepted', 'accepted']);
    expect(await browse('deg.t')).to.deep.equal([1, 3, 4]);
  });

  it('a queue created while the disk fails keeps its definition: messages accepted later survive a restart', async function () {
    let failures = 1; // the attach's create-on-demand write fails, the messages' batch does not
    setFaultInjector(() => (failures-- > 0 ? diskFull() : undefined));
    const c = await connect(tb.url);
    try {
      const s = await openSender(c, { address: 'deg.created', capabilities: ['queue', 'create-on-demand'] });
      await sleep(50);
      expect(states(await sendAll(s, [{ body: 'kept' }]))).to.deep.equal(['accepted']);
    } finally { await c.close(); }
    await tb.restart();
    expect(await browse('deg.created')).to.deep.equal(['kept']);
  });

  it('last-value queue: a refused update leaves the previous value in place (not dropped from memory)', async function () {
    const lvq = { address: 'deg.lvq', capabilities: ['queue', 'create-on-demand'], dynamic_node_properties: { 'qpid.last_value_queue_key': 'k' } };
    expect(states(await publish(lvq, [{ application_properties: { k: 'x' }, body: 'x1' }, { application_properties: { k: 'y' }, body: 'y1' }]))).to.deep.equal(['accepted', 'accepted']);
    setFaultInjector(() => diskFull());
    expect(states(await publish(lvq, [{ application_properties: { k: 'x' }, body: 'x2' }]))).to.deep.equal(['rejected']);
    expect(await browse('deg.lvq')).to.deep.equal(['x1', 'y1']);
    setFaultInjector(undefined);
    // the key index points at x1 again: the next update replaces it
    expect(states(await publish(lvq, [{ application_properties: { k: 'x' }, body: 'x3' }]))).to.deep.equal(['accepted']);
    expect(await browse('deg.lvq')).to.deep.equal(['y1', 'x3']);
    await tb.restart();
    expect(await browse('deg.lvq')).to.deep.equal(['y1', 'x3']);
  });

  it('ring queue: a refused message does not push accepted ones out', async function () {
    const ring = { address: 'deg.ring', capabilities: ['queue', 'create-on-demand'], dynamic_node_properties: { 'qpid.max_count': 2, 'qpid.policy_type': 'ring' } };
    expect(states(await publish(ring, [{ body: 'r1' }, { body: 'r2' }]))).to.deep.equal(['accepted', 'accepted']);
    setFaultInjector(() => diskFull());
    expect(states(await publish(ring, [{ body: 'r3' }]))).to.deep.equal(['rejected']);
    expect(await browse('deg.ring')).to.deep.equal(['r1', 'r2']);
    setFaultInjector(undefined);
    expect(states(await publish(ring, [{ body: 'r4' }]))).to.deep.equal(['accepted']);
    expect(await browse('deg.ring')).to.deep.equal(['r2', 'r4']);
    await tb.restart();
    expect(await browse('deg.ring')).to.deep.equal(['r2', 'r4']);
  });

  it('SOW queue: refused updates (several on one key in one batch) leave the last accepted record', async function () {
    const sow = { address: 'deg.sow', capabilities: ['queue', 'create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } };
    const rec = (id: string, v: number) => ({ content_type: 'application/json', body: JSON.stringify({ id, v }) });
    expect(states(await publish(sow, [rec('a', 1), rec('b', 1)]))).to.deep.equal(['accepted', 'accepted']);
    setFaultInjector(() => diskFull());
    const refused = await publish(sow, [rec('a', 2), rec('a', 3), rec('c', 1)]);
    expect(states(refused)).to.deep.equal(['rejected', 'rejected', 'rejected']);
    const during = await sowQuery(tb.url, 'deg.sow');
    expect(during.records.map(bodyJson).sort((x: any, y: any) => x.id.localeCompare(y.id))).to.deep.equal([{ id: 'a', v: 1 }, { id: 'b', v: 1 }]);
    expect(tb.broker.nodes.get('deg.sow')!.structure.stats().depth).to.equal(2);
    setFaultInjector(undefined);
    // a delta merges onto the in-memory record: it must be v1, not a refused version
    const delta = { content_type: 'application/json', message_annotations: { 'x-opt-tm-op': 'delta' }, body: JSON.stringify({ id: 'a', w: 9 }) };
    expect(states(await publish(sow, [delta]))).to.deep.equal(['accepted']);
    const check = async () => (await sowQuery(tb.url, 'deg.sow')).records.map(bodyJson).sort((x: any, y: any) => x.id.localeCompare(y.id));
    expect(await check()).to.deep.equal([{ id: 'a', v: 1, w: 9 }, { id: 'b', v: 1 }]);
    await tb.restart();
    expect(await check()).to.deep.equal([{ id: 'a', v: 1, w: 9 }, { id: 'b', v: 1 }]);
  });
});
