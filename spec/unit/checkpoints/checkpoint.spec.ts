/**
 * lib/ext/checkpoints/checkpoint.ts: the checkpoint map every message of a checkpoint link
 * carries (wire.md 6). The fast encoders must put on the wire what rhea's own encoding of the
 * same map does, and the window tracker must say what was consumed.
 */
import { expect } from 'chai';
import { amqpTypes, amqpMessage } from '../../../lib/codec/amqp.js';
import { encodeCheckpoint, checkpointMap, snapshotCheckpoint, snapshotCheckpointEncoder, WindowTracker, type Checkpoint } from '../../../lib/ext/checkpoints/checkpoint.js';

const rheaBytes = (v: unknown) => { const w = new amqpTypes.Writer(); w.write(amqpTypes.wrap(v)); return w.toBuffer(); };

describe('checkpoint encoding (x-opt-tm-checkpoint)', () => {
  const samples: Checkpoint[] = [
    { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 12, prevScn: 9, windowOffset: 3, tsNsecs: 1_796_085_998_618_000_000n },
    { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: -1, prevScn: -1, windowOffset: -1 },
    { consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: 5, prevScn: 5, windowOffset: -1, tsNsecs: 2_000_000_000_000_000n, bootstrap_since_scn: 0, bootstrap_start_scn: 5, bootstrap_target_scn: 900, catchup_offset: 77 },
    snapshotCheckpoint(2 ** 33, 'key-ü-1'),
  ];

  it('encodeCheckpoint gives the bytes rhea gives for the same map', () => {
    for (const cp of samples) expect(encodeCheckpoint(cp).bytes.equals(rheaBytes(checkpointMap(cp))), JSON.stringify(cp, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))).to.equal(true);
  });

  it('the snapshot encoder (constant fields encoded once) matches the full encoding, for any start and key', () => {
    for (const S of [0, 1, 300, 2 ** 40]) {
      const enc = snapshotCheckpointEncoder(S);
      for (const key of ['a', 'k0000001', 'x'.repeat(400), 'ключ']) {
        expect(enc(key).bytes.equals(encodeCheckpoint(snapshotCheckpoint(S, key)).bytes), `${S} ${key.slice(0, 10)}`).to.equal(true);
      }
    }
  });

  it('decodes to the checkpoint fields, numbers as numbers', () => {
    const msg = amqpMessage.decode(amqpMessage.encode({ message_annotations: { 'x-opt-tm-checkpoint': checkpointMap(samples[2]) }, body: null }));
    // rhea hands a long within 2^53 over as a number
    expect(msg.message_annotations['x-opt-tm-checkpoint']).to.deep.equal({ ...samples[2], tsNsecs: 2e15 });
  });

  it('tsNsecs goes on the wire exactly, past 2^53 (not through a double)', () => {
    const msg = amqpMessage.decode(amqpMessage.encode({ message_annotations: { 'x-opt-tm-checkpoint': checkpointMap(samples[0]) }, body: null }));
    const v = msg.message_annotations['x-opt-tm-checkpoint'].tsNsecs;
    expect(Buffer.isBuffer(v) ? v.readBigInt64BE(0) : v).to.equal(1_796_085_998_618_000_000n);
    // long constructor 0x81, then the value's 8 bytes
    expect(encodeCheckpoint(samples[0]).bytes.includes(Buffer.from('8118ecfab31dadba80', 'hex'))).to.equal(true);
    const t = new WindowTracker({ prevScn: 0 });
    t.pass(1, undefined, 1_796_085_998_618);
    expect(t.online().tsNsecs).to.equal(1_796_085_998_618_000_000n);
  });
});

describe('WindowTracker', () => {
  it('a window of three: mid-window offsets, then the whole window consumed', () => {
    const t = new WindowTracker({ prevScn: 10 });
    t.pass(11, 13, 1); expect(t.online()).to.include({ windowScn: 13, prevScn: 10, windowOffset: 1 });
    t.pass(12, 13, 1); expect(t.online()).to.include({ windowScn: 13, prevScn: 10, windowOffset: 2 });
    t.pass(13, 13, 2); expect(t.online()).to.include({ windowScn: 13, prevScn: 13, windowOffset: -1, tsNsecs: 2_000_000n });
    t.pass(14, undefined, 3); expect(t.online()).to.include({ windowScn: 14, prevScn: 14, windowOffset: -1 });
  });
});
