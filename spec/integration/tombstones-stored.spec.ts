/**
 * Incremental bootstraps across restarts (semantics.md 8): the deletes a consumer that fell off
 * the log must be told about are stored with the delete itself (the `tomb` table), so they
 * survive a kill -9; a queue stored before they were (no floor row) bootstraps in full once.
 */
import { expect } from 'chai';
import { rmSync } from 'node:fs';
import { startTestBroker, spawnBroker, tempDir } from '../support/broker.js';
import { connect, openReceiver, collect, send, sleep, type Received } from '../support/client.js';
import { tmFilters, cmdOf, scnOf, keyOf, checkpointOf } from '../support/sow-client.js';
import { runRetention } from '../../lib/ext/sow/index.js';
import { tombFloorKey } from '../../lib/ext/sow/tables.js';

const sowQ = (name: string) => ({ address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', 'log.max_count': 5 } });
const rec = (id: string, v: number) => ({ body: JSON.stringify({ id, v }) });
const del = (id: string) => ({ message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id }) });
const FLEX = { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: -1, prevScn: -1, windowOffset: -1 };

const plainCp = (m: Received) => JSON.parse(JSON.stringify(checkpointOf(m), (_k, v) => {
  if (typeof v === 'bigint') return Number(v);
  if (v && v.type === 'Buffer' && Array.isArray(v.data) && v.data.length === 8) return Number(Buffer.from(v.data).readBigInt64BE(0));
  return v;
}));

async function read(url: string, q: string, checkpoint: unknown, opts: { count?: number; until?: (m: Received) => boolean } = {}): Promise<Received[]> {
  const c = await connect(url);
  try {
    const rcv = await openReceiver(c, { address: q, filter: tmFilters({ checkpoint }) });
    return await collect(rcv, { idleMs: 700, credit: 200, count: opts.count, until: opts.until });
  } finally { await c.close(); }
}
const untilCompleted = (m: Received) => cmdOf(m) === 'completed';
const snapshotOf = (msgs: Received[]) => msgs.slice(1, msgs.findIndex((m) => cmdOf(m) === 'group_end')).map((m) => `${cmdOf(m)} ${keyOf(m)} ${scnOf(m)}`);

describe('stored tombstones: incremental bootstraps across restarts', function () {
  this.timeout(60000);

  it('a delete settled before a kill -9 is a tombstone in the bootstrap after the restart', async function () {
    const dir = tempDir();
    let broker = await spawnBroker(['--port', '0', '--data', dir]);
    try {
      const q = 'tomb.kill';
      await send(broker.url, sowQ(q), ['a1', 'a2', 'a3'].map((id) => rec(id, 1))); // SCN 1-3
      const first = await read(broker.url, q, FLEX, { count: 3 });
      const cp = plainCp(first[first.length - 1]);
      expect(cp).to.include({ windowScn: 3 });
      await send(broker.url, q, [del('a1'), rec('a2', 2), del('nope')]); // SCN 4-6 (a delete of a key never there is a tombstone too)
      await send(broker.url, q, Array.from({ length: 10 }, (_, i) => rec(`b${i}`, i))); // SCN 7-16
      await broker.kill('SIGKILL');
      broker = await spawnBroker(['--port', '0', '--data', dir]);
      // the log keeps 5 events: the checkpoint at SCN 3 has fallen off once retention ran
      let got: Received[] = [];
      for (let i = 0; i < 40; i++) {
        got = await read(broker.url, q, cp, { until: untilCompleted });
        if (plainCp(got[0])?.consumption_mode === 'BOOTSTRAP_SNAPSHOT') break;
        await sleep(250);
      }
      expect(plainCp(got[0])).to.include({ consumption_mode: 'BOOTSTRAP_SNAPSHOT', bootstrap_since_scn: 4, bootstrap_start_scn: 16 });
      expect(snapshotOf(got)).to.deep.equal(['delete a1 4', 'sow a2 5', ...Array.from({ length: 10 }, (_, i) => `sow b${i} ${7 + i}`), 'delete nope 6']);
    } finally { await broker.kill('SIGKILL'); rmSync(dir, { recursive: true, force: true }); }
  });

  it('a queue stored without tombstones (no floor row) bootstraps in full once, then incrementally from its restart on', async function () {
    const tb = await startTestBroker();
    try {
      const q = 'tomb.legacy';
      await send(tb.url, sowQ(q), ['a1', 'a2', 'a3'].map((id) => rec(id, 1))); // SCN 1-3
      const first = await read(tb.url, q, FLEX, { count: 3 });
      const before = plainCp(first[first.length - 1]);
      await send(tb.url, q, [del('a1')]); // SCN 4
      // as a data directory written before tombstones were stored: no floor row
      const qid = tb.broker.nodes.get(q)!.id;
      await tb.broker.committer.idle();
      await tb.broker.store.batch([{ type: 'del', key: tombFloorKey(qid) }], true);
      await tb.restart();
      const url = tb.url;
      await send(url, q, [rec('a4', 1)]); // SCN 5
      const after = plainCp((await read(url, q, FLEX, { until: (m) => scnOf(m) === 5 })).pop()!);
      expect(after).to.include({ windowScn: 5 });
      await send(url, q, [del('a2')]); // SCN 6
      await send(url, q, Array.from({ length: 10 }, (_, i) => rec(`b${i}`, i))); // SCN 7-16
      await runRetention(tb.broker);
      // from before the restart: the delete of a1 is not known any more, so the whole state
      const full = await read(url, q, before, { until: untilCompleted });
      expect(plainCp(full[0])).to.include({ consumption_mode: 'BOOTSTRAP_SNAPSHOT', bootstrap_since_scn: 0 });
      expect(snapshotOf(full)).to.deep.equal(['sow a3 3', 'sow a4 5', ...Array.from({ length: 10 }, (_, i) => `sow b${i} ${7 + i}`)]);
      // from after it: incremental, with the delete made since
      const incr = await read(url, q, after, { until: untilCompleted });
      expect(plainCp(incr[0])).to.include({ bootstrap_since_scn: 6 });
      expect(snapshotOf(incr)).to.deep.equal(['delete a2 6', ...Array.from({ length: 10 }, (_, i) => `sow b${i} ${7 + i}`)]);
      // and both stay so across another restart (the floor row, with its time, is stored now)
      await tb.restart();
      expect(plainCp((await read(tb.url, q, after, { until: untilCompleted }))[0])).to.include({ bootstrap_since_scn: 6 });
      expect(plainCp((await read(tb.url, q, before, { until: untilCompleted }))[0])).to.include({ bootstrap_since_scn: 0 });
    } finally { await tb.stop(); }
  });
});
