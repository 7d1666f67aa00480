/** lib/ext/sow/sorted-keys.ts: the snapshot key list, and its compaction without a snapshot. */
import { expect } from 'chai';
import { SortedKeys } from '../../../lib/ext/sow/sorted-keys.js';

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
});
