/**
 * Outgoing transfer frames encoded by hand [AMQP 2.3.1, 2.7.5].
 *
 * rhea builds every outgoing transfer as a composite (a setter and a typed wrapper per
 * field) and writes it through its generic `types.Writer`: about a sixth of the broker's
 * time when it streams a snapshot (docs/performance.md). The transfers rhea's
 * `Outgoing.process` creates always have the same six fields, so they are written here
 * directly, byte for byte as rhea writes them (a described list32 with a smallulong
 * descriptor, uint0/smalluint/uint as rhea's `wrap_uint` picks, vbin8 tag, booleans).
 * Anything else (other fields, values out of range) is left to rhea. The byte-for-byte
 * equality is checked in spec/unit/protocol/transfer-frame.spec.ts.
 */

/**
 * The transfer fields rhea's Outgoing.process sets, and nothing else. It also answers like
 * rhea's composite to code that inspects or edits outgoing transfers (a session.output hook
 * that adds a transactional state, say): `constructor.descriptor`, `value` and `described()`
 * turn it into rhea's own composite, and a transfer turned into one is written by rhea.
 */
export class OutgoingTransfer {
  static readonly descriptor = { numeric: 0x14, symbolic: 'amqp:transfer:list' };
  /** rhea's original `frames.transfer` (set by tuneRhea). */
  static rheaCreate?: (fields: Record<string, unknown>) => { value: unknown[]; described(): unknown };
  #composite?: { value: unknown[]; described(): unknown };

  constructor(
    readonly handle: number,
    readonly delivery_id: number,
    readonly delivery_tag: Buffer,
    readonly message_format: number,
    readonly settled: boolean,
    readonly more: boolean,
  ) {}

  /** rhea's composite for this transfer, made on first use; from then on it is what is written. */
  composite(): { value: unknown[]; described(): unknown } {
    if (!this.#composite) {
      if (!OutgoingTransfer.rheaCreate) throw new Error('OutgoingTransfer: rhea tuning not installed');
      const { handle, delivery_id, delivery_tag, message_format, settled, more } = this;
      this.#composite = OutgoingTransfer.rheaCreate({ handle, delivery_id, delivery_tag, message_format, settled, more });
    }
    return this.#composite;
  }

  /** The composite, if anything asked for it. */
  get materialized(): { value: unknown[] } | undefined { return this.#composite; }
  get value(): unknown[] { return this.composite().value; }
  described(): unknown { return this.composite().described(); }
}

const FIELDS = ['handle', 'message_format', 'delivery_id', 'delivery_tag', 'settled', 'more'];
const UINT_MAX = 0xffffffff;

function isUint(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= UINT_MAX;
}

/** The transfer as an OutgoingTransfer, or undefined when it is not one we write by hand. */
export function outgoingTransfer(fields: Record<string, unknown> | undefined): OutgoingTransfer | undefined {
  if (!fields) return undefined;
  let n = 0;
  for (const k in fields) { if (!FIELDS.includes(k)) return undefined; n++; }
  if (n !== FIELDS.length) return undefined;
  const { handle, delivery_id, delivery_tag, message_format, settled, more } = fields;
  if (!isUint(handle) || !isUint(delivery_id) || !isUint(message_format)) return undefined;
  if (!Buffer.isBuffer(delivery_tag) || delivery_tag.length > 255) return undefined;
  if (typeof settled !== 'boolean' || typeof more !== 'boolean') return undefined;
  return new OutgoingTransfer(handle, delivery_id, delivery_tag, message_format, settled, more);
}

/** Encoded size of a uint as rhea's wrap_uint writes it: uint0, smalluint or uint. */
function uintSize(v: number): number { return v === 0 ? 1 : v < 256 ? 2 : 5; }

function putUint(b: Buffer, at: number, v: number): number {
  if (v === 0) { b[at] = 0x43; return at + 1; }
  if (v < 256) { b[at] = 0x52; b[at + 1] = v; return at + 2; }
  b[at] = 0x70;
  b.writeUInt32BE(v, at + 1);
  return at + 5;
}

/** Bytes of a transfer frame with these fields (header, performative, payload or a payload of that many bytes). */
export function transferFrameSize(handle: number, deliveryId: number, tag: Buffer, format: number, payload?: Buffer | number): number {
  return 20 + uintSize(handle) + uintSize(deliveryId) + 2 + tag.length + uintSize(format) + 2 + (typeof payload === 'number' ? payload : payload ? payload.length : 0);
}

/**
 * Writes a transfer frame (header, performative, payload) into `b` at `at`, which must have
 * room for transferFrameSize(...) bytes; returns the offset after it.
 */
export function encodeTransferFrameInto(b: Buffer, at: number, channel: number, handle: number, deliveryId: number, tag: Buffer, format: number, settled: boolean, more: boolean, payload?: Buffer): number {
  const start = encodeTransferHeadInto(b, at, channel, handle, deliveryId, tag, format, settled, more, payload ? payload.length : 0);
  if (payload) payload.copy(b, start);
  return start + (payload ? payload.length : 0);
}

/**
 * Writes a transfer frame's header and performative for a payload of `payloadLength` bytes
 * (transferFrameSize with a payload of that length); returns where the payload goes, which
 * the caller fills.
 */
export function encodeTransferHeadInto(b: Buffer, at: number, channel: number, handle: number, deliveryId: number, tag: Buffer, format: number, settled: boolean, more: boolean, payloadLength: number): number {
  const fieldBytes = uintSize(handle) + uintSize(deliveryId) + 2 + tag.length + uintSize(format) + 2;
  // 8 frame header + 3 descriptor + list32 constructor, size and count + fields
  const head = 8 + 3 + 9 + fieldBytes;
  const size = head + payloadLength;
  b.writeUInt32BE(size, at);
  b[at + 4] = 2; // data offset in 4-byte words
  b[at + 5] = 0; // AMQP frame
  b.writeUInt16BE(channel, at + 6);
  b[at + 8] = 0x00; b[at + 9] = 0x53; b[at + 10] = 0x14; // described by smallulong 0x14 (transfer)
  b[at + 11] = 0xd0; // list32
  b.writeUInt32BE(4 + fieldBytes, at + 12);
  b.writeUInt32BE(6, at + 16);
  let p = putUint(b, at + 20, handle);
  p = putUint(b, p, deliveryId);
  b[p] = 0xa0; b[p + 1] = tag.length; // vbin8
  for (let i = 0; i < tag.length; i++) b[p + 2 + i] = tag[i];
  p = putUint(b, p + 2 + tag.length, format);
  b[p] = settled ? 0x41 : 0x42;
  b[p + 1] = more ? 0x41 : 0x42;
  return at + head;
}

/** Frame header, transfer performative and payload in one buffer. */
export function encodeTransferFrame(channel: number, t: OutgoingTransfer, payload?: Buffer): Buffer {
  const b = Buffer.allocUnsafe(transferFrameSize(t.handle, t.delivery_id, t.delivery_tag, t.message_format, payload));
  encodeTransferFrameInto(b, 0, channel, t.handle, t.delivery_id, t.delivery_tag, t.message_format, t.settled, t.more, payload);
  return b;
}

/**
 * An incoming transfer read by hand: the same field values rhea's composite getters give
 * (undefined for a field past the end of the list, null for an encoded null), and the
 * `dispatch` rhea's transport calls. Only transfers without a delivery state are read
 * here; a transactional transfer carries one and goes to rhea (and rhea-patches.ts).
 */
export class IncomingTransfer {
  handle: number | null | undefined = undefined;
  delivery_id: number | null | undefined = undefined;
  delivery_tag: Buffer | null | undefined = undefined;
  message_format: number | null | undefined = undefined;
  settled: boolean | null | undefined = undefined;
  more: boolean | null | undefined = undefined;
  rcv_settle_mode: number | null | undefined = undefined;
  state: null | undefined = undefined;
  resume: boolean | null | undefined = undefined;
  aborted: boolean | null | undefined = undefined;
  batchable: boolean | null | undefined = undefined;
  dispatch(target: { on_transfer(frame: unknown): void }, frame: unknown): void { target.on_transfer(frame); }
}

/** The frame object rhea's read_frame returns. */
export interface ReadFrame { size: number; type: number; channel: number; performative: IncomingTransfer; payload?: Buffer }

const NO = Symbol('not by hand');
type Field = number | boolean | Buffer | null | typeof NO;

/** One field at `at`: [value, next offset]; NO for an encoding left to rhea. */
function readField(b: Buffer, at: number, index: number, end: number): [Field, number] {
  if (at >= end) return [NO, at];
  const code = b[at];
  if (code === 0x40) return [null, at + 1];
  switch (index) {
    case 0: case 1: case 3: // handle, delivery-id, message-format: uint
      if (code === 0x43) return [0, at + 1];
      if (code === 0x52 && at + 2 <= end) return [b[at + 1], at + 2];
      if (code === 0x70 && at + 5 <= end) return [b.readUInt32BE(at + 1), at + 5];
      return [NO, at];
    case 2: { // delivery-tag: binary
      let len: number; let start: number;
      if (code === 0xa0 && at + 2 <= end) { len = b[at + 1]; start = at + 2; }
      else if (code === 0xb0 && at + 5 <= end) { len = b.readUInt32BE(at + 1); start = at + 5; }
      else return [NO, at];
      if (start + len > end) return [NO, at];
      return [b.subarray(start, start + len), start + len];
    }
    case 6: // rcv-settle-mode: ubyte
      return code === 0x50 && at + 2 <= end ? [b[at + 1], at + 2] : [NO, at];
    case 7: // state: only absent or null here
      return [NO, at];
    default: // settled, more, resume, aborted, batchable: boolean
      if (code === 0x41) return [true, at + 1];
      if (code === 0x42) return [false, at + 1];
      return [NO, at];
  }
}

const FIELD_NAMES = ['handle', 'delivery_id', 'delivery_tag', 'message_format', 'settled', 'more', 'rcv_settle_mode', 'state', 'resume', 'aborted', 'batchable'] as const;

/**
 * A transfer frame read by hand, or undefined to let rhea read it (any other frame, any
 * encoding not listed in readField, anything malformed: rhea then reports it as before).
 */
export function readTransferFrame(b: Buffer): ReadFrame | undefined {
  if (b.length < 12) return undefined;
  const size = b.readUInt32BE(0);
  const doff = b[4];
  if (size > b.length || doff < 2 || b[5] !== 0) return undefined;
  let at = doff * 4;
  if (at + 4 > b.length || b[at] !== 0x00 || b[at + 1] !== 0x53 || b[at + 2] !== 0x14) return undefined;
  at += 3;
  let count: number; let listEnd: number;
  if (b[at] === 0xc0 && at + 3 <= b.length) { listEnd = at + 2 + b[at + 1]; count = b[at + 2]; at += 3; }
  else if (b[at] === 0xd0 && at + 9 <= b.length) { listEnd = at + 5 + b.readUInt32BE(at + 1); count = b.readUInt32BE(at + 5); at += 9; }
  else return undefined;
  if (count < 1 || count > FIELD_NAMES.length || listEnd > b.length) return undefined;
  const t = new IncomingTransfer();
  for (let i = 0; i < count; i++) {
    const [v, next] = readField(b, at, i, listEnd);
    if (v === NO) return undefined;
    (t as unknown as Record<string, Field>)[FIELD_NAMES[i]] = v;
    at = next;
  }
  if (at !== listEnd || typeof t.handle !== 'number') return undefined;
  const frame: ReadFrame = { size, type: 0, channel: b.readUInt16BE(6), performative: t };
  if (at < b.length) frame.payload = b.subarray(at);
  return frame;
}
