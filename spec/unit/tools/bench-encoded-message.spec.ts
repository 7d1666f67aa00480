/**
 * The bench's pre-encoded publish messages (tools/bench/lib/workloads.ts encodedMessage) are
 * the bytes rhea's own message.encode writes for the same message, so sending them changes
 * the client's CPU and nothing on the wire.
 */
import { expect } from 'chai';
import { createRequire } from 'node:module';
import { body, encodedMessage } from '../../../tools/bench/lib/workloads.js';

const rhea = createRequire(import.meta.url)('rhea');

function rheaBytes(i: number, keyIndex: number, size: number): Buffer {
  return rhea.message.encode({ durable: true, content_type: 'application/json', body: rhea.message.data_section(body(i, keyIndex, size)) });
}

describe('bench: pre-encoded publish messages', () => {
  // sizes around the 255-byte vbin8/vbin32 boundary, below the JSON head, and past the pad
  for (const size of [0, 10, 40, 200, 252, 253, 254, 255, 256, 1000, 70000]) {
    it(`size ${size}: the same bytes as rhea's message.encode`, () => {
      for (const [i, k] of [[0, 0], [7, 999], [123456789, 1234567]]) {
        expect(encodedMessage(i, k, size).toString('hex'), `seq ${i} key ${k}`).to.equal(rheaBytes(i, k, size).toString('hex'));
      }
    });
  }

  it('decodes to the message the bench means: durable, JSON content type, the body', () => {
    const m = rhea.message.decode(encodedMessage(42, 3, 200));
    expect(m.durable).to.equal(true);
    expect(m.content_type).to.equal('application/json');
    expect(JSON.parse(Buffer.from(m.body.content).toString())).to.include({ id: 'k0000003', seq: 42 });
  });
});
