/** lib/core/min-heap.ts: the expiry heaps' order, and `keep` dropping stale items. */
import { expect } from 'chai';
import { MinHeap } from '../../../lib/core/min-heap.js';

function rng(seed: number): () => number {
  return () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
}

describe('MinHeap', function () {
  it('pops in key order, ties included, interleaved with pushes (seeded against a sorted model)', function () {
    for (const seed of [1, 2, 3, 42, 777]) {
      const rnd = rng(seed);
      const heap = new MinHeap<{ k: number; id: number }>((x) => x.k);
      const model: Array<{ k: number; id: number }> = [];
      let id = 0;
      for (let step = 0; step < 2000; step++) {
        if (rnd() < 0.6) {
          const item = { k: Math.floor(rnd() * 50), id: id++ };
          heap.push(item); model.push(item);
        } else {
          const got = heap.pop();
          if (!model.length) { expect(got).to.equal(undefined); continue; }
          const min = Math.min(...model.map((x) => x.k));
          expect(got!.k, `seed ${seed} step ${step}`).to.equal(min);
          model.splice(model.indexOf(got!), 1);
        }
        expect(heap.size).to.equal(model.length);
        expect(heap.peek()?.k).to.equal(model.length ? Math.min(...model.map((x) => x.k)) : undefined);
      }
    }
  });

  it('keep() drops what it rejects and leaves a heap that still pops in order', function () {
    const rnd = rng(9);
    const heap = new MinHeap<{ k: number; stale: boolean }>((x) => x.k);
    for (let i = 0; i < 500; i++) heap.push({ k: Math.floor(rnd() * 1000), stale: rnd() < 0.7 });
    heap.keep((x) => !x.stale);
    const out: number[] = [];
    for (let x = heap.pop(); x; x = heap.pop()) { expect(x.stale).to.equal(false); out.push(x.k); }
    expect(out.length).to.be.within(100, 200);
    expect(out).to.deep.equal([...out].sort((a, b) => a - b));
  });
});
