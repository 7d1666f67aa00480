/**
 * Readers of the version index (version-index.ts openReader) on a queue with history and
 * granularity: a current snapshot (sow_and_subscribe) held open by a consumer that stops
 * taking records, and historical queries opened meanwhile. The open snapshot must go on
 * reading the versions its LevelDB snapshot holds, while the index itself follows the table:
 * a historical query opened later is answered from the table as it is then, and the index
 * does not grow with the events written while the consumer stalls.
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openSender, openReceiver, sendAll, sleep, type Received } from '../support/client.js';
import { tmFilters, sowQuery, keyOf, scnOf, bodyJson, cmdOf } from '../support/sow-client.js';
import { SowStructure } from '../../lib/ext/sow/sow-structure.js';

const K = 3000;
const key = (i: number) => `k${String(i).padStart(5, '0')}`;
const granular = (name: string) => ({ address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', 'sow.history.window': '1h', 'sow.history.granularity': '1h' } });
const rec = (id: string, v: number) => ({ body: JSON.stringify({ id, v }) });

describe('version index readers: a stalled current snapshot and historical queries beside it', function () {
  this.timeout(60000);
  const b = useBroker();

  /** A sow_and_subscribe consumer given `credit` records, that then stops taking more. */
  async function stalledSubscriber(url: string, name: string, credit: number) {
    const conn = await connect(url);
    const rcv = await openReceiver(conn, { address: name, filter: tmFilters({ command: 'sow_and_subscribe' }) });
    const got: Received[] = [];
    rcv.on('message', (ctx: any) => { got.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept(); });
    rcv.add_credit(credit);
    for (let i = 0; i < 300 && got.filter((m) => cmdOf(m) === 'sow').length < credit - 1; i++) await sleep(10);
    return { conn, rcv, got };
  }

  it('a historical query opened while a current snapshot is open answers as with none open; the snapshot still reads the version at its S', async () => {
    const url = b.get().url;
    const name = 'vir.hist';
    const c = await connect(url);
    const snd = await openSender(c, granular(name));
    await sendAll(snd, [rec('a', 0)]); // SCN 1
    await sendAll(snd, [rec('a', 1)]); // SCN 2 (version 0 kept: the first in its hour)
    await sendAll(snd, Array.from({ length: K }, (_, i) => rec(key(i), 0))); // SCNs 3..3002
    await sendAll(snd, [rec('z', 0)]); // SCN 3003: z sorts after every k, so the stalled snapshot has not sent it yet
    await sendAll(snd, [rec('z', 1)]); // SCN 3004
    const s = b.get().broker.nodes.get(name)!.structure as SowStructure;
    const atTwo = async () => (await sowQuery(url, name, { bookmark: '2' })).records.filter((m) => keyOf(m) === 'a').map((m) => `${scnOf(m)}=${bodyJson(m).v}`);
    expect(await atTwo()).to.deep.equal(['2=1']);

    const sub = await stalledSubscriber(url, name, 20);
    // Granularity drops the superseded current versions: a@2 and z@3004 (the snapshot's a and z).
    await sendAll(snd, [rec('a', 2), rec('z', 2)]);
    await b.get().broker.committer.idle();
    expect(s.versions.versionsOf('a'), 'the index follows the table at once').to.deep.equal([1, 3005]);
    expect(await atTwo(), 'a historical query opened meanwhile').to.deep.equal(['1=0']);

    // The stalled snapshot, let go, still gives z as it was at its S, then the live update.
    sub.rcv.add_credit(K + 100);
    for (let i = 0; i < 500 && !sub.got.some((m) => cmdOf(m) === 'publish' && keyOf(m) === 'z'); i++) await sleep(10);
    const z = sub.got.filter((m) => keyOf(m) === 'z').map((m) => `${cmdOf(m)}:${scnOf(m)}=${bodyJson(m).v}`);
    expect(s.versions.versionsOf('z')).to.deep.equal([3003, 3006]);
    expect(z).to.deep.equal(['sow:3004=1', 'publish:3006=2']);
    expect(sub.got.filter((m) => cmdOf(m) === 'sow').length, 'every record of the snapshot').to.equal(K + 2);
    await sub.conn.close();
    await c.close();
  });

  it('the index does not grow with events written while a current snapshot stalls', async () => {
    const url = b.get().url;
    const name = 'vir.growth';
    const c = await connect(url);
    const snd = await openSender(c, granular(name));
    await sendAll(snd, Array.from({ length: K }, (_, i) => rec(key(i), 0)));
    const s = b.get().broker.nodes.get(name)!.structure as SowStructure;
    const sub = await stalledSubscriber(url, name, 20);
    for (let round = 1; round <= 5; round++) await sendAll(snd, Array.from({ length: K }, (_, i) => rec(key(i), round)));
    await b.get().broker.committer.idle();
    // Each key keeps its first version (the first in its hour) and its current one.
    expect(s.historyVersions).to.equal(2 * K);
    expect(s.versions.size, 'index entries while the snapshot is open').to.equal(s.historyVersions);
    await sub.conn.close();
    await c.close();
  });

  const ends: Array<[string, (conn: any, rcv: any) => Promise<void>]> = [
    ['detach', async (_conn, rcv) => { rcv.close(); }],
    ['connection close', async (conn) => { await conn.close(); }],
    ['socket dropped', async (conn) => { conn.connection.socket?.destroy(); }],
  ];
  for (const [how, end] of ends) for (const command of ['sow', 'sow_and_subscribe']) {
    it(`a ${command} link that ends mid-snapshot (${how}) closes its index reader`, async () => {
      const url = b.get().url;
      const name = `vir.end.${command}.${how.replace(/ /g, '-')}`;
      const c = await connect(url);
      const snd = await openSender(c, granular(name));
      await sendAll(snd, Array.from({ length: K }, (_, i) => rec(key(i), 0)));
      const s = b.get().broker.nodes.get(name)!.structure as SowStructure;
      const conn = await connect(url);
      const rcv = await openReceiver(conn, { address: name, filter: tmFilters({ command }) });
      let got = 0;
      rcv.on('message', (ctx: any) => { got++; ctx.delivery.accept(); });
      rcv.add_credit(20);
      for (let i = 0; i < 300 && got < 20; i++) await sleep(10);
      expect(got).to.equal(20);
      expect(s.versions.openReaders, 'the snapshot reads').to.equal(1);
      await end(conn, rcv);
      for (let i = 0; i < 300 && s.versions.openReaders > 0; i++) await sleep(10);
      expect(s.versions.openReaders).to.equal(0);
      if (how !== 'connection close' && how !== 'socket dropped') await conn.close();
      await c.close();
    });
  }
});
