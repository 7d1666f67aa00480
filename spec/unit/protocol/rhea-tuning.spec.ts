/** lib/core/protocol/rhea-tuning.ts: performance tuning of rhea must not change what it does. */
import { expect } from 'chai';
import { createRequire } from 'node:module';
import rhea from 'rhea';
import { tuneRhea } from '../../../lib/core/protocol/rhea-tuning.js';

const req = createRequire(import.meta.url);

describe('rhea tuning', () => {
  before(() => tuneRhea());

  it('disabled debug channels become no-ops (nothing evaluated per call)', () => {
    const log = req('rhea/lib/log.js') as Record<string, ((...a: unknown[]) => void) & { enabled?: boolean }>;
    expect(log.frames.enabled).to.equal(false);
    expect(log.frames.length).to.equal(0);
    expect(log.frames('[%s] %j', 'x', { big: 'object' })).to.equal(undefined);
  });

  it('a Writer starts in a pooled buffer and encodes exactly what a zero-filled one does', () => {
    const T = (rhea as any).types;
    const msg = { durable: true, message_annotations: { 'x-opt-tm-cmd': 'sow' }, application_properties: { n: 7, s: 'é' }, body: (rhea as any).message.data_section(Buffer.from('{"id":"k1"}')) };
    // rhea's own Writer (zero-filled start buffer) is still the prototype's constructor.
    const Original = T.Writer.prototype.constructor;
    expect(Original).to.not.equal(T.Writer);
    const Tuned = T.Writer;
    T.Writer = Original;
    let reference: Buffer;
    try { reference = (rhea as any).message.encode(msg); } finally { T.Writer = Tuned; }
    // Dirty the buffer pool so that any byte the Writer skips without writing would show.
    for (let i = 0; i < 8; i++) Buffer.allocUnsafe(1024).fill(0xff);
    const pooled = (rhea as any).message.encode(msg) as Buffer;
    expect(Buffer.compare(pooled, reference)).to.equal(0);
    expect(new T.Writer().buffer.length).to.equal(1024);
    const decoded = (rhea as any).message.decode(pooled);
    expect(decoded.application_properties).to.deep.equal({ n: 7, s: 'é' });
    expect(decoded.message_annotations['x-opt-tm-cmd']).to.equal('sow');
    // Frames: a transfer frame written by rhea decodes back to the same fields.
    const frames = req('rhea/lib/frames.js');
    const f = frames.amqp_frame(3, frames.transfer({ handle: 1, delivery_id: 42, delivery_tag: Buffer.from('t'), message_format: 0 }).described(), pooled);
    const bytes = frames.write_frame(f) as Buffer;
    expect(bytes.readUInt32BE(0)).to.equal(bytes.length);
    const back = frames.read_frame(bytes);
    expect(back.channel).to.equal(3);
    expect(back.performative.delivery_id).to.equal(42);
    expect(Buffer.compare(back.payload, pooled)).to.equal(0);
  });
});
