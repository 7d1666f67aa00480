/** lib/core/fifo.ts: a FIFO with O(1) shift, against an array model. */
import { expect } from 'chai';
import { Fifo } from '../../../lib/core/fifo.js';

describe('Fifo', function () {
  it('shifts, pushes and indexes as an array would, across front cuts (seeded)', function () {
    let seed = 5;
    const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
    const fifo = new Fifo<number>(Array.from({ length: 3000 }, (_, i) => i));
    const model = Array.from({ length: 3000 }, (_, i) => i);
    let next = 3000;
    for (let step = 0; step < 20000; step++) {
      if (rnd() < 0.45) { fifo.push(next); model.push(next); next++; }
      else expect(fifo.shift(), `step ${step}`).to.equal(model.shift());
      expect(fifo.length).to.equal(model.length);
      if (model.length) {
        expect(fifo.at(0)).to.equal(model[0]);
        expect(fifo.at(model.length - 1)).to.equal(model[model.length - 1]);
      }
      expect(fifo.at(model.length)).to.equal(undefined);
    }
    expect(fifo.at(-1)).to.equal(undefined);
    while (model.length) expect(fifo.shift()).to.equal(model.shift());
    expect(fifo.shift()).to.equal(undefined);
    expect(fifo.length).to.equal(0);
  });
});
