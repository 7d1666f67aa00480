/** lib/ext/sow/sorted-keys.ts: the snapshot key list, and its compaction without a snapshot. */
import { expect } from 'chai';
import { SortedKeys } from '../../../lib/ext/sow/sorted-keys.js';
import { KEYS_PER_SLICE, atOnce } from '../../../lib/core/slices.js';

/** A scheduler the test turns by hand: each turn() runs one step. */
function manual() {
  let step: (() => boolean) | undefined;
  return { schedule: (s: () => boolean) => { step = s; }, turn: () => { const done = step!(); if (done) step = undefined; return done; }, get pending() { return step !== undefined; } };
}

describe('SortedKeys', () => {
  it('asks to be merged once removed keys are past a quarter of the list: churning keys stay bounded without a snapshot', () => {
    const keys = new SortedKeys();
    const live = new Set<string>();
    const merge = () => keys.list((k) => live.has(k), () => false);
    for (let i = 0; i < 50; i++) { const k = `live${i}`; live.add(k); keys.added(k); }
    let merges = 0;
    for (let i = 0; i < 50_000; i++) {
      // An order id made and deleted; every tenth one made and deleted again (listed twice).
      const k = `order-${i % 10 === 0 ? 'same' : i}`;
      live.add(k); keys.added(k);
      live.delete(k);
      if (keys.removed()) { merge(); merges++; }
      expect(keys.size).to.be.at.most(50 + 2 * 1025);
    }
    expect(merges).to.be.within(20, 60);
    expect(merge()).to.deep.equal([...live].sort());
  });

  it('keys kept for a delete on its way do not make every later delete merge again', () => {
    const keys = new SortedKeys();
    const live = new Set<string>();
    for (let i = 0; i < 10_000; i++) { const k = `k${String(i).padStart(5, '0')}`; live.add(k); keys.load(k); }
    // One batch deleting every key: each stays held (on its way) until it is durable.
    let merges = 0;
    for (const k of [...live]) {
      live.delete(k);
      if (keys.removed()) { keys.list((x) => live.has(x), () => true); merges++; }
    }
    expect(merges).to.be.at.most(8);
    expect(keys.list((x) => live.has(x), () => false)).to.deep.equal([]);
  });

  describe('pruning without a snapshot, a slice per turn (session 24: 0.35-2.4 s in one go at a million keys)', () => {
    it('no step looks at more than KEYS_PER_SLICE keys; keys made, deleted and made again meanwhile come out right', () => {
      const m = manual();
      const keys = new SortedKeys(m.schedule);
      const live = new Set<string>();
      const has = (k: string) => live.has(k);
      const N = 60_000;
      for (let i = 0; i < N; i++) { const k = `k${String(i).padStart(6, '0')}`; live.add(k); keys.load(k); }
      for (let i = 0; i < 40_000; i++) { const k = `f${i}`; live.add(k); keys.added(k); } // fresh, unsorted
      let looked = 0;
      const counting = (k: string) => { looked++; return has(k); };
      let i = 0;
      for (; i < N; i += 2) {
        live.delete(`k${String(i).padStart(6, '0')}`);
        if (keys.removed()) { keys.pruneSoon(counting, () => false); break; }
      }
      expect(m.pending, 'the pass was scheduled, not run inside the delete').to.equal(true);
      expect(looked).to.equal(0);
      let steps = 0;
      while (true) {
        looked = 0;
        const done = m.turn();
        expect(looked, 'keys one step looked at').to.be.at.most(KEYS_PER_SLICE);
        if (done) break;
        steps++;
        // Meanwhile: more deletes, a key the pass dropped made again, a new key.
        i += 2; live.delete(`k${String(i).padStart(6, '0')}`); keys.removed();
        if (steps === 2) { live.add('k000000'); keys.added('k000000'); }
        if (steps === 3) { live.add('new'); keys.added('new'); }
      }
      expect(steps).to.be.at.least(4);
      expect(keys.pruning).to.equal(false);
      expect(keys.size, 'deleted keys dropped').to.be.below(N + 40_000 - 10_000);
      expect(keys.list(has, () => false)).to.deep.equal([...live].sort());
    });

    it('keys of a delete on its way are kept; a snapshot during the pass merges everything itself', () => {
      const m = manual();
      const keys = new SortedKeys(m.schedule);
      const live = new Set<string>();
      for (let i = 0; i < 50_000; i++) { const k = `k${String(i).padStart(5, '0')}`; live.add(k); keys.load(k); }
      const onTheirWay = new Set<string>();
      for (let i = 0; i < 50_000; i += 2) {
        const k = `k${String(i).padStart(5, '0')}`;
        live.delete(k); onTheirWay.add(k);
        if (keys.removed()) keys.pruneSoon((x) => live.has(x), (x) => onTheirWay.has(x));
      }
      while (!m.turn()) { /* next */ }
      // Held keys stay listed (a snapshot at the last committed SCN must look at them) ...
      expect(keys.size).to.equal(50_000);
      onTheirWay.clear();
      // ... and the next pass drops them.
      keys.pruneSoon((x) => live.has(x), () => false);
      expect(m.turn(), 'one more step').to.equal(false);
      const snap = keys.list((x) => live.has(x), () => false);
      expect(snap).to.deep.equal([...live].sort());
      expect(keys.pruning).to.equal(false);
      expect(m.turn(), 'the pass a snapshot overtook ends without touching the lists').to.equal(true);
      expect(keys.list((x) => live.has(x), () => false)).to.equal(snap);
    });

    it('atOnce runs the pass inside the call (as before)', () => {
      const keys = new SortedKeys(atOnce);
      for (let i = 0; i < 3000; i++) keys.added(`k${i}`);
      keys.pruneSoon((k) => k === 'k7', () => false);
      expect(keys.size).to.equal(1);
    });
  });
});
