/**
 * A batch that fails while later events are already prepared (a write error, an fsync
 * answering EIO: the write was under way, so events arriving meanwhile queued behind it).
 * Those events were prepared on the state the failed batch would have stored: they fail
 * with it (Committer #failQueued), and what is stored stays what producers were told.
 * Also: a current snapshot opened while many keys are being created (prepared, not yet
 * written) still sends every key that had a record at its SCN.
 */
import { expect } from 'chai';
import { useBroker, type TestBroker } from '../support/broker.js';
import { connect, openSender, openReceiver, sendAll, collect, sleep, receive, createOnDemand } from '../support/client.js';
import { tmFilters, cmdOf, keyOf, scnOf, sowQuery, bodyJson } from '../support/sow-client.js';
import { SowStructure } from '../../lib/ext/sow/sow-structure.js';
import type { BatchOp } from '../../lib/core/storage/store.js';

const rec = (id: string, v: number) => ({ body: JSON.stringify({ id, v }) });
const sowQ = (name: string, props: Record<string, unknown> = {}) => ({ address: name, capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'sow.key': '/id', ...props } });

type BatchFn = (ops: BatchOp[], sync: boolean) => Promise<void>;
/** The next batch written takes `ms`, then fails (or, with `ok`, succeeds); the ones after it are written as usual. */
function slowNextBatch(tb: TestBroker, ms: number, ok = false): () => void {
  const store = tb.broker.store as unknown as { batch: BatchFn };
  const batch = store.batch.bind(store);
  let armed = true;
  store.batch = (ops, sync) => {
    if (!armed) return batch(ops, sync);
    armed = false;
    return new Promise<void>((res) => setTimeout(res, ms)).then(() => (ok ? batch(ops, sync) : Promise.reject(new Error('IO error: input/output error (injected)'))));
  };
  return () => { store.batch = batch; };
}

describe('a failed batch and the events queued behind it', function () {
  this.timeout(60000);
  const b = useBroker();

  for (const props of [{}, { 'sow.history.window': '1h' }]) {
    const kind = Object.keys(props).length ? 'with history' : 'without history';
    it(`a delta queued behind a publish whose batch fails is refused with it: the record never shows the refused publish (${kind})`, async () => {
      const tb = b.get();
      const name = `fbd.delta.${Object.keys(props).length}`;
      const c = await connect(tb.url);
      const snd = await openSender(c, sowQ(name, props));
      const snd2 = await openSender(c, name);
      await sendAll(snd, [rec('k', 1)]);
      const restore = slowNextBatch(tb, 300);
      try {
        const pub = sendAll(snd, [{ body: JSON.stringify({ id: 'k', v: 2, secret: 'refused' }) }]);
        await sleep(100);
        const delta = sendAll(snd2, [{ message_annotations: { 'x-opt-tm-op': 'delta' }, body: JSON.stringify({ id: 'k', d: 1 }) }]);
        const [p, d] = await Promise.all([pub, delta]);
        expect(p[0].state, 'the publish').to.equal('rejected');
        expect(d[0].state, 'the delta, prepared on the refused publish').to.equal('rejected');
      } finally { restore(); }
      expect((await sowQuery(tb.url, name)).records.map(bodyJson)).to.deep.equal([{ id: 'k', v: 1 }]);
      expect((await sendAll(snd2, [{ message_annotations: { 'x-opt-tm-op': 'delta' }, body: JSON.stringify({ id: 'k', d: 2 }) }]))[0].state).to.equal('accepted');
      expect((await sowQuery(tb.url, name)).records.map(bodyJson)).to.deep.equal([{ id: 'k', v: 1, d: 2 }]);
      await c.close();
      await tb.restart();
      expect((await sowQuery(tb.url, name)).records.map(bodyJson), 'after a restart').to.deep.equal([{ id: 'k', v: 1, d: 2 }]);
    });
  }

  it('a delete queued behind a delete of the same key whose batch fails is refused with it: the record stays, also after a restart', async () => {
    const tb = b.get();
    const name = 'fbd.delete';
    const c = await connect(tb.url);
    const snd = await openSender(c, sowQ(name));
    const snd2 = await openSender(c, name);
    await sendAll(snd, [rec('k', 1), rec('other', 1)]);
    const del = { message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id: 'k' }) };
    const restore = slowNextBatch(tb, 300);
    try {
      const first = sendAll(snd, [del]);
      await sleep(100);
      const second = sendAll(snd2, [del]);
      const [a, d] = await Promise.all([first, second]);
      expect([a[0].state, d[0].state]).to.deep.equal(['rejected', 'rejected']);
    } finally { restore(); }
    expect((await sowQuery(tb.url, name)).records.map(keyOf)).to.deep.equal(['k', 'other']);
    await c.close();
    await tb.restart();
    expect((await sowQuery(tb.url, name)).records.map(keyOf), 'after a restart').to.deep.equal(['k', 'other']);
  });

  it('an LVQ key published in a failing batch and again behind it: the value that stayed is replaced by the next publish, also after a restart (undone newest first)', async () => {
    const tb = b.get();
    const name = 'fbd.lvq';
    const m = (v: string) => ({ application_properties: { k: 'x' }, body: v });
    const c = await connect(tb.url);
    const s1 = await openSender(c, createOnDemand(name, { 'qpid.last_value_queue_key': 'k' }));
    const s2 = await openSender(c, name);
    expect((await sendAll(s1, [m('A')]))[0].state).to.equal('accepted');
    const restore = slowNextBatch(tb, 300);
    try {
      const pb = sendAll(s1, [m('B')]);
      await sleep(100);
      const pc = sendAll(s2, [m('C')]); // queued behind B's batch
      const [rb, rc] = await Promise.all([pb, pc]);
      expect([rb[0].state, rc[0].state]).to.deep.equal(['rejected', 'rejected']);
    } finally { restore(); }
    expect((await sendAll(s1, [m('D')]))[0].state).to.equal('accepted');
    await c.close();
    const browse = async () => (await receive(tb.url, { address: name, distribution_mode: 'copy' }, { idleMs: 500 })).map((x) => x.message.body);
    expect(await browse(), 'one message for the key').to.deep.equal(['D']);
    await tb.restart();
    expect(await browse(), 'after a restart').to.deep.equal(['D']);
  });

  for (const props of [{ 'sow.history.window': '1h' }, {}]) {
    const kind = Object.keys(props).length ? 'with history' : 'without history';
    for (const command of ['sow', 'sow_and_subscribe']) {
      it(`${command} (${kind}) opened while 1100 keys are being created sends every key with a record at its SCN`, async () => {
        const tb = b.get();
        const name = `fbd.gap.${command}.${Object.keys(props).length}`;
        const c = await connect(tb.url);
        const snd = await openSender(c, sowQ(name, props));
        await sendAll(snd, [rec('a', 0), rec('z', 0)]); // SCNs 1, 2
        const s = tb.broker.nodes.get(name)!.structure as SowStructure;
        const restore = slowNextBatch(tb, 1000, true);
        try {
          const first = sendAll(snd, [rec('b', 0)]); // SCN 3, written slowly
          await sleep(100);
          // Prepared behind it: a whole snapshot chunk of keys with no record at S (m0000... sort between b and z).
          const burst = sendAll(snd, Array.from({ length: 1100 }, (_, i) => rec(`m${String(i).padStart(4, '0')}`, 0)));
          for (let i = 0; i < 100 && s.records.size < 1103; i++) await sleep(10);
          expect(s.records.size, 'the burst is prepared while the first batch is written').to.equal(1103);
          const rc = await connect(tb.url);
          const rcv = await openReceiver(rc, { address: name, filter: tmFilters({ command }) });
          const got = await collect(rcv, { credit: 5000, idleMs: 3000, until: (m) => cmdOf(m) === 'group_end' });
          await first; await burst;
          const end = got.find((m) => cmdOf(m) === 'group_end');
          expect(scnOf(end!), 'the snapshot SCN').to.equal(3);
          expect(got.filter((m) => cmdOf(m) === 'sow').map(keyOf), 'every record at S').to.deep.equal(['a', 'b', 'z']);
          await rc.close();
        } finally { restore(); await c.close(); }
      });
    }
  }
});
