/**
 * Stored messages are the original AMQP bytes (architecture invariant 4). On the way out
 * only the header (delivery-count, remaining ttl) and the message annotations (our x-opt-tm-*
 * keys) are rewritten; every other section is copied byte for byte, so every AMQP type a
 * client sent round-trips exactly. Delivery annotations are per hop [AMQP 3.2.2] and dropped.
 */
import { amqpTypes, amqpMessage } from './amqp.js';

const HEADER = 0x70, DELIVERY_ANN = 0x71, MESSAGE_ANN = 0x72;

/** Where the sections of an encoded message start and end. */
export interface SectionIndex {
  /** [start, end) of the header section, or undefined. */
  header?: [number, number];
  /** [start, end) of the message-annotations section, or undefined. */
  annotations?: [number, number];
  /** Start of the first section after the annotations (properties onward). */
  restStart: number;
}

export class MessageFormatError extends Error {}

function sectionCode(desc: any): number {
  const v = desc?.value;
  if (typeof v === 'number') return v;
  if (typeof v === 'string') {
    switch (v) {
      case 'amqp:header:list': return 0x70;
      case 'amqp:delivery-annotations:map': return 0x71;
      case 'amqp:message-annotations:map': return 0x72;
      default: return 0x73; // anything else belongs to the rest
    }
  }
  return Number(v);
}

/** Walks the top-level sections once. Throws MessageFormatError on malformed input. */
export function indexSections(bytes: Buffer): SectionIndex {
  const r = new amqpTypes.Reader(bytes);
  const idx: SectionIndex = { restStart: bytes.length };
  try {
    while (r.remaining() > 0) {
      const start = r.position;
      const s = r.read();
      if (!s || !s.descriptor) throw new MessageFormatError('message section is not a described type');
      const code = sectionCode(s.descriptor);
      if (code === HEADER) idx.header = [start, r.position];
      else if (code === MESSAGE_ANN) idx.annotations = [start, r.position];
      else if (code === DELIVERY_ANN) { /* dropped on the way out */ }
      else { idx.restStart = start; break; }
    }
  } catch (e) {
    if (e instanceof MessageFormatError) throw e;
    throw new MessageFormatError('malformed message: ' + (e as Error).message);
  }
  return idx;
}

/** Header fields we may rewrite. Absent = AMQP default. */
export interface HeaderFields {
  durable?: boolean;
  priority?: number;
  ttl?: number;
  first_acquirer?: boolean;
  delivery_count?: number;
}

export function readHeader(bytes: Buffer, idx: SectionIndex): HeaderFields {
  if (!idx.header) return {};
  const m = amqpMessage.decode(bytes.subarray(idx.header[0], idx.header[1]));
  return { durable: m.durable, priority: m.priority, ttl: m.ttl, first_acquirer: m.first_acquirer, delivery_count: m.delivery_count };
}

function encodeHeader(h: HeaderFields): Buffer {
  const w = new amqpTypes.Writer();
  w.write(amqpMessage.header(h).described());
  return w.toBuffer();
}

/**
 * Message annotation pairs of the original, raw, without keys starting with `x-opt-tm-`
 * (ours are replaced, never duplicated: a map must not repeat a key [AMQP 1.6.23]).
 */
function keptAnnotationPairs(bytes: Buffer, idx: SectionIndex): { raw: Buffer[]; count: number } {
  if (!idx.annotations) return { raw: [], count: 0 };
  const r = new amqpTypes.Reader(bytes.subarray(idx.annotations[0], idx.annotations[1]));
  r.read_constructor(); // descriptor + map typecode
  // read_constructor consumed the map typecode; rewind one byte to read it ourselves.
  r.position -= 1;
  const code = r.read_typecode();
  if (code === 0x40) return { raw: [], count: 0 }; // null map
  const width = code === 0xc1 ? 1 : 4;
  r.read_uint(width); // size
  const n = r.read_uint(width);
  const raw: Buffer[] = [];
  let count = 0;
  for (let i = 0; i < n; i += 2) {
    const ks = r.position;
    const key = r.read();
    r.read();
    const k = String(key?.value ?? key);
    if (k.startsWith('x-opt-tm-')) continue;
    raw.push(r.buffer.subarray(ks, r.position));
    count += 2;
  }
  return { raw, count };
}

/** Encodes our annotations as typed map pairs (keys are symbols). */
function encodePairs(ann: Record<string, unknown>): { buf: Buffer; count: number } {
  const w = new amqpTypes.Writer();
  let count = 0;
  for (const [k, v] of Object.entries(ann)) {
    if (v === undefined) continue;
    w.write(amqpTypes.wrap_symbol(k));
    w.write(amqpTypes.wrap(v));
    count += 2;
  }
  return { buf: w.toBuffer(), count };
}

const ANN_PREFIX = Buffer.from([0x00, 0x53, MESSAGE_ANN]);

/**
 * The bytes to send: new header (when `header` given), the original annotations minus ours
 * plus `annotations`, then the original properties/application-properties/body/footer.
 */
export function rewriteMessage(bytes: Buffer, idx: SectionIndex, header: HeaderFields | null, annotations: Record<string, unknown> | null): Buffer {
  if (!header && !annotations && !idx.annotations && idx.restStart === 0) return bytes;
  const parts: Buffer[] = [];
  if (header) parts.push(encodeHeader(header));
  else if (idx.header) parts.push(bytes.subarray(idx.header[0], idx.header[1]));
  if (annotations && Object.keys(annotations).length > 0) {
    const kept = keptAnnotationPairs(bytes, idx);
    const ours = encodePairs(annotations);
    const body = Buffer.concat([...kept.raw, ours.buf]);
    const head = Buffer.alloc(9);
    head[0] = 0xd1;
    head.writeUInt32BE(body.length + 4, 1);
    head.writeUInt32BE(kept.count + ours.count, 5);
    parts.push(ANN_PREFIX, head, body);
  } else if (idx.annotations) {
    parts.push(bytes.subarray(idx.annotations[0], idx.annotations[1]));
  }
  parts.push(bytes.subarray(idx.restStart));
  return Buffer.concat(parts);
}

/** Encodes a fresh message (markers, management replies). */
export function encodeMessage(msg: Record<string, unknown>): Buffer {
  return amqpMessage.encode(msg);
}

/** Decodes bytes with rhea's decoder (properties, application properties, body). */
export function decodeMessage(bytes: Buffer): any {
  return amqpMessage.decode(bytes);
}
