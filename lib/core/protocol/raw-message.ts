/**
 * rhea decodes every transfer and drops its bytes (toolchain-notes 5). We store and forward
 * the original bytes, so we wrap rhea's decoder once to keep them beside the decoded view.
 */
import rhea from 'rhea';
import { ownCopy } from '../../codec/own-bytes.js';
import { skipAmqpValue } from '../../codec/message-bytes.js';

const RAW = Symbol.for('tidemark.raw-bytes');
let installed = false;

export function installRawCapture(): void {
  if (installed) return;
  installed = true;
  const message: any = (rhea as any).message;
  const decode = message.decode;
  // Bytes the broker already holds are decoded without the copy (codec/message-bytes.ts decodeMessage).
  message[Symbol.for('tidemark.decode-uncaptured')] = decode;
  message.decode = function (buffer: Buffer) {
    // Copy, then decode the copy: the frame buffer may be a slice of a larger socket read
    // (up to 64 KiB) we must not retain, and the decoded view's binary values (a data body,
    // a uuid message-id) are slices of what was decoded. Queues keep that view beside the
    // bytes; decoded from the copy, it pins nothing more than the message itself. The copy
    // has memory of its own (own-bytes.ts), not a slice of Node's shared buffer pool.
    // A transfer that starts a delivery without a payload: say so, rather than the TypeError
    // copying undefined gave ("malformed frame: Cannot read properties of undefined").
    if (buffer === undefined || buffer === null) throw new Error('transfer with no payload: a message needs at least one section [AMQP 3.2]');
    const copy = ownCopy(buffer);
    let m: any;
    try {
      m = decode.call(this, copy);
    } catch (e) {
      // rhea's own texts for a section it cannot take are TypeErrors about its internals.
      const why = e instanceof TypeError ? nullSection(copy) : undefined;
      throw why ? new Error(why) : e;
    }
    Object.defineProperty(m, RAW, { value: copy, enumerable: false });
    return m;
  };
}

export function rawBytes(message: any): Buffer | undefined {
  return message?.[RAW];
}

const SECTION_TYPES: Record<number, [string, string]> = {
  0x70: ['header', 'list'], 0x71: ['delivery-annotations', 'map'], 0x72: ['message-annotations', 'map'],
  0x73: ['properties', 'list'], 0x74: ['application-properties', 'map'], 0x78: ['footer', 'map'],
};

/**
 * "NAME section is null, expected a map" for the first section (numeric descriptor) whose
 * value is null where AMQP has a map or list [AMQP 3.2], or undefined. rhea throws "Cannot
 * read properties of null (reading 'map')" for those, which said nothing to the peer.
 */
function nullSection(b: Buffer): string | undefined {
  let p = 0;
  while (p + 3 < b.length && b[p] === 0x00 && b[p + 1] === 0x53) {
    const t = SECTION_TYPES[b[p + 2]];
    if (t && b[p + 3] === 0x40) return `${t[0]} section is null, expected a ${t[1]} [AMQP 3.2]`;
    p = skipAmqpValue(b, p + 3);
    if (p < 0) return undefined;
  }
  return undefined;
}
