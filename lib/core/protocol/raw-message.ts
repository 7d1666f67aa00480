/**
 * rhea decodes every transfer and drops its bytes (toolchain-notes 5). We store and forward
 * the original bytes, so we wrap rhea's decoder once to keep them beside the decoded view.
 */
import rhea from 'rhea';
import { ownCopy } from '../../codec/own-bytes.js';

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
    const copy = ownCopy(buffer);
    const m = decode.call(this, copy);
    Object.defineProperty(m, RAW, { value: copy, enumerable: false });
    return m;
  };
}

export function rawBytes(message: any): Buffer | undefined {
  return message?.[RAW];
}
