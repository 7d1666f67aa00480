/**
 * Where a SOW queue's records live (sow-structure.ts "Where records live"): a queue with
 * history keeps each key's record as its newest `hist` version and writes no `sow` row; a
 * restart rebuilds the records from `hist`. A queue stored by an earlier Tidemark (records in
 * `sow` rows, no `form` row) is moved over at its first start, and its history made to agree
 * with its records where it did not.
 */
import { expect } from 'chai';
import { rmSync } from 'node:fs';
import { startTestBroker, tempDir, type TestBroker } from '../support/broker.js';
import { send, connect, openSender, sendAll } from '../support/client.js';
import { sowQuery, keyOf, scnOf, bodyJson } from '../support/sow-client.js';
import { SowStructure } from '../../lib/ext/sow/sow-structure.js';
import { sowKey, histKey, formKey, SOW } from '../../lib/ext/sow/tables.js';
import { queuePrefix, prefixEnd } from '../../lib/core/storage/keyspace.js';
import { encodeEvent } from '../../lib/core/engine/event-record.js';
import type { BatchOp } from '../../lib/core/storage/store.js';

const histQ = (name: string, granularity = '0s') => ({ address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', 'sow.history.window': '1h', 'sow.history.granularity': granularity } });
const rec = (id: string, v: number) => ({ body: JSON.stringify({ id, v }) });
const delta = (id: string, w: number) => ({ message_annotations: { 'x-opt-tm-op': 'delta' }, body: JSON.stringify({ id, w }) });
const del = (id: string) => ({ message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id }) });

/** The answer of a sow query (bookmark: a historical one) as `key@scn=body`. */
async function state(url: string, q: string, bookmark?: string): Promise<string[]> {
  const { records } = await sowQuery(url, q, bookmark ? { bookmark } : {});
  return records.map((m) => `${keyOf(m)}@${scnOf(m)}=${JSON.stringify(bodyJson(m))}`);
}
const structureOf = (tb: TestBroker, q: string) => tb.broker.nodes.get(q)!.structure as SowStructure;
async function sowRows(tb: TestBroker, qid: number): Promise<number> {
  const p = queuePrefix(SOW, qid);
  return (await tb.broker.store.all({ gte: p, lt: prefixEnd(p), keysOnly: true })).length;
}

describe('SOW records of a queue with history live in its history (no sow rows)', function () {
  this.timeout(60000);
  let tb: TestBroker;
  let dir: string;
  beforeEach(async () => { dir = tempDir(); tb = await startTestBroker({}, { dataDir: dir }); });
  afterEach(async () => { await tb.stop(); rmSync(dir, { recursive: true, force: true }); });

  for (const granularity of ['0s', '1h']) {
    it(`writes no sow rows, and a restart gives the same current and historical answers (granularity ${granularity})`, async () => {
      const q = `inhist.${granularity}`;
      await send(tb.url, histQ(q, granularity), [rec('a', 1), rec('b', 1), rec('c', 1), rec('d', 1)]); // SCN 1-4
      await send(tb.url, q, [rec('a', 2), delta('b', 7), del('c'), rec('e', 1), rec('a', 3), del('d'), rec('d', 2)]); // SCN 5-11
      const qid = tb.broker.nodes.get(q)!.id;
      await tb.broker.committer.idle();
      expect(await sowRows(tb, qid), 'sow rows').to.equal(0);
      expect(await tb.broker.store.get(formKey(qid)), 'form row').to.not.equal(undefined);
      const now = await state(tb.url, q);
      expect(now).to.deep.equal(['a@9={"id":"a","v":3}', 'b@6={"id":"b","v":1,"w":7}', 'd@11={"id":"d","v":2}', 'e@8={"id":"e","v":1}']);
      const at4 = await state(tb.url, q, '4');
      const versions = structureOf(tb, q).versions.size;
      await tb.restart();
      expect(await state(tb.url, q), 'current, after the restart').to.deep.equal(now);
      expect(await state(tb.url, q, '4'), 'historical, after the restart').to.deep.equal(at4);
      const s = structureOf(tb, q);
      expect(s.versions.size).to.equal(versions);
      expect(s.bytes).to.equal([...s.records.values()].reduce((n, r) => n + r.bytes.length, 0));
      // Deltas merge into the recovered record; a deleted key comes back as new.
      await send(tb.url, q, [delta('e', 5), rec('c', 9)]);
      expect(await state(tb.url, q)).to.deep.equal(['a@9={"id":"a","v":3}', 'b@6={"id":"b","v":1,"w":7}', 'c@13={"id":"c","v":9}', 'd@11={"id":"d","v":2}', 'e@12={"id":"e","v":1,"w":5}']);
      if (granularity === '1h') {
        // The newest superseded version kept is recovered too: a's v2 (kept at SCN 5, within
        // the hour of v1) was dropped when v3 came; v3 is now dropped when v4 comes.
        expect(s.versions.versionsOf('a')).to.deep.equal([1, 9]);
        await send(tb.url, q, [rec('a', 4)]);
        expect(s.versions.versionsOf('a')).to.deep.equal([1, 14]);
      }
    });
  }

  it('moves a queue stored with sow rows (an earlier Tidemark) over at its first start, making its history agree with its records', async () => {
    const q = 'inhist.legacy';
    await send(tb.url, histQ(q), [rec('a', 1), rec('b', 1), rec('gone', 1), rec('c', 1)]); // SCN 1-4
    await send(tb.url, q, [rec('a', 2), del('c')]); // SCN 5-6
    const qid = tb.broker.nodes.get(q)!.id;
    const s = structureOf(tb, q);
    await tb.broker.committer.idle();
    // As an earlier Tidemark stored it: a sow row per record, no form row. And a history that
    // disagrees, as one kept while the history extension was not loaded: b's current version
    // missing, and 'gone' deleted (no record) with only a publish in its history.
    const ops: Array<{ type: 'put' | 'del'; key: Buffer; value?: Buffer }> = [];
    for (const [key, r] of s.records) if (key !== 'gone') ops.push({ type: 'put', key: sowKey(qid, key), value: encodeEvent({ ts: r.ts, op: 'publish', key, w: r.scn }, r.bytes) });
    ops.push({ type: 'del', key: formKey(qid) }, { type: 'del', key: histKey(qid, 'b', 2) });
    await tb.broker.store.batch(ops as any, true);
    await tb.restart();
    expect(await state(tb.url, q)).to.deep.equal(['a@5={"id":"a","v":2}', 'b@2={"id":"b","v":1}']);
    expect(await sowRows(tb, qid), 'sow rows once moved').to.equal(0);
    expect(await tb.broker.store.get(formKey(qid)), 'form row').to.not.equal(undefined);
    const after = structureOf(tb, q);
    expect(after.versions.versionsOf('b'), "b's record written to its history").to.deep.equal([2]);
    expect(after.versions.versionsOf('gone'), 'a tombstone at the head for the deleted key').to.deep.equal([3, 6]);
    expect(after.versions.versionsOf('c'), 'a deleted key keeps its versions and tombstone').to.deep.equal([4, 6]);
    // And from then on the records come from the history alone.
    await send(tb.url, q, [rec('b', 2)]);
    await tb.restart();
    expect(await state(tb.url, q)).to.deep.equal(['a@5={"id":"a","v":2}', 'b@7={"id":"b","v":2}']);
    expect(await state(tb.url, q, '2'), 'historical, at SCN 2').to.deep.equal(['a@1={"id":"a","v":1}', 'b@2={"id":"b","v":1}']);
  });

  it('served without the history extension, the records go back to sow rows; with it again, they move over and the history agrees', async () => {
    const q = 'inhist.off';
    await send(tb.url, histQ(q), [rec('a', 1), rec('b', 1), rec('c', 1), rec('a', 2)]); // SCN 1-4
    const qid = tb.broker.nodes.get(q)!.id;
    await tb.stop();
    tb = await startTestBroker({ extensions: ['sow', 'replay', 'checkpoints', 'management'] }, { dataDir: dir });
    expect(await state(tb.url, q)).to.deep.equal(['a@4={"id":"a","v":2}', 'b@2={"id":"b","v":1}', 'c@3={"id":"c","v":1}']);
    expect(await sowRows(tb, qid), 'sow rows without history').to.equal(3);
    expect(await tb.broker.store.get(formKey(qid)), 'form row').to.equal(undefined);
    await send(tb.url, q, [del('b'), rec('a', 3), rec('d', 1)]); // SCN 5-7, not in the history
    await tb.stop();
    tb = await startTestBroker({}, { dataDir: dir });
    expect(await state(tb.url, q)).to.deep.equal(['a@6={"id":"a","v":3}', 'c@3={"id":"c","v":1}', 'd@7={"id":"d","v":1}']);
    expect(await sowRows(tb, qid), 'sow rows with history again').to.equal(0);
    const s = structureOf(tb, q);
    expect(s.versions.versionsOf('a'), "a's record added to its history").to.deep.equal([1, 4, 6]);
    expect(s.versions.versionsOf('b'), 'deleted meanwhile: a tombstone at the head (when is not known)').to.deep.equal([2, 7]);
    expect(s.versions.versionsOf('d')).to.deep.equal([7]);
    await send(tb.url, q, [rec('a', 4)]); // SCN 8
    await tb.restart();
    expect(await state(tb.url, q)).to.deep.equal(['a@8={"id":"a","v":4}', 'c@3={"id":"c","v":1}', 'd@7={"id":"d","v":1}']);
    expect(await state(tb.url, q, '4'), 'historical, at SCN 4 (kept from before)').to.deep.equal(['a@4={"id":"a","v":2}', 'b@2={"id":"b","v":1}', 'c@3={"id":"c","v":1}']);
    expect(await state(tb.url, q, '7'), 'historical, at SCN 7').to.deep.equal(['a@6={"id":"a","v":3}', 'c@3={"id":"c","v":1}', 'd@7={"id":"d","v":1}']);
  });

  it('keeps every accepted record when the batch carrying the first form row fails: events queued behind it fail with it, later ones carry the row', async () => {
    const q = 'rih.formfail';
    const c = await connect(tb.url);
    const snd = await openSender(c, histQ(q));
    await tb.broker.committer.idle();
    const qid = tb.broker.nodes.get(q)!.id;
    // The write fails after it was under way (an fsync answering EIO), so events arriving
    // meanwhile were prepared and queued behind it. (The test-only fault injector fails a
    // batch at once, before a second one can form behind it: this wraps Store.batch instead.)
    const store = tb.broker.store as unknown as { batch(ops: BatchOp[], sync: boolean): Promise<void> };
    const batch = store.batch.bind(store);
    let failures = 1;
    store.batch = (ops, sync) => {
      if (failures > 0 && ops.some((o) => o.key.equals(formKey(qid)))) {
        failures--;
        return new Promise((_, reject) => setTimeout(() => reject(new Error('IO error: input/output error (injected)')), 50));
      }
      return batch(ops, sync);
    };
    const msgs = Array.from({ length: 20 }, (_, i) => rec(`k${String(i).padStart(2, '0')}`, i));
    const out = await sendAll(snd, msgs);
    store.batch = batch;
    expect(out.map((o) => o.state), 'the first batch and everything prepared behind it').to.deep.equal(msgs.map(() => 'rejected'));
    const later = await sendAll(snd, [rec('a', 1), rec('b', 1)]);
    expect(later.map((o) => o.state)).to.deep.equal(['accepted', 'accepted']);
    await c.close();
    await tb.broker.committer.idle();
    expect(await tb.broker.store.get(formKey(qid)), 'the form row is stored with them').to.not.equal(undefined);
    expect((await sowQuery(tb.url, q)).records.map(keyOf)).to.deep.equal(['a', 'b']);
    await tb.restart();
    expect((await sowQuery(tb.url, q)).records.map(keyOf), 'after a restart: every accepted record').to.deep.equal(['a', 'b']);
  });

  it('a paced history sweep purges a deleted key whole: the key stays deleted after steps that end on its tombstone, and a restart', async () => {
    const q = 'rih.sweepsteps';
    const pause = () => new Promise((r) => setTimeout(r, 20));
    await send(tb.url, histQ(q), [rec('a', 1)]); await pause(); // SCN 1
    await send(tb.url, q, [rec('a', 2)]); await pause(); // SCN 2: a's version 1 superseded (the sweep has work)
    await send(tb.url, q, [rec('k', 1)]); await pause(); // SCN 3: V
    await send(tb.url, q, [del('k')]); // SCN 4: T
    await tb.broker.committer.idle();
    const s = structureOf(tb, q);
    expect(s.versions.versionsOf('k')).to.deep.equal([3, 4]);
    const T = s.ring.find((e) => e.scn === 4)!.ts;
    // A paced step of 4 rows (a1, a2, V, T) at a horizon exactly T: T not yet out of the
    // window, so V stays; the step ends on T. The next step, a second later, has T out of the
    // window: it must go with V, or V, a publish, is left as k's newest version (its record).
    await s.sweepHistory(T + 3600_000, false, 4);
    await s.sweepHistory(T + 3600_000 + 1000, false, 4);
    await s.sweepHistory(T + 3600_000 + 2000, false, 4);
    expect(await state(tb.url, q)).to.deep.equal(['a@2={"id":"a","v":2}']);
    expect(s.versions.versionsOf('k'), 'k purged whole').to.deep.equal([]);
    await tb.restart();
    expect(await state(tb.url, q), 'after a restart: k still deleted').to.deep.equal(['a@2={"id":"a","v":2}']);
  });
});
