/**
 * Session 24 storage review: what a SOW queue keeps in memory after a refused batch or a failed
 * log-trim write agrees with what is stored (the statistics a restart recomputes from the rows).
 * Batches are failed with the store's fault injector, as a full or failing disk would.
 */
import { expect } from 'chai';
import { startTestBroker, tempDir, type TestBroker } from '../support/broker.js';
import { connect, openSender, sendAll, createOnDemand } from '../support/client.js';
import { setFaultInjector, type BatchOp } from '../../lib/core/storage/store.js';
import { CoreTables, queuePrefix, prefixEnd } from '../../lib/core/storage/keyspace.js';
import { encodeMessage, decodeMessage } from '../../lib/codec/message-bytes.js';
import { runRetention, SowStructure } from '../../lib/ext/sow/index.js';
import { HIST } from '../../lib/ext/sow/tables.js';
import type { InboundMessage } from '../../lib/core/queue/inbound.js';
import { rmSync } from 'node:fs';

const rec = (id: string, v: number) => ({ content_type: 'application/json', body: JSON.stringify({ id, v }) });
const del = (id: string) => ({ message_annotations: { 'x-opt-tm-op': 'delete', 'x-opt-tm-key': id }, body: null });
const diskFull = () => Object.assign(new Error('IO error: No space left on device (injected)'), { code: 'LEVEL_IO_ERROR' });

describe('SOW queue after a failed batch (session 24 storage review)', function () {
  this.timeout(60000);
  let tb: TestBroker;
  let dir: string;
  beforeEach(async () => { dir = tempDir(); tb = await startTestBroker({}, { dataDir: dir }); });
  afterEach(async () => { setFaultInjector(undefined); await tb.stop(); rmSync(dir, { recursive: true, force: true }); });

  const info = (name: string) => tb.broker.queueInfo(tb.broker.nodes.get(name)!);
  const structure = (name: string) => tb.broker.nodes.get(name)!.structure as SowStructure;
  async function histRows(name: string): Promise<number> {
    const p = queuePrefix(HIST, tb.broker.nodes.get(name)!.id);
    return (await tb.broker.store.all({ gte: p, lt: prefixEnd(p), keysOnly: true })).length;
  }
  /** Publishes in-process: events published in one turn go into one batch. */
  const publish = (name: string, m: Record<string, unknown>) => new Promise<string>((res) => {
    const bytes = encodeMessage(m);
    const msg = { bytes, message: decodeMessage(bytes), receivedAt: Date.now(), attrs: {} } as unknown as InboundMessage;
    tb.broker.publish(tb.broker.nodes.get(name)!, msg, (e) => res(e ? 'rejected' : 'accepted'));
  });

  describe('history_versions with sow.history.granularity: a refused delete leaves no tombstone in memory', function () {
    const args = { 'sow.key': '/id', 'sow.history.window': '1d', 'sow.history.granularity': '1h' };

    it('publish and delete of a new key refused in one batch, then the key published twice within G', async () => {
      tb.broker.nodes.declare('fb.g1', { durable: true, arguments: args });
      setFaultInjector(diskFull);
      try {
        expect(await Promise.all([publish('fb.g1', rec('a', 1)), publish('fb.g1', del('a'))])).to.deep.equal(['rejected', 'rejected']);
      } finally { setFaultInjector(undefined); }
      expect(await publish('fb.g1', rec('a', 2))).to.equal('accepted');
      expect(await publish('fb.g1', rec('a', 3))).to.equal('accepted');
      // (it said 0: the second publish took the refused delete's tombstone for a's current
      // version and deleted its row, a row never written; then a 2's row went within G)
      expect(info('fb.g1').history_versions, 'counted').to.equal(await histRows('fb.g1'));
      expect(info('fb.g1').history_versions).to.equal(2);
      await tb.restart();
      expect(info('fb.g1').history_versions, 'after a restart').to.equal(2);
    });

    it('a deleted key deleted again, refused, then re-created within G: its stored tombstone is the version superseded', async () => {
      tb.broker.nodes.declare('fb.g2', { durable: true, arguments: args });
      expect(await publish('fb.g2', rec('a', 1))).to.equal('accepted');
      expect(await publish('fb.g2', del('a'))).to.equal('accepted');
      setFaultInjector(diskFull);
      try { expect(await publish('fb.g2', del('a'))).to.equal('rejected'); } finally { setFaultInjector(undefined); }
      expect(await publish('fb.g2', rec('a', 2))).to.equal('accepted');
      // a 1 and a 2 (the stored tombstone went within G); it counted 2 while 3 rows stayed
      // (the refused delete's row was the one deleted, and the stored tombstone was kept)
      expect(await histRows('fb.g2'), 'rows').to.equal(2);
      expect(info('fb.g2').history_versions, 'counted').to.equal(2);
      await tb.restart();
      expect(info('fb.g2').history_versions, 'after a restart').to.equal(2);
    });
  });

  describe('log trim with log.max_count', function () {
    const url = () => tb.broker.urls[0];
    const q = (name: string) => createOnDemand(name, { durable: true, 'sow.key': '/id', 'log.max_count': 3 });
    const states = (o: { state: string }[]) => o.map((x) => x.state);

    it('counts the rows it deletes: SCNs refused by a failed batch are no rows', async () => {
      const c = await connect(url());
      const snd = await openSender(c, q('fb.log1'));
      expect(states(await sendAll(snd, [0, 1, 2, 3].map((i) => rec('k' + i, i))))).to.deep.equal(Array(4).fill('accepted')); // SCNs 1-4
      setFaultInjector(diskFull);
      try {
        for (let i = 0; i < 4; i++) expect(states(await sendAll(snd, [rec('x', i)]))).to.deep.equal(['rejected']); // 5-8, no rows
      } finally { setFaultInjector(undefined); }
      expect(states(await sendAll(snd, [0, 1, 2, 3].map((i) => rec('k' + i, 10 + i))))).to.deep.equal(Array(4).fill('accepted')); // 9-12
      await c.close();
      await runRetention(tb.broker);
      // (it said 0: cutoff - oldest SCN took the refused SCNs for rows)
      expect({ logEvents: structure('fb.log1').logCount, scn_oldest: info('fb.log1').scn_oldest }).to.deep.equal({ logEvents: 3, scn_oldest: 10 });
      await tb.restart();
      expect({ logEvents: structure('fb.log1').logCount, scn_oldest: info('fb.log1').scn_oldest }, 'after a restart').to.deep.equal({ logEvents: 3, scn_oldest: 10 });
    });

    it('a trim whose head-row write fails leaves memory where the rows are, and a later trim deletes them', async () => {
      const c = await connect(url());
      const snd = await openSender(c, q('fb.log2'));
      expect(states(await sendAll(snd, [0, 1, 2].map((i) => rec('k' + i, i))))).to.deep.equal(Array(3).fill('accepted')); // SCNs 1-3
      await runRetention(tb.broker);
      const head = queuePrefix(CoreTables.head, tb.broker.nodes.get('fb.log2')!.id);
      // Only the trim's head-row write fails (the background trim's too): the publishes are written.
      setFaultInjector((ops: readonly BatchOp[]) => (ops.some((op) => op.key.equals(head)) ? diskFull() : undefined));
      try {
        expect(states(await sendAll(snd, [0, 1, 2].map((i) => rec('k' + i, 10 + i))))).to.deep.equal(Array(3).fill('accepted')); // 4-6
        let failed: Error | undefined;
        await runRetention(tb.broker).catch((e) => { failed = e; });
        expect(failed?.message, 'the trim failed').to.match(/injected/);
        // (the floor had moved to 4 and the ring past SCNs 1-3, whose rows all stayed)
        expect({ logEvents: structure('fb.log2').logCount, scn_oldest: info('fb.log2').scn_oldest }).to.deep.equal({ logEvents: 6, scn_oldest: 1 });
        expect(structure('fb.log2').ringIndexAfter(0), 'SCN 1 still read from the ring').to.equal(0);
      } finally { setFaultInjector(undefined); }
      await c.close();
      await tb.restart();
      expect({ logEvents: structure('fb.log2').logCount, scn_oldest: info('fb.log2').scn_oldest }, 'after a restart').to.deep.equal({ logEvents: 6, scn_oldest: 1 });
      await runRetention(tb.broker);
      expect({ logEvents: structure('fb.log2').logCount, scn_oldest: info('fb.log2').scn_oldest }, 'trimmed').to.deep.equal({ logEvents: 3, scn_oldest: 4 });
    });
  });
});
