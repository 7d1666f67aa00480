/**
 * A SOW snapshot is the state at its SCN, however the records change while it streams
 * (architecture invariant 3). The snapshot reads records from memory where they have not
 * changed since its SCN and from a LevelDB snapshot where they have (current-snapshot.ts):
 * these tests change, delete and create keys all over the key range while a slow consumer
 * is part way through, past what the link reads ahead.
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openSender, openReceiver, sendAll, collect, type Received } from '../support/client.js';
import { tmFilters, cmdOf, scnOf, keyOf, bodyJson } from '../support/sow-client.js';

const sowQueue = (name: string, args: Record<string, unknown> = {}) => ({ address: name, capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'sow.key': '/id', ...args } });
/**
 * The queue kinds whose records a snapshot reads differently (sow-structure.ts "Where records
 * live"): without history from `sow` rows; with history from each key's version at S in `hist`;
 * with granularity too, where an event after S deletes the version at S it supersedes (each key
 * gets a version before the one current at S, so the one at S is not the kept one).
 */
const KINDS = [
  { kind: 'no history', args: {}, versionsBefore: 1 },
  { kind: 'history', args: { 'sow.history.window': '1h' }, versionsBefore: 1 },
  { kind: 'history with granularity', args: { 'sow.history.window': '1h', 'sow.history.granularity': '1h' }, versionsBefore: 2 },
];
const K = 3000; // more than the link reads ahead of its credit (SNAPSHOT_CHUNK + LOW_WATER)
const key = (i: number) => `k${String(i).padStart(5, '0')}`;

/** Waits until `n` messages arrived on `got`. */
async function until(got: Received[], n: number): Promise<void> {
  for (let i = 0; i < 500 && got.length < n; i++) await new Promise((res) => setTimeout(res, 10));
  expect(got.length, 'messages arrived').to.be.at.least(n);
}

describe('SOW snapshots stay at their SCN while records change (current-snapshot.ts)', function () {
  this.timeout(60000);
  const b = useBroker();

  for (const { kind, args, versionsBefore } of KINDS) for (const command of ['sow', 'sow_and_subscribe']) {
    it(`${command}, ${kind}: the records are the state at group_end's SCN, whatever is published, deleted and created meanwhile`, async function () {
      const url = b.get().url;
      const c = await connect(url);
      try {
        const name = `snapcons.${command}.${kind.replace(/ /g, '-')}`;
        const snd = await openSender(c, sowQueue(name, args));
        for (let v = 1 - versionsBefore; v <= 0; v++) {
          const initial = await sendAll(snd, Array.from({ length: K }, (_, i) => ({ body: JSON.stringify({ id: key(i), v }) })));
          expect(initial.every((o) => o.state === 'accepted')).to.equal(true);
        }
        const S = K * versionsBefore;

        const rc = await connect(url);
        const rcv = await openReceiver(rc, { address: name, filter: tmFilters({ command }) });
        const got: Received[] = [];
        const early = (ctx: any) => { got.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept(); };
        rcv.on('message', early);
        rcv.add_credit(20);
        await until(got, 20); // the snapshot is open, 19 records out
        rcv.removeListener('message', early);

        // Changes over the whole key range: every 3rd key republished, every 7th deleted, every
        // 11th changed by a delta, and new keys between the old ones.
        const changes: any[] = [];
        for (let i = 0; i < K; i++) {
          if (i % 7 === 3) changes.push({ message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id: key(i) }) });
          else if (i % 3 === 0) changes.push({ body: JSON.stringify({ id: key(i), v: 1 }) });
          else if (i % 11 === 5) changes.push({ message_annotations: { 'x-opt-tm-op': 'delta' }, body: JSON.stringify({ id: key(i), v: 2 }) });
          if (i % 13 === 0) changes.push({ body: JSON.stringify({ id: key(i) + 'x', v: 3 }) });
        }
        const out = await sendAll(snd, changes);
        expect(out.every((o) => o.state === 'accepted')).to.equal(true);

        const rest = await collect(rcv, { credit: 1000, idleMs: 3000, until: (m) => command === 'sow' ? cmdOf(m) === 'group_end' : cmdOf(m) === 'publish' && scnOf(m) === S + changes.length });
        const all = [...got, ...rest];
        const endAt = all.findIndex((m) => cmdOf(m) === 'group_end');
        expect(endAt, 'group_end').to.be.greaterThan(0);
        expect(scnOf(all[endAt]), 'the snapshot is at the last SCN before the changes').to.equal(S);
        const records = all.slice(0, endAt).filter((m) => cmdOf(m) === 'sow');
        expect(records.map(keyOf), 'every key as it was, none created since, in key order').to.deep.equal(Array.from({ length: K }, (_, i) => key(i)));
        const stale = records.filter((m) => bodyJson(m).v !== 0 || scnOf(m) > S || scnOf(m) <= S - K);
        expect(stale.map((m) => `${keyOf(m)}@${scnOf(m)}`), 'records changed after the snapshot').to.deep.equal([]);

        if (command === 'sow_and_subscribe') {
          // Then the changes as events, each once, in SCN order: snapshot + events = the state now.
          const events = all.slice(endAt + 1).filter((m) => ['publish', 'delete'].includes(cmdOf(m)));
          expect(events.map(scnOf)).to.deep.equal(Array.from({ length: changes.length }, (_, i) => S + 1 + i));
          const state = new Map(records.map((m) => [keyOf(m), bodyJson(m).v]));
          for (const m of events) {
            if (cmdOf(m) === 'delete') state.delete(keyOf(m));
            else state.set(keyOf(m), bodyJson(m).v);
          }
          const now = new Map<string, number>();
          for (let i = 0; i < K; i++) {
            if (i % 7 === 3) continue;
            now.set(key(i), i % 3 === 0 ? 1 : i % 11 === 5 ? 2 : 0);
          }
          for (let i = 0; i < K; i += 13) now.set(key(i) + 'x', 3);
          expect(state).to.deep.equal(now);
        }
        await rc.close();
      } finally { await c.close(); }
    });
  }

  it('a historical query takes unchanged records from memory and changed ones from history: each key as it was at the bookmark', async function () {
    const url = b.get().url;
    const c = await connect(url);
    try {
      const name = 'snapcons.hist';
      const snd = await openSender(c, { address: name, capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'sow.key': '/id', 'sow.history.window': '1h', 'sow.history.granularity': '0s' } });
      const n = 600;
      await sendAll(snd, Array.from({ length: n }, (_, i) => ({ body: JSON.stringify({ id: key(i), v: 0 }) })));
      // After SCN n: every 3rd key republished, every 5th deleted (the others stay as they were).
      const later: any[] = [];
      for (let i = 0; i < n; i++) {
        if (i % 5 === 1) later.push({ message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id: key(i) }) });
        else if (i % 3 === 0) later.push({ body: JSON.stringify({ id: key(i), v: 1 }) });
      }
      await sendAll(snd, later);
      const asOf = async (bookmark: string) => {
        const rc = await connect(url);
        try {
          const rcv = await openReceiver(rc, { address: name, filter: tmFilters({ command: 'sow', bookmark }) });
          const got = await collect(rcv, { credit: 1000, idleMs: 3000, until: (m) => cmdOf(m) === 'group_end' });
          return got.filter((m) => cmdOf(m) === 'sow').map((m) => `${keyOf(m)}=${bodyJson(m).v}@${scnOf(m)}`);
        } finally { await rc.close(); }
      };
      expect(await asOf(String(n)), 'at SCN n: every key at v0, with the SCN it was written at').to.deep.equal(Array.from({ length: n }, (_, i) => `${key(i)}=0@${i + 1}`));
      const now = await asOf(String(n + later.length));
      const want: string[] = [];
      let scn = n;
      const scnOfLater = new Map<number, number>();
      for (let i = 0; i < n; i++) if (i % 5 === 1 || i % 3 === 0) scnOfLater.set(i, ++scn);
      for (let i = 0; i < n; i++) {
        if (i % 5 === 1) continue;
        want.push(i % 3 === 0 ? `${key(i)}=1@${scnOfLater.get(i)}` : `${key(i)}=0@${i + 1}`);
      }
      expect(now).to.deep.equal(want);
    } finally { await c.close(); }
  });
});
