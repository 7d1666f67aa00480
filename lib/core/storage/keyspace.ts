/**
 * One LevelDB, one flat binary keyspace: [table tag][queue id u32 BE][rest].
 * Queues get a numeric id at creation, so any queue name is safe in keys and a queue's rows
 * are one contiguous range per table (deletion is a range clear). SCNs are 8-byte big-endian
 * so they sort numerically. Extensions register their own tables (sow, hist, time, subs)
 * rather than rewriting this file's layout.
 */
export const CoreTables = {
  /** queue definitions: [tag][name utf8] -> JSON */
  meta: 0x01,
  /** broker-wide counters: [tag][name] -> value */
  counters: 0x02,
  /** per-queue event log / message store: [tag][qid][scn] -> event record */
  log: 0x10,
  /** per-queue head SCN high-water mark: [tag][qid] -> scn (so SCNs are never reused) */
  head: 0x11,
} as const;

const registered = new Map<string, number>(Object.entries(CoreTables));

/** Extensions claim a table tag once at load; a clash is a programming error. */
export function registerTable(name: string, tag: number): number {
  for (const [n, t] of registered) if (t === tag && n !== name) throw new Error(`table tag 0x${tag.toString(16)} of ${name} already used by ${n}`);
  registered.set(name, tag);
  return tag;
}

/**
 * Writes a non-negative integer (≤ 2^53) as 8 bytes big-endian. Two 32-bit writes: a BigInt
 * per key was one of the larger per-message allocations on the publish path.
 */
export function writeU64(b: Buffer, n: number, offset: number): void {
  b.writeUInt32BE(Math.floor(n / 0x100000000), offset);
  b.writeUInt32BE(n >>> 0, offset + 4);
}

export function scnBytes(scn: number): Buffer {
  const b = Buffer.allocUnsafe(8);
  writeU64(b, scn, 0);
  return b;
}
export function readScn(b: Buffer, offset: number): number { return b.readUInt32BE(offset) * 0x100000000 + b.readUInt32BE(offset + 4); }

/** [tag][qid] prefix. */
export function queuePrefix(tag: number, qid: number): Buffer {
  const b = Buffer.allocUnsafe(5);
  b[0] = tag;
  b.writeUInt32BE(qid, 1);
  return b;
}

/** [tag][qid][scn] */
export function scnKey(tag: number, qid: number, scn: number): Buffer {
  const b = Buffer.allocUnsafe(13);
  b[0] = tag;
  b.writeUInt32BE(qid, 1);
  writeU64(b, scn, 5);
  return b;
}

/** [tag][qid][suffix bytes] */
export function queueKey(tag: number, qid: number, suffix: Buffer): Buffer {
  return Buffer.concat([queuePrefix(tag, qid), suffix]);
}

/** Exclusive upper bound of every key starting with `prefix`. */
export function prefixEnd(prefix: Buffer): Buffer {
  const b = Buffer.from(prefix);
  for (let i = b.length - 1; i >= 0; i--) {
    if (b[i] < 0xff) { b[i]++; return b.subarray(0, i + 1); }
  }
  return Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
}

export function metaKey(name: string): Buffer { return Buffer.concat([Buffer.from([CoreTables.meta]), Buffer.from(name, 'utf8')]); }
export function counterKey(name: string): Buffer { return Buffer.concat([Buffer.from([CoreTables.counters]), Buffer.from(name, 'utf8')]); }
