/** lib/core/protocol/transfer-frame.ts: hand-encoded transfers are the bytes rhea writes. */
import { expect } from 'chai';
import { createRequire } from 'node:module';
import { tuneRhea } from '../../../lib/core/protocol/rhea-tuning.js';
import { OutgoingTransfer, outgoingTransfer, encodeTransferFrame, IncomingTransfer, readTransferFrame } from '../../../lib/core/protocol/transfer-frame.js';
import { prng } from '../../../tools/crash/common.js'; // seeded mulberry32: a failure names a reproducible case

const req = createRequire(import.meta.url);
const frames = req('rhea/lib/frames.js');

/** A fresh copy of rhea's frames module: its transfer, write_frame and read_frame are rhea's own, untouched by tuning. */
function rheaFrames(): any {
  const path = req.resolve('rhea/lib/frames.js');
  const cached = req.cache[path];
  delete req.cache[path];
  try { return req('rhea/lib/frames.js'); } finally { req.cache[path] = cached; }
}
const rhea = rheaFrames();

/** The frame rhea's generic writer produces for these fields. */
function rheaBytes(channel: number, fields: Record<string, unknown>, payload?: Buffer): Buffer {
  return rhea.write_frame(rhea.amqp_frame(channel, rhea.transfer(fields), payload));
}


describe('hand-encoded transfer frames', () => {
  before(() => tuneRhea());

  it('rhea\'s frames.transfer yields an OutgoingTransfer for the six fields Outgoing.process sets', () => {
    const t = frames.transfer({ handle: 1, message_format: 0, delivery_id: 7, delivery_tag: Buffer.from([1]), settled: true, more: false });
    expect(t).to.be.instanceOf(OutgoingTransfer);
    expect(t.delivery_id).to.equal(7);
  });

  it('anything else is left to rhea', () => {
    const base = { handle: 1, message_format: 0, delivery_id: 7, delivery_tag: Buffer.from([1]), settled: true, more: false };
    const cases: Array<Record<string, unknown>> = [
      { handle: 0 },
      { ...base, rcv_settle_mode: 1 },
      { ...base, handle: 2 ** 32 },
      { ...base, delivery_id: -1 },
      { ...base, delivery_tag: Buffer.alloc(256) },
      { ...base, delivery_tag: 'x' },
      { ...base, settled: undefined },
      { ...base, more: 1 },
    ];
    for (const c of cases) {
      expect(outgoingTransfer(c), JSON.stringify(c)).to.equal(undefined);
      expect(frames.transfer(c)).to.not.be.instanceOf(OutgoingTransfer);
    }
  });

  it('writes the same bytes as rhea over edge values and 3,000 random transfers', () => {
    const uints = [0, 1, 255, 256, 65535, 65536, 2 ** 31, 2 ** 32 - 1];
    const cases: Array<[number, Record<string, unknown>, Buffer | undefined]> = [];
    for (const u of uints) {
      for (const tagLen of [0, 1, 4, 255]) {
        cases.push([0, { handle: u, delivery_id: u, delivery_tag: Buffer.alloc(tagLen, 7), message_format: u, settled: true, more: false }, Buffer.from('p')]);
      }
    }
    const rnd = prng(20261130);
    const pick = () => (rnd() < 0.3 ? uints[Math.floor(rnd() * uints.length)] : Math.floor(rnd() * 70000));
    for (let i = 0; i < 3000; i++) {
      const tag = Buffer.alloc(Math.floor(rnd() * 9));
      for (let j = 0; j < tag.length; j++) tag[j] = Math.floor(rnd() * 256);
      const size = rnd() < 0.1 ? 0 : rnd() < 0.2 ? 2000 + Math.floor(rnd() * 5000) : Math.floor(rnd() * 600);
      const payload = rnd() < 0.05 ? undefined : Buffer.alloc(size, i & 0xff);
      cases.push([Math.floor(rnd() * 65536), { handle: pick(), delivery_id: pick(), delivery_tag: tag, message_format: pick(), settled: rnd() < 0.5, more: rnd() < 0.5 }, payload]);
    }
    for (const [i, [channel, fields, payload]] of cases.entries()) {
      const t = frames.transfer(fields);
      expect(t, `case ${i}`).to.be.instanceOf(OutgoingTransfer);
      const ours = frames.write_frame(frames.amqp_frame(channel, t, payload)) as Buffer;
      const theirs = rheaBytes(channel, fields, payload);
      expect(ours.equals(theirs), `case ${i}: ${JSON.stringify({ channel, ...fields, payload: payload?.length })}`).to.equal(true);
    }
  });

  it('rhea reads a hand-encoded frame back to the same fields and payload', () => {
    const payload = Buffer.from('hello');
    const bytes = encodeTransferFrame(9, new OutgoingTransfer(3, 300, Buffer.from([0, 1]), 0, false, true), payload);
    const f = rhea.read_frame(bytes);
    expect(f.performative).to.not.be.instanceOf(IncomingTransfer);
    expect(f.channel).to.equal(9);
    expect([f.performative.handle, f.performative.delivery_id, f.performative.message_format, f.performative.settled, f.performative.more]).to.deep.equal([3, 300, 0, false, true]);
    expect(Buffer.from(f.performative.delivery_tag).equals(Buffer.from([0, 1]))).to.equal(true);
    expect(f.payload.equals(payload)).to.equal(true);
  });

  it('code that edits the transfer as rhea\'s composite (value[7] = a state) gets it written', () => {
    const T = req('rhea/lib/types.js');
    const t = frames.transfer({ handle: 1, message_format: 0, delivery_id: 7, delivery_tag: Buffer.from([1]), settled: false, more: false });
    expect(t.constructor.descriptor.numeric).to.equal(0x14);
    for (let i = 0; i < 7; i++) if (t.value[i] === undefined) t.value[i] = T.Null();
    t.value[7] = T.described(T.wrap_ulong(0x24), T.wrap_list([])); // accepted
    const bytes = frames.write_frame(frames.amqp_frame(0, t, Buffer.from('m')));
    const back = rhea.read_frame(bytes);
    expect(back.performative.delivery_id).to.equal(7);
    expect(back.performative.state).to.not.equal(null);
    expect(back.performative.state).to.not.equal(undefined);
    expect(back.payload.equals(Buffer.from('m'))).to.equal(true);
    // untouched transfers stay hand-encoded
    expect(frames.transfer({ handle: 1, message_format: 0, delivery_id: 8, delivery_tag: Buffer.from([1]), settled: false, more: false }).materialized).to.equal(undefined);
  });

  describe('incoming', () => {
    const rheaReadFrame = () => rhea.read_frame as (b: Buffer) => any;
    const NAMES = ['handle', 'delivery_id', 'delivery_tag', 'message_format', 'settled', 'more', 'rcv_settle_mode', 'state', 'resume', 'aborted', 'batchable'];

    /** Encodes field i in one of the encodings AMQP allows for its type. */
    function encodeField(i: number, rnd: () => number): Buffer {
      if (i > 0 && rnd() < 0.15) return Buffer.from([0x40]);
      const u = () => { const r = rnd(); const v = r < 0.2 ? 0 : r < 0.6 ? Math.floor(rnd() * 256) : Math.floor(rnd() * 2 ** 32); return v === 0 && rnd() < 0.5 ? Buffer.from([0x43]) : v < 256 && rnd() < 0.7 ? Buffer.from([0x52, v]) : Buffer.concat([Buffer.from([0x70]), Buffer.from([v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255])]); };
      switch (i) {
        case 0: case 1: case 3: return u();
        case 2: { const n = Math.floor(rnd() * (rnd() < 0.1 ? 300 : 9)); const tag = Buffer.alloc(n, 0x5a); if (n < 256 && rnd() < 0.8) return Buffer.concat([Buffer.from([0xa0, n]), tag]); const h = Buffer.alloc(5); h[0] = 0xb0; h.writeUInt32BE(n, 1); return Buffer.concat([h, tag]); }
        case 6: return Buffer.from([0x50, Math.floor(rnd() * 2)]);
        case 7: return Buffer.from([0x40]);
        default: return Buffer.from([rnd() < 0.5 ? 0x41 : 0x42]);
      }
    }

    function frame(channel: number, doff: number, fields: Buffer[], list32: boolean, payload?: Buffer): Buffer {
      const body = Buffer.concat(fields);
      let list: Buffer;
      if (list32) { list = Buffer.alloc(9); list[0] = 0xd0; list.writeUInt32BE(body.length + 4, 1); list.writeUInt32BE(fields.length, 5); }
      else list = Buffer.from([0xc0, body.length + 1, fields.length]);
      const head = Buffer.alloc(doff * 4);
      head[4] = doff; head[5] = 0; head.writeUInt16BE(channel, 6);
      const out = Buffer.concat([head, Buffer.from([0x00, 0x53, 0x14]), list, body, payload ?? Buffer.alloc(0)]);
      out.writeUInt32BE(out.length, 0);
      return out;
    }

    function same(ours: any, theirs: any, label: string): void {
      expect(ours.performative, label).to.be.instanceOf(IncomingTransfer);
      for (const n of NAMES) {
        const a = ours.performative[n]; const b = theirs.performative[n];
        if (Buffer.isBuffer(b)) expect(Buffer.isBuffer(a) && a.equals(b), `${label} ${n}`).to.equal(true);
        else expect(a, `${label} ${n}`).to.equal(b);
      }
      expect([ours.size, ours.type, ours.channel], label).to.deep.equal([theirs.size, theirs.type, theirs.channel]);
      if (theirs.payload === undefined) expect(ours.payload, label).to.equal(undefined);
      else expect(Buffer.isBuffer(ours.payload) && ours.payload.equals(theirs.payload), `${label} payload`).to.equal(true);
    }

    it('reads 3,000 random transfers (list8/list32, nulls, short lists, extended headers) as rhea does', () => {
      const theirs = rheaReadFrame();
      const rnd = prng(1130);
      for (let i = 0; i < 3000; i++) {
        const count = 1 + Math.floor(rnd() * 11);
        const fields = Array.from({ length: count }, (_, j) => encodeField(j, rnd));
        const bodyLen = fields.reduce((n, f) => n + f.length, 0);
        const list32 = bodyLen > 250 || rnd() < 0.5;
        const payload = rnd() < 0.1 ? undefined : Buffer.alloc(Math.floor(rnd() * 3000), i & 255);
        const b = frame(Math.floor(rnd() * 65536), rnd() < 0.9 ? 2 : 3, fields, list32, payload);
        const ours = readTransferFrame(b);
        expect(ours, `case ${i}`).to.not.equal(undefined);
        same(ours, theirs(b), `case ${i}`);
        // and rhea's (tuned) read_frame now gives the hand-read frame
        expect(frames.read_frame(b).performative).to.be.instanceOf(IncomingTransfer);
      }
    });

    it('frames written by rhea and by the hand encoder read back the same', () => {
      const theirs = rheaReadFrame();
      const b1 = rheaBytes(5, { handle: 2, delivery_id: 99, delivery_tag: Buffer.from('tag'), message_format: 0, settled: false, more: true, rcv_settle_mode: 1, resume: false, aborted: false, batchable: true }, Buffer.from('payload'));
      same(readTransferFrame(b1), theirs(b1), 'rhea-written');
      const b2 = rheaBytes(1, { handle: 0 });
      same(readTransferFrame(b2), theirs(b2), 'handle only');
      const b3 = encodeTransferFrame(0, new OutgoingTransfer(1, 2, Buffer.from([3]), 0, true, false), Buffer.from('x'));
      same(readTransferFrame(b3), theirs(b3), 'hand-written');
    });

    it('leaves delivery states, other encodings and malformed frames to rhea', () => {
      const accepted = Buffer.from([0x00, 0x53, 0x24, 0x45]); // described accepted, list0
      const u = (v: number) => Buffer.from([0x52, v]);
      const tag = Buffer.from([0xa0, 1, 7]);
      const cases: Array<[string, Buffer]> = [
        ['state set', frame(0, 2, [u(1), u(2), tag, u(0), Buffer.from([0x42]), Buffer.from([0x42]), Buffer.from([0x40]), accepted], false)],
        ['boolean as 0x56', frame(0, 2, [u(1), u(2), tag, u(0), Buffer.from([0x56, 1])], false)],
        ['handle as smallulong', frame(0, 2, [Buffer.from([0x53, 1]), u(2)], false)],
        ['handle null', frame(0, 2, [Buffer.from([0x40]), u(2)], false)],
        ['12 fields', frame(0, 2, Array.from({ length: 12 }, () => Buffer.from([0x40])).map((f, i) => (i === 0 ? u(1) : f)), false)],
        ['not a transfer', Buffer.concat([frame(0, 2, [u(1)], false).subarray(0, 10), Buffer.from([0x13]), frame(0, 2, [u(1)], false).subarray(11)])],
        ['list size too short', (() => { const b = frame(0, 2, [u(1), u(2)], false); b[12] = 2; return b; })()],
        ['list size longer than its fields', (() => { const b = frame(0, 2, [u(1), u(2)], false, Buffer.from('pp')); b[12] += 2; return b; })()],
        ['truncated tag', (() => { const b = frame(0, 2, [u(1), u(2), Buffer.from([0xa0, 9, 1])], false); return b; })()],
        ['SASL frame type', (() => { const b = frame(0, 2, [u(1)], false); b[5] = 1; return b; })()],
      ];
      for (const [label, b] of cases) expect(readTransferFrame(b), label).to.equal(undefined);
      // a transactional transfer still reaches rhea with its state
      const viaRhea = frames.read_frame(cases[0][1]);
      expect(viaRhea.performative).to.not.be.instanceOf(IncomingTransfer);
      expect(viaRhea.performative.state).to.not.equal(null);
    });
  });
});
