/**
 * rhea decodes every transfer and drops its bytes (toolchain-notes 5). We store and forward
 * the original bytes, so we wrap rhea's decoder once to keep them beside the decoded view.
 */
import rhea from 'rhea';

const RAW = Symbol.for('tidemark.raw-bytes');
let installed = false;

export function installRawCapture(): void {
  if (installed) return;
  installed = true;
  const message: any = (rhea as any).message;
  const decode = message.decode;
  message.decode = function (buffer: Buffer) {
    const m = decode.call(this, buffer);
    // Copy: the frame buffer may be a slice of a larger socket read we must not retain.
    Object.defineProperty(m, RAW, { value: Buffer.from(buffer), enumerable: false });
    return m;
  };
}

export function rawBytes(message: any): Buffer | undefined {
  return message?.[RAW];
}
