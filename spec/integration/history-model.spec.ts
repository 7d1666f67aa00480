/**
 * Historical queries against a model: random publishes and deletes over keys that sort
 * differently in UTF-16 and UTF-8, then the state at many SCNs, compared with the state the
 * event sequence gives (semantics.md 6) - in key order (UTF-8 bytes, LevelDB's order), with
 * each record's version SCN. Again after a restart (the version index is rebuilt from the
 * table), and while a publisher keeps writing.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { send } from '../support/client.js';
import { sowQuery, keyOf, scnOf, bodyJson } from '../support/sow-client.js';
import { prng } from '../../tools/crash/common.js';

const KEYS = ['a', 'ab', 'b', 'k\u00e9', 'z', '\ue000x', '\uffff', 'y\ud83d\ude00', '\ud83d\ude00', 'A', '0', 'a b', 'key-10', 'key-9', '\u4e2d', 'zz'];
const queue = (name: string) => ({ address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', 'sow.history.window': '1h' } });

interface Version { scn: number; v: number | null }

/** Per key its versions (v null = deleted), from the events in SCN order. */
function model(events: Array<{ key: string; v: number | null }>): Map<string, Version[]> {
  const m = new Map<string, Version[]>();
  events.forEach((e, i) => {
    const list = m.get(e.key) ?? [];
    // A delete of a key with no record is not an event that changes anything the query sees.
    list.push({ scn: i + 1, v: e.v });
    m.set(e.key, list);
  });
  return m;
}

/** The expected answer at S: [key, v, scn] in UTF-8 byte order of the keys. */
function expected(m: Map<string, Version[]>, S: number): Array<[string, number, number]> {
  const out: Array<[string, number, number]> = [];
  for (const [key, list] of m) {
    let at: Version | undefined;
    for (const x of list) if (x.scn <= S) at = x;
    if (at && at.v !== null) out.push([key, at.v, at.scn]);
  }
  return out.sort((x, y) => Buffer.compare(Buffer.from(x[0]), Buffer.from(y[0])));
}

async function answer(url: string, q: string, S: number): Promise<Array<[string, number, number]>> {
  const r = await sowQuery(url, q, { bookmark: String(S) });
  return r.records.map((m) => [keyOf(m), bodyJson(m).v, scnOf(m)]);
}

describe('historical queries against a model (version index)', function () {
  this.timeout(120000);
  let tb: TestBroker;
  before(async () => { tb = await startTestBroker(); });
  after(async () => { await tb.stop(); });

  const rand = prng(20261130);
  const events: Array<{ key: string; v: number | null }> = [];
  const live = new Set<string>();

  async function publish(q: string, n: number) {
    const msgs: unknown[] = [];
    for (let i = 0; i < n; i++) {
      const key = KEYS[Math.floor(rand() * KEYS.length)];
      const idx = events.length;
      // Deletes only of live keys: each one is an event (a delete of nothing is refused or a no-op).
      if (live.has(key) && rand() < 0.2) {
        events.push({ key, v: null }); live.delete(key);
        msgs.push({ message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id: key }) });
      } else {
        events.push({ key, v: idx }); live.add(key);
        msgs.push({ body: JSON.stringify({ id: key, v: idx }) });
      }
    }
    const out = await send(tb.url, events.length === n ? queue(q) : q, msgs as any[]);
    expect(out.every((o) => o.state === 'accepted'), JSON.stringify(out.find((o) => o.state !== 'accepted'))).to.equal(true);
  }

  const points = () => [0, 1, 2, 17, 100, 250, 333, 499, 500, 501, 599, 600, 650, 10_000].concat(Array.from({ length: 8 }, () => Math.floor(rand() * 600)));

  it('every point in time gives the model\'s state, in UTF-8 key order, with the version SCNs', async function () {
    for (let b = 0; b < 15; b++) await publish('hm.q', 40);
    const now = await sowQuery(tb.url, 'hm.q');
    expect(now.groupEnd).to.equal(events.length); // SCNs are 1..N, one per event
    const m = model(events);
    for (const S of points()) expect(await answer(tb.url, 'hm.q', S), `S=${S}`).to.deep.equal(expected(m, Math.min(S, events.length)));
  });

  it('the same after a restart (the index is rebuilt from the table)', async function () {
    await tb.restart();
    const m = model(events);
    for (const S of points()) expect(await answer(tb.url, 'hm.q', S), `S=${S}`).to.deep.equal(expected(m, Math.min(S, events.length)));
  });

  it('a query answers for its point while a publisher keeps writing, and new keys join later answers', async function () {
    const before = model(events);
    const n0 = events.length;
    const writing = (async () => { for (let b = 0; b < 10; b++) await publish('hm.q', 30); })();
    const answers = await Promise.all([300, n0, 450].map((S) => answer(tb.url, 'hm.q', S)));
    await writing;
    expect(answers[0]).to.deep.equal(expected(before, 300));
    expect(answers[1]).to.deep.equal(expected(before, n0));
    expect(answers[2]).to.deep.equal(expected(before, 450));
    const m = model(events);
    for (const S of [n0 + 1, n0 + 150, events.length]) expect(await answer(tb.url, 'hm.q', S), `S=${S}`).to.deep.equal(expected(m, S));
  });
});
