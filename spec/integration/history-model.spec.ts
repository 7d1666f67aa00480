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
import { ManualClock } from '../../lib/index.js';
import { readKeyHistory } from '../../lib/ext/sow/history-read.js';

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

  const points = () => [0, 1, 2, 17, 100, 250, 333, 499, 500, 501, 599, 600].concat(Array.from({ length: 8 }, () => Math.floor(rand() * 600)));

  it('every point in time gives the model\'s state, in UTF-8 key order, with the version SCNs', async function () {
    for (let b = 0; b < 15; b++) await publish('hm.q', 40);
    const now = await sowQuery(tb.url, 'hm.q');
    expect(now.groupEnd).to.equal(events.length); // SCNs are 1..N, one per event
    const m = model(events);
    for (const S of points()) expect(await answer(tb.url, 'hm.q', S), `S=${S}`).to.deep.equal(expected(m, Math.min(S, events.length)));
    // A point past the head is no state that existed: refused (wire.md 5), not answered with today's.
    for (const S of [events.length + 1, 10_000]) {
      const err = await answer(tb.url, 'hm.q', S).then(() => undefined, (e) => e);
      expect(err?.condition, `S=${S}`).to.equal('amqp:invalid-field');
    }
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

describe('historical queries with granularity against the retained versions (G > 0)', function () {
  this.timeout(120000);
  const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);
  const G = 10_000;
  let clock: ManualClock;
  let tb: TestBroker;
  before(async () => { clock = new ManualClock(T0); tb = await startTestBroker({}, { clock }); });
  after(async () => { await tb.stop(); });

  it('each answer holds, per key, the newest retained version at or before T; every version existed; at most one superseded version per G; the same after a restart', async function () {
    const q = 'hm.g';
    const rand = prng(424242);
    const keys = ['a', 'b', 'c', 'd', 'e', '\ud83d\ude00', '\uffff'];
    const events: Array<{ t: number; key: string; v: number | null }> = [];
    const live = new Set<string>();
    let t = T0;
    async function publish(n: number) {
      for (let i = 0; i < n; i++) {
        t += Math.floor(rand() * 6000);
        clock.set(t);
        const key = keys[Math.floor(rand() * keys.length)];
        const del = live.has(key) && rand() < 0.25;
        const idx = events.length;
        const msg = del ? { message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id: key }) } : { body: JSON.stringify({ id: key, v: idx }) };
        if (del) live.delete(key); else live.add(key);
        events.push({ t, key, v: del ? null : idx });
        const out = await send(tb.url, idx === 0 ? { address: q, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', 'sow.history.window': '1d', 'sow.history.granularity': '10s' } } : q, [msg]);
        expect(out[0].state).to.equal('accepted');
      }
      clock.set(t + 1000);
    }
    async function check() {
      const queue = tb.broker.nodes.get(q)!;
      // The retained versions, read from the table (not through the version index).
      const retained = new Map<string, Array<{ scn: number; ts: number; op: string }>>();
      for (const key of keys) retained.set(key, ((await readKeyHistory(queue, key))?.versions ?? []).map(({ scn, ts, op }) => ({ scn, ts, op })));
      let tombs = 0;
      for (const [key, vs] of retained) {
        // Superseded versions (all but the last), tombstones included, kept at least G apart: a
        // copy is kept when the event superseding it arrives (semantics.md 6), so the moments
        // of keeping, the times of the key's events after them, are G apart (not the versions' own times).
        const keptAt = (scn: number) => events.find((e, i) => i + 1 > scn && e.key === key)!.t;
        for (let i = 1; i < vs.length - 1; i++) expect(keptAt(vs[i].scn) - keptAt(vs[i - 1].scn), `${key}: kept versions ${JSON.stringify(vs.slice(Math.max(0, i - 2), i + 2))}`).to.be.at.least(G);
        for (const x of vs) expect(events[x.scn - 1].key, `version ${x.scn} is an event of ${key}`).to.equal(key);
        // And a state current for G or longer is never dropped (the last copy was kept at or
        // before it was made): every version of the key that lasted G is retained (W = 1 d).
        const ofKey = events.map((e, i) => ({ ...e, scn: i + 1 })).filter((e) => e.key === key);
        for (let i = 0; i + 1 < ofKey.length; i++) {
          if (ofKey[i + 1].t - ofKey[i].t >= G) expect(vs.some((x) => x.scn === ofKey[i].scn), `${key}: version ${ofKey[i].scn} was current for ${ofKey[i + 1].t - ofKey[i].t} ms`).to.equal(true);
        }
        tombs += vs.slice(0, -1).filter((x) => x.op === 'delete').length;
      }
      expect(tombs, 'superseded tombstones are among the kept versions').to.be.greaterThan(0);
      for (let n = 0; n < 30; n++) {
        const T = T0 + Math.floor(rand() * (t - T0 + 2000));
        const S = events.filter((e) => e.t <= T).length; // SCN of the last event at or before T
        const want: Array<[string, number]> = [];
        for (const [key, vs] of retained) {
          const at = [...vs].reverse().find((x) => x.scn <= S);
          if (at && at.op !== 'delete') want.push([key, events[at.scn - 1].v as number]);
        }
        want.sort((x, y) => Buffer.compare(Buffer.from(x[0]), Buffer.from(y[0])));
        const r = await sowQuery(tb.url, q, { bookmark: new Date(T).toISOString() });
        const got = r.records.map((m) => [keyOf(m), bodyJson(m).v] as [string, number]);
        expect(got, `T = T0 + ${T - T0} ms (S = ${S})`).to.deep.equal(want);
        // Every version in the answer existed at T: published at or before it.
        for (const [, v] of got) expect(events[v].t).to.be.at.most(T);
      }
    }
    await publish(160);
    await check();
    // After a restart the tombstones and kept times are rebuilt: re-created keys still follow G.
    await tb.restart();
    await publish(120);
    await check();
  });
});
