/**
 * A log row value: small JSON metadata followed by the original message bytes.
 * [u8 version=1][u32 BE meta length][meta JSON utf8][message bytes]
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
}

export function encodeEvent(meta: EventMeta, message: Buffer): Buffer {
  const m = Buffer.from(JSON.stringify(meta), 'utf8');
  const out = Buffer.allocUnsafe(5 + m.length + message.length);
  out[0] = 1;
  out.writeUInt32BE(m.length, 1);
  m.copy(out, 5);
  message.copy(out, 5 + m.length);
  return out;
}

export function decodeEvent(value: Buffer): { meta: EventMeta; message: Buffer } {
  if (value[0] !== 1) throw new Error(`unknown event record version ${value[0]}`);
  const len = value.readUInt32BE(1);
  const meta = JSON.parse(value.toString('utf8', 5, 5 + len)) as EventMeta;
  return { meta, message: value.subarray(5 + len) };
}
