/**
 * The plugin shape (architecture.md "Plugin-style"): history, replay and checkpoints are
 * extensions of their own, built on sow. Enabled, they answer their arguments, filters and
 * links; left out of config.extensions, their arguments are unknown, their links are refused
 * with a description naming the missing extension, and everything else keeps working.
 */
import { expect } from 'chai';
import { rmSync } from 'node:fs';
import { startTestBroker, tempDir, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, collect, send, type Conn } from '../support/client.js';
import { tmFilters, cmdOf, sowQuery } from '../support/sow-client.js';

const SOW_ONLY = ['ttl', 'temporary-queues', 'browse-only', 'limits', 'lvq', 'selector', 'sow', 'management'];

const sowQueue = (name: string, args: Record<string, unknown> = {}) => ({ address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', ...args } });

async function refused(conn: Conn, source: unknown): Promise<{ condition?: string; message: string }> {
  try { await openReceiver(conn, source); } catch (e: any) { return { condition: e.condition, message: String(e.message) }; }
  throw new Error('attach was not refused');
}

/** The start-up error for an extension list, or 'started'. */
async function startWith(extensions: string[]): Promise<string> {
  try { const tb = await startTestBroker({ extensions }); await tb.stop(); } catch (e) { return (e as Error).message; }
  return 'started';
}

describe('extensions: history, replay and checkpoints build on sow', function () {
  this.timeout(60000);

  it('an extension listed before the one it builds on, or without it, refuses to start naming both', async () => {
    expect(await startWith(['history', 'sow'])).to.match(/config\.extensions: extension history needs sow, listed before it/);
    expect(await startWith(['management', 'checkpoints'])).to.match(/extension checkpoints needs sow/);
    expect(await startWith(['sow', 'replay', 'history', 'checkpoints'])).to.equal('started');
  });

  describe('with sow alone', () => {
    let tb: TestBroker;
    let conn: Conn;
    before(async () => { tb = await startTestBroker({ extensions: SOW_ONLY }); conn = await connect(tb.url); });
    after(async () => { await conn?.close(); await tb?.stop(); });

    it('sow.history.* and log.* are unknown queue arguments, with none of their kind enabled', async () => {
      const out = await send(tb.url, sowQueue('x.hist', { 'sow.history.window': '1h' }), [{ body: '{"id":"a"}' }]).catch((e) => e);
      expect(String(out?.message ?? out)).to.match(/unknown queue argument sow\.history\.window/);
      const out2 = await send(tb.url, sowQueue('x.log', { 'log.max_count': 10 }), [{ body: '{"id":"a"}' }]).catch((e) => e);
      expect(String(out2?.message ?? out2)).to.match(/unknown queue argument log\.max_count \(known: none enabled\)/);
    });

    it('SOW queries still work; a bookmark is refused naming the extension that would answer it', async () => {
      const outcomes = await send(tb.url, sowQueue('s.plain'), [{ body: '{"id":"a","v":1}' }, { body: '{"id":"b","v":2}' }]);
      expect(outcomes.map((o) => o.state)).to.deep.equal(['accepted', 'accepted']);
      const q = await sowQuery(tb.url, 's.plain');
      expect(q.records).to.have.length(2);
      const hist = await refused(conn, { address: 's.plain', filter: tmFilters({ command: 'sow', bookmark: '1' }) });
      expect(hist.condition).to.equal('amqp:invalid-field');
      expect(hist.message).to.match(/needs the history extension/);
      const rep = await refused(conn, { address: 's.plain', filter: tmFilters({ command: 'subscribe', bookmark: '0' }) });
      expect(rep.condition).to.equal('amqp:invalid-field');
      expect(rep.message).to.match(/needs the replay extension/);
    });

    it('the checkpoint filter is not applied or echoed; the link is an ordinary SOW subscription', async () => {
      const rcv = await openReceiver(conn, { address: 's.plain', filter: tmFilters({ command: 'subscribe', checkpoint: { windowScn: -1 } }) });
      const echoed = Object.keys(rcv.remote?.attach?.source?.filter ?? {});
      expect(echoed.some((k) => /checkpoint/.test(k))).to.equal(false);
      const live = collect(rcv, { count: 1, idleMs: 3000 });
      await send(tb.url, 's.plain', [{ body: '{"id":"c","v":3}' }]);
      const got = await live;
      expect(got).to.have.length(1);
      expect(cmdOf(got[0])).to.equal('publish');
      expect(got[0].message.message_annotations?.['x-opt-tm-checkpoint']).to.equal(undefined);
    });
  });

  it('a queue with history, restarted without the history extension, keeps its rows for when it is back', async () => {
    const dataDir = tempDir();
    try {
      let tb = await startTestBroker({}, { dataDir });
      await send(tb.url, sowQueue('s.back', { 'sow.history.window': '1h' }), [{ body: '{"id":"a","v":1}' }, { body: '{"id":"a","v":2}' }]);
      await tb.stop();
      tb = await startTestBroker({ extensions: ['sow', 'replay', 'checkpoints', 'management'] }, { dataDir });
      try {
        expect((await sowQuery(tb.url, 's.back')).records.map((m) => JSON.parse(m.message.body).v)).to.deep.equal([2]);
        const c = await connect(tb.url);
        try {
          const r = await refused(c, { address: 's.back', filter: tmFilters({ command: 'sow', bookmark: '1' }) });
          expect(r.message).to.match(/needs the history extension/);
        } finally { await c.close(); }
      } finally { await tb.stop(); }
      tb = await startTestBroker({}, { dataDir });
      try {
        expect((await sowQuery(tb.url, 's.back', { bookmark: '1' })).records.map((m) => JSON.parse(m.message.body).v)).to.deep.equal([1]);
      } finally { await tb.stop(); }
    } finally { rmSync(dataDir, { recursive: true, force: true }); }
  });

  it('a stored SOW or browse-only queue is not served without its extension: the broker refuses to start, the data stays', async () => {
    const dataDir = tempDir();
    try {
      let tb = await startTestBroker({}, { dataDir });
      await send(tb.url, sowQueue('s.guard'), [{ body: '{"id":"a","v":1}' }]);
      await send(tb.url, { address: 'b.guard', capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.browse-only': true } }, [{ body: 'kept' }]);
      await tb.stop();
      // served as plain queues, a consumer would have emptied the SOW log and the browse-only queue
      const noSow = await startTestBroker({ extensions: ['ttl', 'browse-only', 'management'] }, { dataDir }).then((t) => t.stop().then(() => 'started'), (e) => (e as Error).message);
      expect(noSow).to.match(/queue s\.guard was declared with sow\.key, which the "sow" extension handles; add "sow" to config\.extensions/);
      const noBrowse = await startTestBroker({ extensions: ['sow', 'management'] }, { dataDir }).then((t) => t.stop().then(() => 'started'), (e) => (e as Error).message);
      expect(noBrowse).to.match(/queue b\.guard was declared with qpid\.browse-only, which the "browse-only" extension handles/);
      tb = await startTestBroker({}, { dataDir });
      try {
        const c = await connect(tb.url);
        try {
          const sub = await openReceiver(c, { address: 's.guard', filter: tmFilters({ command: 'subscribe', bookmark: '0' }) });
          const got = await collect(sub, { credit: 10, idleMs: 1000, until: (m) => cmdOf(m) === 'completed' });
          expect(got.filter((m) => cmdOf(m) === 'publish')).to.have.length(1);
        } finally { await c.close(); }
      } finally { await tb.stop(); }
    } finally { rmSync(dataDir, { recursive: true, force: true }); }
  });

  describe('with all of them (the default)', () => {
    let tb: TestBroker;
    let conn: Conn;
    before(async () => { tb = await startTestBroker(); conn = await connect(tb.url); });
    after(async () => { await conn?.close(); await tb?.stop(); });

    it('history answers a bookmark sow, replay a bookmark subscribe, checkpoints annotate every message', async () => {
      await send(tb.url, sowQueue('s.all', { 'sow.history.window': '1h' }), [{ body: '{"id":"a","v":1}' }, { body: '{"id":"a","v":2}' }]);
      const at1 = await sowQuery(tb.url, 's.all', { bookmark: '1' });
      expect(at1.records.map((m) => JSON.parse(m.message.body).v)).to.deep.equal([1]);
      const rcv = await openReceiver(conn, { address: 's.all', filter: tmFilters({ command: 'subscribe', bookmark: '0' }) });
      const replayed = await collect(rcv, { idleMs: 2000, until: (m) => cmdOf(m) === 'completed' });
      expect(replayed.map(cmdOf)).to.deep.equal(['publish', 'publish', 'completed']);
      const cp = await openReceiver(conn, { address: 's.all', filter: tmFilters({ command: 'subscribe', checkpoint: { windowScn: -1 } }) });
      const withCp = await collect(cp, { count: 2, idleMs: 2000 });
      expect(withCp).to.have.length(2);
      for (const m of withCp) expect(m.message.message_annotations?.['x-opt-tm-checkpoint']).to.be.an('object');
    });
  });
});
