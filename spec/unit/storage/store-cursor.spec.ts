/** lib/core/storage/store.ts cursors: a step returns the rows asked for, whatever their size. */
import { expect } from 'chai';
import { rmSync } from 'node:fs';
import { Store } from '../../../lib/core/storage/store.js';
import { scnKey, queuePrefix, prefixEnd } from '../../../lib/core/storage/keyspace.js';
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

  it('textKeyCursor gives each key past the queue prefix as text, for prefixes that are ASCII and ones that are not', async () => {
    const dir = tempDir();
    const store = await Store.open(dir);
    try {
      const keys = ['a', 'key-1', 'é', 'ß-ü', '日本', '😀', 'z'.repeat(300)];
      // qid 7: ASCII prefix (the binding makes the strings); 0xC3A9: its bytes decode to one
      // character, 'é' (the Buffer way); 0x7F: prefixEnd ends in 0x80, not valid UTF-8 alone.
      for (const qid of [7, 0xc3a9, 0x7f]) {
        const prefix = queuePrefix(0x20, qid);
        const ops = keys.map((k) => ({ type: 'put' as const, key: Buffer.concat([prefix, Buffer.from(k, 'utf8')]), value: Buffer.from(`v:${k}`) }));
        ops.push({ type: 'put', key: Buffer.concat([queuePrefix(0x20, qid + 1), Buffer.from('next-queue')]), value: Buffer.from('x') });
        await store.batch(ops, false);
        const c = store.textKeyCursor({ gte: prefix, lt: prefixEnd(prefix) }, prefix.length);
        const got: string[] = [];
        for (let step = await c.next(3); step.length > 0; step = await c.next(3)) {
          for (const [k, v] of step) { expect(v.toString(), `qid ${qid}`).to.equal(`v:${k}`); got.push(k); }
        }
        await c.close();
        expect(got, `qid ${qid}`).to.deep.equal([...keys].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y))));
        // resuming after a key, as a bootstrap does
        const after = store.textKeyCursor({ gt: Buffer.concat([prefix, Buffer.from('ß-ü')]), lt: prefixEnd(prefix) }, prefix.length);
        const rest = (await after.next(100)).map(([k]) => k);
        await after.close();
        expect(rest, `qid ${qid}`).to.deep.equal(got.slice(got.indexOf('ß-ü') + 1));
      }
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
