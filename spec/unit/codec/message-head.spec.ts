/**
 * lib/codec/message-head.ts: where a message's body starts, so that a filter reading no body
 * decodes only the sections before it; and MessageEnv.ofBytes, which decodes as far as the
 * filter reads (session 24 review: a selector decoded, and kept, every queued body).
 */
import { expect } from 'chai';
import { amqpMessage } from '../../../lib/codec/amqp.js';
import { headLength } from '../../../lib/codec/message-head.js';
import { MessageEnv, UnreadableMessage } from '../../../lib/core/queue/filter-env.js';

const encode = (m: Record<string, unknown>): Buffer => amqpMessage.encode(m);

describe('message head (sections before the body)', function () {
  it('ends where the body starts, whatever the head holds', function () {
    const cases: Array<Record<string, unknown>> = [
      {},
      { durable: true, priority: 7 },
      { message_annotations: { 'x-opt-a': 1 } },
      { subject: 's', message_id: 'id-1' },
      { application_properties: { color: 'red', n: 3 } },
      { ttl: 1000, message_annotations: { a: 'b' }, subject: 's', application_properties: { c: 'd' } },
    ];
    for (const head of cases) {
      // rhea writes a body section always (amqp-value null when there is none: 4 bytes at the end)
      const headBytes = encode(head).subarray(0, -4);
      const withBody = encode({ ...head, body: 'x'.repeat(5000) });
      expect(withBody.subarray(0, headBytes.length).equals(headBytes)).to.equal(true);
      const n = headLength(withBody);
      expect(n, JSON.stringify(head)).to.equal(headBytes.length);
      expect(amqpMessage.decode(withBody.subarray(0, n)).body, JSON.stringify(head)).to.equal(undefined);
      // No body: the whole message is its head.
      expect(headLength(headBytes)).to.equal(headBytes.length);
    }
  });

  it('names the body however its section is described, and gives up (-1) on bytes it cannot follow', function () {
    const ap = encode({ application_properties: { a: 1 } }).subarray(0, -4); // (without rhea's null body)
    // amqp-value by its symbolic descriptor
    const sym = Buffer.from('amqp:amqp-value:*', 'ascii');
    const symbolic = Buffer.concat([ap, Buffer.from([0x00, 0xa3, sym.length]), sym, Buffer.from([0x41])]);
    expect(headLength(Buffer.concat([ap, Buffer.from([0x00, 0x53, 0x77, 0x41])]))).to.equal(ap.length);
    expect(headLength(symbolic)).to.equal(ap.length);
    // an application-properties map running past the end; a section that is not described
    expect(headLength(Buffer.from([0x00, 0x53, 0x74, 0xc1, 0xff, 0x04]))).to.equal(-1);
    expect(headLength(Buffer.from([0x41, 0x00]))).to.equal(-1);
  });
});

describe('MessageEnv.ofBytes', function () {
  const bytes = encode({ subject: 'orders', priority: 6, application_properties: { color: 'red' }, body: JSON.stringify({ qty: 5 }), content_type: 'application/json' });

  it('reads properties, header fields and the body as the decoded message does', function () {
    const whole = new MessageEnv(amqpMessage.decode(bytes));
    const lazy = MessageEnv.ofBytes(bytes);
    for (const name of ['color', 'subject', 'JMSPriority', 'missing']) expect(lazy.property(name), name).to.deep.equal(whole.property(name));
    expect(lazy.subject()).to.equal('orders');
    expect(lazy.bodyPath(['qty'])).to.equal(5);
    expect(lazy.property('color'), 'after the body was read').to.equal('red');
  });

  it('reads the head of a message whose body it cannot decode, and says so only when the body is read', function () {
    const head = encode({ application_properties: { color: 'red' } }).subarray(0, -4);
    const broken = Buffer.concat([head, Buffer.from([0x00, 0x53, 0x77, 0xa1, 0x10, 0x41])]); // a string said to be 16 bytes, 1 there
    const env = MessageEnv.ofBytes(broken);
    expect(env.property('color')).to.equal('red');
    expect(() => env.bodyPath(['x'])).to.throw(UnreadableMessage);
    expect(() => MessageEnv.ofBytes(Buffer.from([0x00, 0x53, 0x74, 0xc1, 0xff, 0x04])).property('a')).to.throw(UnreadableMessage);
  });
});
