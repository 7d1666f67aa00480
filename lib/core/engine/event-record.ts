/**
 * A log (and SOW/history) row value: event metadata followed by the original message bytes.
 *
 * Version 2 (written now), binary so the publish path does no JSON work per row:
 *   [u8 2][u8 flags][f64 BE ts][f64 BE w]? [f64 BE exp]? [u32 BE key length][key utf8]? [f64 BE kept]? [message bytes]
 *   flags: bits 0-1 op (0 absent, 1 publish, 2 delta, 3 delete), bit 2 key, bit 3 exp,
 *   bit 4 w, bit 5 expired, bit 6 kept. Optional fields appear in that order when their bit is set.
 *   (`kept` is written on SOW history rows only, from session 23; a row without it reads as before.)
 * Version 1 (still read): [u8 1][u32 BE meta length][meta JSON utf8][message bytes].
 */
export interface EventMeta {
  /** Broker receive time, ms since epoch. */
  ts: number;
  /** Publish operation (`publish`, `delta`, `delete`); absent = publish. */
  op?: string;
  /** SOW key, when the queue has one. */
  key?: string;
  /** Absolute expiry time, ms; absent = never. */
  exp?: number;
  /** Last SCN of the window (transaction) this event belongs to; absent = a window of one. */
  w?: number;
  /** A delete that is a TTL expiry (SOW). */
  expired?: boolean;
  /**
   * SOW history with granularity, on `hist` rows: when the key's last history copy was kept
   * (the time of the event that superseded it), as of this version (sow-structure.ts).
   */
  kept?: number;
}

const OPS = [undefined, 'publish', 'delta', 'delete'] as const;
const F_KEY = 4, F_EXP = 8, F_W = 16, F_EXPIRED = 32, F_KEPT = 64;

function opCode(op: string | undefined): number {
  switch (op) {
    case undefined: return 0;
    case 'publish': return 1;
    case 'delta': return 2;
    case 'delete': return 3;
    default: throw new Error(`event record: unknown op ${JSON.stringify(op)}`);
  }
}

export function encodeEvent(meta: EventMeta, message: Buffer): Buffer {
  let flags = opCode(meta.op);
  let size = 10;
  if (meta.w !== undefined) { flags |= F_W; size += 8; }
  if (meta.exp !== undefined) { flags |= F_EXP; size += 8; }
  let keyLen = 0;
  if (meta.key !== undefined) { flags |= F_KEY; keyLen = Buffer.byteLength(meta.key, 'utf8'); size += 4 + keyLen; }
  if (meta.expired) flags |= F_EXPIRED;
  if (meta.kept !== undefined) { flags |= F_KEPT; size += 8; }
  const out = Buffer.allocUnsafe(size + message.length);
  out[0] = 2;
  out[1] = flags;
  out.writeDoubleBE(meta.ts, 2);
  let pos = 10;
  if (meta.w !== undefined) { out.writeDoubleBE(meta.w, pos); pos += 8; }
  if (meta.exp !== undefined) { out.writeDoubleBE(meta.exp, pos); pos += 8; }
  if (meta.key !== undefined) { out.writeUInt32BE(keyLen, pos); out.write(meta.key, pos + 4, 'utf8'); pos += 4 + keyLen; }
  if (meta.kept !== undefined) { out.writeDoubleBE(meta.kept, pos); pos += 8; }
  message.copy(out, pos);
  return out;
}

export function decodeEvent(value: Buffer): { meta: EventMeta; message: Buffer } {
  if (value[0] === 2) {
    const flags = value[1];
    const meta: EventMeta = { ts: value.readDoubleBE(2) };
    const op = OPS[flags & 3];
    if (op !== undefined) meta.op = op;
    let pos = 10;
    if (flags & F_W) { meta.w = value.readDoubleBE(pos); pos += 8; }
    if (flags & F_EXP) { meta.exp = value.readDoubleBE(pos); pos += 8; }
    if (flags & F_KEY) { const n = value.readUInt32BE(pos); meta.key = value.toString('utf8', pos + 4, pos + 4 + n); pos += 4 + n; }
    if (flags & F_EXPIRED) meta.expired = true;
    if (flags & F_KEPT) { meta.kept = value.readDoubleBE(pos); pos += 8; }
    return { meta, message: value.subarray(pos) };
  }
  if (value[0] !== 1) throw new Error(`unknown event record version ${value[0]}`);
  const len = value.readUInt32BE(1);
  const meta = JSON.parse(value.toString('utf8', 5, 5 + len)) as EventMeta;
  return { meta, message: value.subarray(5 + len) };
}

/** The event's timestamp, read in place (scans over many rows). */
export function eventTs(value: Buffer): number {
  return value[0] === 2 ? value.readDoubleBE(2) : decodeEvent(value).meta.ts;
}

/** True for a `delete` event (a history tombstone), read in place. */
export function eventIsDelete(value: Buffer): boolean {
  return value[0] === 2 ? (value[1] & 3) === 3 : decodeEvent(value).meta.op === 'delete';
}

/** The message bytes of an event record, a view into it (the metadata skipped, not decoded). */
export function eventMessage(value: Buffer): Buffer {
  if (value[0] !== 2) return decodeEvent(value).message;
  const flags = value[1];
  let pos = 10;
  if (flags & F_W) pos += 8;
  if (flags & F_EXP) pos += 8;
  if (flags & F_KEY) pos += 4 + value.readUInt32BE(pos);
  if (flags & F_KEPT) pos += 8;
  return value.subarray(pos);
}

/** The `kept` time of a history row (EventMeta.kept), read in place; undefined when it has none. */
export function eventKept(value: Buffer): number | undefined {
  if (value[0] !== 2) return decodeEvent(value).meta.kept;
  const flags = value[1];
  if (!(flags & F_KEPT)) return undefined;
  let pos = 10;
  if (flags & F_W) pos += 8;
  if (flags & F_EXP) pos += 8;
  if (flags & F_KEY) pos += 4 + value.readUInt32BE(pos);
  return value.readDoubleBE(pos);
}
