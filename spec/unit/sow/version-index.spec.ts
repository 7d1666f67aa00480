/** lib/ext/sow/version-index.ts: per-key versions, key order, readers that hold back removals. */
import { expect } from 'chai';
import { VersionIndex, compareBytewise, sortBytewise } from '../../../lib/ext/sow/version-index.js';
import { prng } from '../../../tools/crash/common.js';
import { atOnce, KEYS_PER_SLICE } from '../../../lib/core/slices.js';

const utf8Order = (a: string, b: string) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));

/** Random strings over code points where UTF-16 and UTF-8 orders disagree. */
function randomKey(rand: () => number): string {
  const pool = [0x41, 0x61, 0x7a, 0xe9, 0x4e2d, 0xd7ff, 0xe000, 0xfffd, 0xffff, 0x1f600, 0x10000, 0x10ffff];
  let s = '';
  const n = 1 + Math.floor(rand() * 4);
  for (let i = 0; i < n; i++) s += String.fromCodePoint(pool[Math.floor(rand() * pool.length)]);
  return s;
}

describe('VersionIndex', () => {
  it('compareBytewise is UTF-8 byte order (code point order), unlike the engine\'s UTF-16 compare', () => {
    const rand = prng(7);
    let differs = 0;
    for (let i = 0; i < 20000; i++) {
      const a = randomKey(rand), b = randomKey(rand);
      expect(Math.sign(compareBytewise(a, b)), `${JSON.stringify(a)} vs ${JSON.stringify(b)}`).to.equal(Math.sign(utf8Order(a, b)));
      if (Math.sign(a < b ? -1 : a > b ? 1 : 0) !== Math.sign(utf8Order(a, b))) differs++;
    }
    expect(differs, 'the case exists in the sample').to.be.greaterThan(100);
    const keys = Array.from({ length: 3000 }, () => randomKey(rand));
    const want = [...keys].sort(utf8Order);
    sortBytewise(keys);
    expect(keys).to.deep.equal(want);
  });

  it('versionAt gives the newest version at or below S', () => {
    const x = new VersionIndex();
    for (const scn of [3, 8, 20]) x.add('k', scn);
    expect([0, 2, 3, 7, 8, 19, 20, 1000].map((S) => x.versionAt('k', S))).to.deep.equal([undefined, undefined, 3, 3, 8, 8, 20, 20]);
    expect(x.versionAt('none', 100)).to.equal(undefined);
    x.remove('k', 8);
    expect(x.versionAt('k', 10)).to.equal(3);
    expect(x.size).to.equal(2);
  });

  it("versionAt says whether the version it picks is the key's newest (only then can it be the current record)", () => {
    const x = new VersionIndex();
    for (const scn of [3, 8, 20]) x.add('k', scn);
    for (let scn = 1; scn <= 40; scn++) x.add('deep', scn * 2); // past the plain-array size
    const newest = { is: true };
    expect(x.versionAt('k', 10, newest)).to.equal(8);
    expect(newest.is).to.equal(false);
    expect(x.versionAt('k', 20, newest)).to.equal(20);
    expect(newest.is).to.equal(true);
    expect(x.versionAt('k', 2, newest)).to.equal(undefined);
    expect(newest.is).to.equal(false);
    expect(x.versionAt('deep', 79, newest)).to.equal(78);
    expect(newest.is).to.equal(false);
    expect(x.versionAt('deep', 1000, newest)).to.equal(80);
    expect(newest.is).to.equal(true);
  });

  it('a reader sees keys in byte order and keeps its answers at S; the index and later readers see removals at once', () => {
    const x = new VersionIndex();
    x.load('a', 1); x.load('c', 2); x.load('\ud83d\ude00', 3); // recovery: table order
    x.add('\uffff', 4); x.add('b', 5);
    const r1 = x.openReader(5);
    expect(r1.keys).to.deep.equal(['a', 'b', 'c', '\uffff', '\ud83d\ude00']);
    x.add('aa', 6);
    x.remove('c', 2);
    expect(x.versionAt('c', 10), 'the index moves on').to.equal(undefined);
    const newest = { is: true };
    expect(r1.versionAt('c', newest), 'r1 keeps the version its snapshot holds').to.equal(2);
    expect(newest.is, 'a removed version is not the current record').to.equal(false);
    expect(r1.keys, 'r1 keeps its list').to.deep.equal(['a', 'b', 'c', '\uffff', '\ud83d\ude00']);
    const r2 = x.openReader(6);
    expect(r2.keys, 'a key with no versions left is dropped at the next merge').to.deep.equal(['a', 'aa', 'b', '\uffff', '\ud83d\ude00']);
    expect(r2.versionAt('c'), 'a reader opened after the removal does not see it').to.equal(undefined);
    r1.close();
    r1.close(); // twice is harmless
    r2.close();
    expect(x.size).to.equal(5);
  });

  it('a reader pins only the version it picks: older ones and versions above S are not kept for it', () => {
    const x = new VersionIndex();
    for (const scn of [1, 3, 5]) x.add('k', scn);
    const r = x.openReader(4, false);
    expect(r.keys).to.deep.equal([]);
    x.remove('k', 1); // not its pick (3 is newer and <= 4)
    expect(r.versionAt('k')).to.equal(3);
    x.add('k', 7);
    x.remove('k', 5); // above S
    x.remove('k', 3); // its pick: pinned
    expect(x.versionsOf('k')).to.deep.equal([7]);
    expect(r.versionAt('k')).to.equal(3);
    const late = x.openReader(4, false);
    expect(late.versionAt('k')).to.equal(undefined);
    r.close(); late.close();
  });

  it('granularity order (the current version removed, then its successor added): the reader keeps the version at S', () => {
    const x = new VersionIndex();
    x.add('k', 1); x.add('k', 2);
    const r = x.openReader(2);
    x.remove('k', 2); x.add('k', 3); // committed(): drop the superseded version, add the new one
    x.remove('k', 3); x.add('k', 4);
    expect(r.versionAt('k')).to.equal(2);
    expect(x.versionsOf('k')).to.deep.equal([1, 4]);
    r.close();
  });

  it('a deep history (past the plain-array size) grows, answers and shrinks correctly', () => {
    const x = new VersionIndex();
    const want: number[] = [];
    for (let i = 1; i <= 1000; i++) { x.add('deep', i * 3); want.push(i * 3); }
    expect(x.versionsOf('deep')).to.deep.equal(want);
    expect([0, 3, 4, 1500, 2999, 3000, 9999].map((S) => x.versionAt('deep', S))).to.deep.equal([undefined, 3, 3, 1500, 2997, 3000, 3000]);
    // A purge takes the oldest, then granularity the newest; the list shrinks through both forms.
    for (let i = 1; i <= 980; i++) { x.remove('deep', i * 3); want.shift(); }
    expect(x.versionsOf('deep')).to.deep.equal(want);
    x.remove('deep', 3000); want.pop();
    x.remove('deep', 2961); want.splice(want.indexOf(2961), 1);
    x.remove('deep', 12345); // not there: nothing happens
    expect(x.versionsOf('deep')).to.deep.equal(want);
    expect(x.versionAt('deep', 2962)).to.equal(2958);
    for (let i = 1001; i <= 1100; i++) { x.add('deep', i * 3); want.push(i * 3); }
    expect(x.versionsOf('deep')).to.deep.equal(want);
    expect(x.size).to.equal(want.length);
  });

  it('SCNs far apart (offsets past 32 bits) are kept exactly', () => {
    const x = new VersionIndex();
    const want: number[] = [];
    for (let i = 0; i < 40; i++) { const scn = 5 + i * 7; x.add('far', scn); want.push(scn); }
    for (const scn of [2 ** 33, 2 ** 40 + 1, 2 ** 52 + 3]) { x.add('far', scn); want.push(scn); }
    expect(x.versionsOf('far')).to.deep.equal(want);
    expect(x.versionAt('far', 2 ** 41)).to.equal(2 ** 40 + 1);
    expect(x.versionAt('far', 2 ** 53)).to.equal(2 ** 52 + 3);
    x.remove('far', 2 ** 40 + 1); want.splice(want.indexOf(2 ** 40 + 1), 1);
    expect(x.versionsOf('far')).to.deep.equal(want);
  });

  it('a key emptied and written again is listed once', () => {
    const x = new VersionIndex();
    x.add('k', 1);
    x.openReader(1).close();
    x.remove('k', 1);
    x.add('k', 2);
    x.add('j', 3);
    const keys = x.openReader(3).keys;
    expect(keys).to.deep.equal(['j', 'k']);
    expect(x.versionsOf('k')).to.deep.equal([2]);
  });

  it('agrees with a plain model over random adds, removals and readers (each reader answers as the index stood when it opened)', () => {
    const rand = prng(99);
    const x = new VersionIndex();
    const model = new Map<string, number[]>();
    const readers: Array<{ r: ReturnType<VersionIndex['openReader']>; S: number; at: Map<string, number[]> }> = [];
    let scn = 0;
    let pinnedAnswers = 0;
    const names = Array.from({ length: 40 }, () => randomKey(rand));
    const newestAt = (v: number[] | undefined, S: number) => (v ?? []).filter((y) => y <= S).pop();
    for (let step = 0; step < 8000; step++) {
      const r = rand();
      const key = names[Math.floor(rand() * names.length)];
      if (r < 0.5) { x.add(key, ++scn); model.set(key, [...(model.get(key) ?? []), scn]); }
      else if (r < 0.85) {
        const v = model.get(key);
        if (v?.length) {
          const s = v[Math.floor(rand() * v.length)];
          x.remove(key, s);
          model.set(key, v.filter((y) => y !== s));
        }
      } else if (r < 0.93 && readers.length < 3) {
        const S = Math.max(0, scn - Math.floor(rand() * 5)); // at or a little below the newest SCN
        readers.push({ r: x.openReader(S), S, at: new Map([...model].map(([k, v]) => [k, [...v]])) });
      } else if (readers.length) {
        readers.splice(Math.floor(rand() * readers.length), 1)[0].r.close();
      }
      for (const { r: rd, S, at } of readers) {
        const k = names[Math.floor(rand() * names.length)];
        const want = newestAt(at.get(k), S);
        expect(rd.versionAt(k), `reader at ${S}, key ${k}, step ${step}`).to.equal(want);
        if (want !== undefined && newestAt(model.get(k), S) !== want) pinnedAnswers++;
      }
      if (step % 250 === 0) {
        const keys = x.openReader(scn);
        const want = [...model].filter(([, v]) => v.length).map(([k]) => k).sort(utf8Order);
        expect(keys.keys.filter((k) => x.versionsOf(k).length)).to.deep.equal(want);
        keys.close();
        for (const [k, v] of model) {
          expect(x.versionsOf(k)).to.deep.equal(v);
          const S = Math.floor(rand() * (scn + 2));
          expect(x.versionAt(k, S)).to.equal(newestAt(v, S));
        }
      }
    }
    expect(pinnedAnswers, 'the model exercised answers that only a pin gives').to.be.greaterThan(20);
  });

  it('drops the keys with no versions left once they are a quarter of the keys (no query needed to merge them), readers unchanged', () => {
    const ix = new VersionIndex(atOnce);
    for (let i = 0; i < 100; i++) ix.add(`live${String(i).padStart(3, '0')}`, i + 1);
    const r = ix.openReader(1_000_000);
    const before = [...r.keys];
    let scn = 1000;
    // Order ids: each made, then purged whole by the sweep (a version and a tombstone).
    for (let i = 0; i < 20_000; i++) {
      const k = `order-${i}`;
      ix.add(k, ++scn); ix.add(k, ++scn);
      ix.remove(k, scn - 1); ix.remove(k, scn);
      expect(ix.keyCount).to.be.at.most(100 + 1025);
    }
    // A key purged while a reader was open is still answered through its pin.
    ix.add('late', ++scn);
    const r2 = ix.openReader(scn);
    ix.remove('late', scn);
    for (let i = 0; i < 2000; i++) { const k = `more-${i}`; ix.add(k, ++scn); ix.remove(k, scn); }
    expect(r2.versionAt('late')).to.equal(scn - 2000);
    expect(r.keys).to.deep.equal(before); // the key list a reader holds is never changed
    r.close(); r2.close();
    expect(ix.openReader(scn).keys).to.have.length(100);
    expect(ix.size).to.equal(100);
  });

  it('a key re-created after its entry was compacted away is listed again, once', () => {
    const ix = new VersionIndex();
    let scn = 0;
    for (let i = 0; i < 3000; i++) { const k = `k${i}`; ix.add(k, ++scn); ix.remove(k, scn); }
    ix.add('k5', ++scn);
    ix.compact();
    expect(ix.openReader(scn).keys).to.deep.equal(['k5']);
    expect(ix.versionsOf('k5')).to.deep.equal([scn]);
  });

  describe('the compaction is done a slice per turn (session 24: 0.35 s in one go at a million keys)', () => {
    /** A scheduler the test turns by hand: each call of turn() runs one step. */
    function manual() {
      let step: (() => boolean) | undefined;
      return { schedule: (s: () => boolean) => { step = s; }, turn: () => { const done = step!(); if (done) step = undefined; return done; }, get pending() { return step !== undefined; } };
    }

    it('no step looks at more than KEYS_PER_SLICE keys, and the keys come out right', () => {
      const m = manual();
      const ix = new VersionIndex(m.schedule);
      let scn = 0;
      const N = 100_000;
      for (let i = 0; i < N; i++) ix.add(`k${String(i).padStart(6, '0')}`, ++scn);
      ix.openReader(scn).close(); // all sorted
      // Remove every other key: the compaction becomes due at a quarter of the keys.
      let i = 0;
      for (; i < N && !m.pending; i += 2) ix.remove(`k${String(i).padStart(6, '0')}`, i + 1);
      expect(m.pending, 'a compaction was scheduled, not run inside remove()').to.equal(true);
      expect(ix.compacting).to.equal(true);
      const before = ix.keyCount;
      let steps = 0;
      // Meanwhile: removals go on, and one dropped key comes back.
      while (!m.turn()) {
        steps++;
        if (i < N) { ix.remove(`k${String(i).padStart(6, '0')}`, i + 1); i += 2; }
        if (steps === 3) ix.add('k000000', ++scn); // the pass has looked at it by now
      }
      expect(steps, 'steps of at most KEYS_PER_SLICE').to.be.at.least(Math.floor(before / KEYS_PER_SLICE));
      expect(ix.keyCount).to.be.below(before);
      const keys = ix.openReader(scn).keys;
      const expected = new Set<string>();
      for (let j = 0; j < N; j++) { const k = `k${String(j).padStart(6, '0')}`; if (ix.versionsOf(k).length) expected.add(k); }
      expect(keys).to.deep.equal([...expected].sort());
      expect(keys.filter((k) => k === 'k000000')).to.have.length(1);
    });

    it('a reader opened during the pass finishes it at once', () => {
      const m = manual();
      const ix = new VersionIndex(m.schedule);
      let scn = 0;
      const N = 100_000;
      for (let i = 0; i < N; i++) ix.add(`k${i}`, ++scn);
      ix.openReader(scn).close();
      for (let i = 0; i < N; i += 2) ix.remove(`k${i}`, i + 1);
      expect(m.pending).to.equal(true);
      expect(m.turn(), 'one step is not the whole pass').to.equal(false);
      const keys = ix.openReader(scn).keys;
      expect(keys).to.have.length(N / 2);
      expect(ix.compacting).to.equal(false);
      expect(m.turn(), 'the pass finished ends at its next step').to.equal(true);
      expect(ix.openReader(scn).keys).to.deep.equal(keys);
    });
  });
});
