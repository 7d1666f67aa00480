/** lib/codec/own-bytes.ts: bytes a queue keeps do not pin a slab of Node's buffer pool. */
import { expect } from 'chai';
import { ownCopy } from '../../../lib/codec/own-bytes.js';
import { mergeDelta } from '../../../lib/ext/sow/delta-merge.js';
import { encodeMessage } from '../../../lib/codec/message-bytes.js';

describe('ownCopy', () => {
  it('copies the bytes into memory of their own', () => {
    const pooled = Buffer.from('a small message, cut from the shared pool');
    expect(pooled.buffer.byteLength).to.be.greaterThan(pooled.length); // (the premise: Node pools small buffers)
    const c = ownCopy(pooled);
    expect(c.equals(pooled)).to.equal(true);
    expect(c.byteOffset).to.equal(0);
    expect(c.buffer.byteLength).to.equal(pooled.length);
    pooled[0] = 0x41;
    expect(c[0]).to.equal('a'.charCodeAt(0)); // a copy, not a view
  });

  it('an empty buffer stays empty', () => {
    expect(ownCopy(Buffer.alloc(0)).length).to.equal(0);
  });

  it('a merged SOW record (delta) is kept in memory of its own', () => {
    const prev = encodeMessage({ body: JSON.stringify({ id: 'k1', price: 1, qty: 5 }) });
    const merged = mergeDelta(prev, { price: 2 }, 'q');
    expect(merged.byteOffset).to.equal(0);
    expect(merged.buffer.byteLength).to.equal(merged.length);
    expect(merged.toString('latin1')).to.contain('"price":2').and.to.contain('"qty":5');
  });
});
