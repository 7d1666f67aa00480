/** lib/core/storage/store.ts cursors: a step returns the rows asked for, whatever their size. */
import { expect } from 'chai';
import { rmSync } from 'node:fs';
import { Store } from '../../../lib/core/storage/store.js';
import { scnKey } from '../../../lib/core/storage/keyspace.js';
import { tempDir } from '../../support/broker.js';

describe('Store cursor', () => {
  it('returns full steps of 300-byte rows (LevelDB\'s 16 KiB default would cut each step to ~50) and every row once, at a snapshot', async () => {
    const dir = tempDir();
    const store = await Store.open(dir);
    try {
      const rows = 2000;
      await store.batch(Array.from({ length: rows }, (_, i) => ({ type: 'put' as const, key: scnKey(0x10, 7, i + 1), value: Buffer.alloc(300, i % 251) })), false);
      const snapshot = store.snapshot();
      // written after the snapshot: not seen
      await store.batch([{ type: 'put', key: scnKey(0x10, 7, rows + 1), value: Buffer.alloc(300) }], false);
      const c = store.cursor({ gte: scnKey(0x10, 7, 0), lt: scnKey(0x10, 8, 0), snapshot });
      const steps: number[] = [];
      let seen = 0;
      for (let step = await c.next(512); step.length > 0; step = await c.next(512)) {
        steps.push(step.length);
        for (const [, v] of step) { expect(v[0]).to.equal(seen % 251); seen++; }
        expect(steps.length).to.be.below(10);
      }
      await c.close();
      await snapshot.close();
      expect(seen).to.equal(rows);
      expect(steps).to.deep.equal([512, 512, 512, 464]);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
