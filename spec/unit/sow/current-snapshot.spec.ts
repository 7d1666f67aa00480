/** lib/ext/sow/current-snapshot.ts: the records at S, from memory where unchanged, from the LevelDB snapshot where changed since. */
import { expect } from 'chai';
import { rmSync } from 'node:fs';
import { CurrentSnapshot, type SnapshotRow } from '../../../lib/ext/sow/current-snapshot.js';
import type { SowRecord } from '../../../lib/ext/sow/sow-structure.js';
import { Store } from '../../../lib/core/storage/store.js';
import { encodeEvent } from '../../../lib/core/engine/event-record.js';
import { sowKey } from '../../../lib/ext/sow/tables.js';
import { tempDir } from '../../support/broker.js';
import { encodeMessage, decodeMessage } from '../../../lib/codec/message-bytes.js';
import { sortBytewise } from '../../../lib/ext/sow/version-index.js';
import { SortedKeys } from '../../../lib/ext/sow/sorted-keys.js';

const QID = 3;
/** A record's message: an AMQP message whose body is the text (snapshots index its sections). */
const msg = (s: string) => encodeMessage({ body: s });
const text = (b: Buffer) => String(decodeMessage(b).body);

/** A SOW table and its records in memory, kept in step as the structure keeps them. */
class Fixture {
  readonly records = new Map<string, SowRecord>();
  /** Keys of changes "on their way" (SowStructure.#pending). */
  readonly pending = new Set<string>();
  constructor(readonly store: Store) {}
  recordRows(): { at(key: string): { row: Buffer }; close(): void } { return { at: (key) => ({ row: sowKey(QID, key) }), close: () => {} }; }
  snapshotKeys(): string[] {
    const keys = [...this.records.keys()];
    for (const k of this.pending) if (!this.records.has(k)) keys.push(k);
    sortBytewise(keys);
    return keys;
  }
  /** A committed publish: the row and the record. */
  async put(key: string, scn: number, body: string, exp?: number): Promise<void> {
    const bytes = msg(body);
    await this.store.batch([{ type: 'put', key: sowKey(QID, key), value: encodeEvent({ ts: 1000 + scn, op: 'publish', key, w: scn, ...(exp !== undefined ? { exp } : {}) }, bytes) }], true);
    this.records.set(key, { scn, ts: 1000 + scn, bytes, ...(exp !== undefined ? { exp } : {}) });
  }
  async del(key: string): Promise<void> {
    await this.store.batch([{ type: 'del', key: sowKey(QID, key) }], true);
    this.records.delete(key);
  }
}

async function all(s: CurrentSnapshot, n: number): Promise<SnapshotRow[]> {
  const out: SnapshotRow[] = [];
  for (let i = 0; i < 10000; i++) {
    const rows = await s.next(n);
    if (rows.length === 0) return out;
    out.push(...rows);
  }
  throw new Error('the snapshot did not end');
}
const show = (rows: SnapshotRow[]) => rows.map((r) => `${r.key}@${r.scn}=${text(r.bytes)}${r.exp !== undefined ? `/exp ${r.exp}` : ''}`);

describe('CurrentSnapshot (SOW records at an SCN)', () => {
  let dir: string, store: Store;
  beforeEach(async () => { dir = tempDir(); store = await Store.open(dir); });
  afterEach(async () => { await store.close(); rmSync(dir, { recursive: true, force: true }); });

  it('gives the state at S in UTF-8 key order while records change, are deleted and created after it', async () => {
    const f = new Fixture(store);
    // Keys whose UTF-16 and UTF-8 orders differ (U+FFFD against an astral character), and plain ones.
    const keys = ['b', 'a', 'c', '\u{1F600}', '\uFFFD', 'd', 'e'];
    let scn = 0;
    for (const k of keys) await f.put(k, ++scn, `v1 ${k}`, k === 'e' ? 99999 : undefined);
    const S = scn;
    const snap = new CurrentSnapshot(f, store, S);
    // After S: an update, a delete, a create, a delete then re-create, and a change on its way.
    await f.put('b', ++scn, 'v2 b');
    await f.del('c');
    await f.put('aa', ++scn, 'v1 aa');
    await f.del('d'); await f.put('d', ++scn, 'v2 d');
    f.records.set('a', { scn: ++scn, ts: 1, bytes: msg('pending a') }); f.pending.add('a'); // prepared, not written
    const got = await all(snap, 2);
    expect(show(got)).to.deep.equal(['a@2=v1 a', 'b@1=v1 b', 'c@3=v1 c', 'd@6=v1 d', 'e@7=v1 e/exp 99999', '\uFFFD@5=v1 \uFFFD', '\u{1F600}@4=v1 \u{1F600}']);
    await snap.close();
  });

  it('lists a key deleted by a change on its way (record gone from memory, row still at S); skips a key created by one', async () => {
    const f = new Fixture(store);
    await f.put('k1', 1, 'one'); await f.put('k2', 2, 'two');
    f.records.delete('k1'); f.pending.add('k1'); // a delete prepared, not written
    f.records.set('k3', { scn: 3, ts: 1, bytes: msg('three') }); f.pending.add('k3'); // a create prepared
    const snap = new CurrentSnapshot(f, store, 2);
    expect(show(await all(snap, 10))).to.deep.equal(['k1@1=one', 'k2@2=two']);
    await snap.close();
  });

  it('resumes after a key (a resumed bootstrap), and a chunk whose keys all have no record at S does not end it early', async () => {
    const f = new Fixture(store);
    let scn = 0;
    for (const k of ['a', 'b', 'c', 'd', 'e', 'f']) await f.put(k, ++scn, k);
    const S = scn;
    for (const k of ['ba', 'bb', 'bc', 'bd']) { f.records.set(k, { scn: ++scn, ts: 1, bytes: msg(k) }); f.pending.add(k); } // created after S
    const snap = new CurrentSnapshot(f, store, S, 'b');
    const first = await snap.next(2); // 'ba', 'bb': nothing at S; it goes on to 'bc', 'bd', then 'c', 'd'
    expect(show(first)).to.deep.equal(['c@3=c', 'd@4=d']);
    expect(show(await all(snap, 2))).to.deep.equal(['e@5=e', 'f@6=f']);
    await snap.close();
    const from = new CurrentSnapshot(f, store, S, 'bz'); // a key that does not exist: the next one on
    expect(show(await all(from, 100))).to.deep.equal(['c@3=c', 'd@4=d', 'e@5=e', 'f@6=f']);
    await from.close();
  });

  it('close() during a read waits for it, and next() after close gives nothing', async () => {
    const f = new Fixture(store);
    for (let i = 0; i < 50; i++) await f.put(`k${i}`, i + 1, `v${i}`);
    for (let i = 0; i < 50; i++) f.records.set(`k${i}`, { scn: 100 + i, ts: 1, bytes: msg('new') }); // all changed since S: all read
    const snap = new CurrentSnapshot(f, store, 50);
    const reading = snap.next(50);
    await snap.close();
    expect(await reading).to.deep.equal([]);
    expect(await snap.next(50)).to.deep.equal([]);
  });
});

describe('SortedKeys (the SOW keys in byte order, kept between snapshots)', () => {
  const utf8Order = (a: string, b: string) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));

  it('merges new keys in UTF-8 order, drops removed ones, lists a key made again once, and never changes a list handed out', () => {
    const live = new Set<string>();
    const k = new SortedKeys();
    for (const key of ['a', 'c', 'e']) { k.load(key); live.add(key); }
    const first = k.list((x) => live.has(x), () => false);
    expect(first).to.deep.equal(['a', 'c', 'e']);
    expect(k.list((x) => live.has(x), () => false), 'nothing new: the same list').to.equal(first);
    for (const key of ['\u{1F600}', '\uFFFD', 'b', 'd']) { k.added(key); live.add(key); }
    live.delete('c'); k.removed();
    live.delete('a'); k.removed(); k.added('a'); live.add('a'); // deleted and made again
    const second = k.list((x) => live.has(x), () => false);
    expect(second).to.deep.equal(['a', 'b', 'd', 'e', '\uFFFD', '\u{1F600}']);
    expect(first, 'the first list as it was').to.deep.equal(['a', 'c', 'e']);
    const keep = new Set(['b']); // a key without a record that a snapshot still needs (a delete on its way)
    live.delete('b'); k.removed();
    expect(k.list((x) => live.has(x), (x) => keep.has(x))).to.deep.equal(['a', 'b', 'd', 'e', '\uFFFD', '\u{1F600}']);
    keep.clear(); // the delete written: the next list leaves it out, with nothing else removed meanwhile
    expect(k.list((x) => live.has(x), () => false)).to.deep.equal(['a', 'd', 'e', '\uFFFD', '\u{1F600}']);
  });

  it('stays equal to the live keys sorted, over random adds, removes and re-creations', () => {
    let seed = 11;
    const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
    const pool = ['a', 'b', 'z', '\u00e9', '\u4e2d', '\uFFFD', '\u{1F600}', '\u{10000}', 'ab', 'a\u{1F600}'];
    const live = new Set<string>();
    const k = new SortedKeys();
    for (let step = 0; step < 2000; step++) {
      const key = pool[Math.floor(rand() * pool.length)] + String(Math.floor(rand() * 20));
      if (live.has(key)) { live.delete(key); k.removed(); } else { live.add(key); k.added(key); }
      if (step % 37 === 0) expect(k.list((x) => live.has(x), () => false)).to.deep.equal([...live].sort(utf8Order));
    }
    expect(k.list((x) => live.has(x), () => false)).to.deep.equal([...live].sort(utf8Order));
  });
});
