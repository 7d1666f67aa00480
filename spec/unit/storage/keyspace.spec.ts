/** lib/core/storage/keyspace.ts: 8-byte SCN keys must round-trip and sort numerically. */
import { expect } from 'chai';
import { scnKey, scnBytes, readScn, writeU64 } from '../../../lib/core/storage/keyspace.js';
import { histKey, parseHistKey, sameHistKey, histScn, timeKey } from '../../../lib/ext/sow/tables.js';

const edges = [0, 1, 255, 256, 0xffffffff, 0x100000000, 0x100000001, 2 ** 40 + 12345, Number.MAX_SAFE_INTEGER];

describe('keyspace: 8-byte big-endian numbers', () => {
  it('writeU64 / readScn round-trip at the 32-bit and 53-bit edges, as BigInt would write them', () => {
    for (const n of edges) {
      const b = Buffer.alloc(8);
      writeU64(b, n, 0);
      const ref = Buffer.alloc(8);
      ref.writeBigUInt64BE(BigInt(n));
      expect(b.equals(ref), String(n)).to.equal(true);
      expect(readScn(b, 0)).to.equal(n);
      expect(readScn(scnBytes(n), 0)).to.equal(n);
      expect(readScn(scnKey(0x10, 7, n), 5)).to.equal(n);
    }
  });

  it('keys sort in numeric order (bytewise, as LevelDB compares)', () => {
    const keys = edges.map((n) => scnKey(0x10, 1, n));
    const sorted = [...keys].sort(Buffer.compare);
    expect(sorted.map((k) => readScn(k, 5))).to.deep.equal(edges);
    const times = [5, 2 ** 32 + 1, 1767225600000].map((t) => timeKey(3, t, 1));
    expect([...times].sort(Buffer.compare)).to.deep.equal(times);
  });

  it('history keys: key and SCN parse back; same-key comparison ignores the SCN only', () => {
    const a1 = histKey(9, 'ab', 1), a2 = histKey(9, 'ab', 2 ** 33), b = histKey(9, 'ac', 1), ab = histKey(9, 'a', 1);
    expect(parseHistKey(a2)).to.deep.equal({ key: 'ab', scn: 2 ** 33 });
    expect(histScn(a2)).to.equal(2 ** 33);
    expect(sameHistKey(a1, a2)).to.equal(true);
    expect(sameHistKey(a1, b)).to.equal(false);
    expect(sameHistKey(a1, ab)).to.equal(false);
    expect(parseHistKey(histKey(9, 'ünï', 3))).to.deep.equal({ key: 'ünï', scn: 3 });
  });
});
