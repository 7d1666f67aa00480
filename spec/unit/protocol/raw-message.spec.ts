/** lib/core/protocol/raw-message.ts: the original bytes beside rhea's decoded view, pinning nothing else. */
import { expect } from 'chai';
import rhea from 'rhea';
import { installRawCapture, rawBytes } from '../../../lib/core/protocol/raw-message.js';
import { decodeMessage } from '../../../lib/codec/message-bytes.js';

describe('raw message capture', () => {
  before(() => installRawCapture());

  it('keeps a copy of the exact bytes, and the decoded view is unchanged', () => {
    const m = { message_id: 'm-1', application_properties: { k: 'v' }, body: (rhea as any).message.data_section(Buffer.from('payload')) };
    const bytes: Buffer = (rhea as any).message.encode(m);
    const decoded = (rhea as any).message.decode(bytes);
    const raw = rawBytes(decoded)!;
    expect(raw.equals(bytes)).to.equal(true);
    expect(raw.buffer).to.not.equal(bytes.buffer); // a copy, not a view of the input
    // …in memory of its own: a slice of Node's 8 KiB pool would keep the whole slab alive
    expect(raw.byteOffset).to.equal(0);
    expect(raw.buffer.byteLength).to.equal(bytes.length);
    expect(decoded.message_id).to.equal('m-1');
    expect(decoded.body.content.toString()).to.equal('payload');
  });

  it('binary values of the decoded view point into that copy, not into the (larger) buffer the frame came in', () => {
    // A frame payload is a slice of a socket read of up to 64 KiB; queues keep the decoded view.
    const bytes: Buffer = (rhea as any).message.encode({ message_id: Buffer.alloc(16, 7), body: (rhea as any).message.data_section(Buffer.from('a data body')) });
    const socketRead = Buffer.alloc(64 * 1024);
    bytes.copy(socketRead, 1000);
    const payload = socketRead.subarray(1000, 1000 + bytes.length);
    const decoded = (rhea as any).message.decode(payload);
    const raw = rawBytes(decoded)!;
    expect(decoded.body.content.toString()).to.equal('a data body');
    expect(decoded.body.content.buffer).to.not.equal(socketRead.buffer);
    expect(decoded.body.content.buffer).to.equal(raw.buffer);
    expect(decoded.message_id.buffer).to.equal(raw.buffer);
  });

  it('bytes the broker already holds are decoded without another copy (codec decodeMessage)', () => {
    const stored: Buffer = (rhea as any).message.encode({ body: (rhea as any).message.data_section(Buffer.from('stored body')) });
    const view = decodeMessage(stored);
    expect(view.body.content.toString()).to.equal('stored body');
    expect(view.body.content.buffer).to.equal(stored.buffer); // a view of the stored bytes
    expect(rawBytes(view)).to.equal(stored); // the stored bytes themselves, not a copy (filters re-read 64-bit properties from them)
  });
});
