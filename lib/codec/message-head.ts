/**
 * The head of an encoded message: its sections before the body (header, delivery and message
 * annotations, properties, application-properties) [AMQP 3.2]. A filter that reads no body
 * needs only these decoded: decoding the whole message for a selector decoded every body
 * (a 6.5 KB JSON text per message on a deep queue) to read one application property.
 */
import { skipAmqpValue } from './message-bytes.js';

const APPLICATION_PROPERTIES = 0x74;
const SYMBOLIC_CODES = new Map([
  ['amqp:header:list', 0x70],
  ['amqp:delivery-annotations:map', 0x71],
  ['amqp:message-annotations:map', 0x72],
  ['amqp:properties:list', 0x73],
  ['amqp:application-properties:map', APPLICATION_PROPERTIES],
]);

/**
 * Section code of the descriptor at `p` (0x70-0x74 for the head's sections; anything else,
 * the body's or an odd one, is another number or -1) and where the section's value starts;
 * null when the bytes there are not a section descriptor.
 */
export function sectionAt(b: Buffer, p: number): [code: number, valueStart: number] | null {
  if (b[p] !== 0x00 || p + 2 > b.length) return null;
  const dc = b[p + 1];
  if (dc === 0x53) return p + 3 <= b.length ? [b[p + 2]!, p + 3] : null;
  if (dc === 0x80) return p + 10 <= b.length ? [b.readUInt32BE(p + 2) === 0 ? b.readUInt32BE(p + 6) : -1, p + 10] : null;
  if (dc === 0xa3 || dc === 0xb3) {
    const w = dc === 0xa3 ? 1 : 4;
    if (p + 2 + w > b.length) return null;
    const s = p + 2 + w;
    const e = s + (w === 1 ? b[p + 2]! : b.readUInt32BE(p + 2));
    if (e > b.length) return null;
    return [SYMBOLIC_CODES.get(b.toString('ascii', s, e)) ?? -1, e];
  }
  return null;
}

/** Whether a section code belongs to the head (header through application-properties). */
export function isHeadSection(code: number): boolean {
  return code >= 0x70 && code <= APPLICATION_PROPERTIES;
}

/**
 * Length of the head: where the first section that is not a head section starts (the body),
 * or the whole length when there is none; -1 when the walk cannot follow the bytes (the
 * caller decodes them all, and meets whatever error that gives). Steps over the head's values
 * by their sizes: O(sections), whatever the body.
 */
export function headLength(bytes: Buffer): number {
  let p = 0;
  while (p < bytes.length) {
    const at = sectionAt(bytes, p);
    if (at === null) return -1;
    if (!isHeadSection(at[0])) return p;
    const end = skipAmqpValue(bytes, at[1]);
    if (end < 0) return -1;
    p = end;
  }
  return p;
}
