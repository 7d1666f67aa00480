/** lib/core/storage/store.ts getMany: values at a snapshot, and reads that leave the block cache alone. */
import { expect } from 'chai';
import { rmSync } from 'node:fs';
import { Store } from '../../../lib/core/storage/store.js';
import { scnKey } from '../../../lib/core/storage/keyspace.js';
import { tempDir } from '../../support/broker.js';

describe('Store getMany', () => {
  it('reads values at a snapshot, undefined where absent; with fillCache off the blocks read stay out of the block cache', async () => {
    const dir = tempDir();
    const store = await Store.open(dir);
    try {
      const rows = 4000;
      const key = (i: number) => scnKey(0x10, 3, i);
      await store.batch(Array.from({ length: rows }, (_, i) => ({ type: 'put' as const, key: key(i + 1), value: Buffer.alloc(1000, i % 251) })), false);
      await store.compactRange(key(0), key(rows + 1)); // into table files, read through blocks
      const snapshot = store.snapshot();
      await store.batch([{ type: 'put', key: key(1), value: Buffer.from('after') }], false);
      const keys = Array.from({ length: rows + 1 }, (_, i) => key(i + 1)); // the last one absent
      const before = store.approximateMemoryUsage();
      const cold = await store.getMany(keys, snapshot, false);
      const afterCold = store.approximateMemoryUsage();
      expect(cold.length).to.equal(rows + 1);
      expect(cold[0]).to.deep.equal(Buffer.alloc(1000, 0), 'the snapshot value, not the later write');
      expect(cold[2500]).to.deep.equal(Buffer.alloc(1000, 2500 % 251));
      expect(cold[rows]).to.equal(undefined);
      const warm = await store.getMany(keys, snapshot);
      const afterWarm = store.approximateMemoryUsage();
      expect(warm.slice(0, rows).every((v, i) => v!.equals(cold[i]!))).to.equal(true);
      // ~4 MB of blocks: cached by the default read (the cache holds 8 MiB), not by the cold one.
      expect(afterCold - before, 'cold read grew the cache').to.be.below(256 * 1024);
      expect(afterWarm - afterCold, 'default read fills the cache').to.be.above(2 * 1024 * 1024);
      await snapshot.close();
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a cursor with fillCache off reads every row and leaves the block cache as it was', async () => {
    const dir = tempDir();
    const store = await Store.open(dir);
    try {
      const rows = 4000;
      const key = (i: number) => scnKey(0x10, 4, i);
      await store.batch(Array.from({ length: rows }, (_, i) => ({ type: 'put' as const, key: key(i + 1), value: Buffer.alloc(1000, i % 251) })), false);
      await store.compactRange(key(0), key(rows + 1));
      const scan = async (fillCache: boolean) => {
        let n = 0;
        for await (const [, v] of store.rows({ gte: key(0), lt: key(rows + 1), fillCache }, 500)) { expect(v[0]).to.equal(n % 251); n++; }
        return n;
      };
      const before = store.approximateMemoryUsage();
      expect(await scan(false)).to.equal(rows);
      const afterCold = store.approximateMemoryUsage();
      expect(await scan(true)).to.equal(rows);
      const afterWarm = store.approximateMemoryUsage();
      expect(afterCold - before, 'cold scan grew the cache').to.be.below(256 * 1024);
      expect(afterWarm - afterCold, 'default scan fills the cache').to.be.above(2 * 1024 * 1024);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
