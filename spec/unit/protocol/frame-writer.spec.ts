/** lib/core/protocol/frame-writer.ts: a connection's frames leave once per tick, in order, and nothing is lost at end. */
import { expect } from 'chai';
import { createRequire } from 'node:module';
import { FrameWriter } from '../../../lib/core/protocol/frame-writer.js';
import { encodeTransferFrame, OutgoingTransfer } from '../../../lib/core/protocol/transfer-frame.js';
import { tuneRhea } from '../../../lib/core/protocol/rhea-tuning.js';

const req = createRequire(import.meta.url);
const frames = req('rhea/lib/frames.js');

/** What a net.Socket offers the writer: write, end, and the two state flags. */
class FakeSocket {
  writes: Buffer[] = [];
  ended = false;
  destroyed = false;
  writable = true;
  write(b: Buffer): boolean { if (!this.writable) throw new Error('write after end'); this.writes.push(Buffer.from(b)); return true; }
  end(): this { this.ended = true; this.writable = false; return this; }
  get bytes(): Buffer { return Buffer.concat(this.writes); }
}

const tick = () => new Promise<void>((res) => setImmediate(res));
const frame = (n: number, fill: number) => Buffer.alloc(n, fill);

describe('FrameWriter', () => {
  before(() => tuneRhea());

  it('gathers a tick\'s frames into one socket write, in order', async () => {
    const s = new FakeSocket();
    const w = new FrameWriter(s as any);
    w.append(frame(10, 1));
    w.transfer(3, 1, 7, Buffer.from('7'), 0, true, false, Buffer.from('payload'));
    w.append(frame(200, 2));
    expect(s.writes).to.have.length(0); // nothing before the end of the tick
    await tick();
    expect(s.writes).to.have.length(1);
    const t = encodeTransferFrame(3, new OutgoingTransfer(1, 7, Buffer.from('7'), 0, true, false), Buffer.from('payload'));
    expect(s.bytes.equals(Buffer.concat([frame(10, 1), t, frame(200, 2)]))).to.equal(true);
    w.append(frame(5, 3));
    await tick();
    expect(s.writes).to.have.length(2);
    expect(s.writes[1].equals(frame(5, 3))).to.equal(true);
  });

  it('keeps every byte and the order when a tick writes more than a slab', async () => {
    const s = new FakeSocket();
    const w = new FrameWriter(s as any);
    const parts: Buffer[] = [];
    for (let i = 0; i < 700; i++) { const f = frame(100 + (i % 50), i % 251); parts.push(f); w.append(f); }
    const big = frame(200_000, 9); // larger than a slab on its own
    parts.push(big); w.append(big);
    parts.push(frame(3, 4)); w.append(frame(3, 4));
    await tick();
    expect(s.writes.length).to.be.greaterThan(1);
    expect(s.bytes.equals(Buffer.concat(parts))).to.equal(true);
  });

  it('a transfer of a split message is the same bytes as one of the joined payload, across slab boundaries', async () => {
    const a = new FakeSocket(), b = new FakeSocket();
    const wa = new FrameWriter(a as any), wb = new FrameWriter(b as any);
    for (let i = 0; i < 400; i++) {
      const head = Buffer.alloc(10 + (i % 90), i % 251); // short heads (byte loop) and longer ones (copy)
      const tail = Buffer.alloc(300 + (i % 7) * 100, (i * 7) % 251);
      const tailStart = i % 50;
      const headEnd = head.length - (i % 3); // the parts are ranges of their buffers
      wa.transferSplit(1, 2, i, Buffer.from(String(i)), 0, i % 2 === 0, false, { head, headEnd, tail, tailStart });
      wb.transfer(1, 2, i, Buffer.from(String(i)), 0, i % 2 === 0, false, Buffer.concat([head.subarray(0, headEnd), tail.subarray(tailStart)]));
    }
    await tick();
    expect(a.writes.length).to.be.greaterThan(1);
    expect(a.bytes.equals(b.bytes)).to.equal(true);
  });

  it('a full slab leaves at once, before the end of the tick', () => {
    const s = new FakeSocket();
    const w = new FrameWriter(s as any);
    for (let i = 0; i < 100; i++) w.append(frame(1000, i));
    expect(s.writes.length, 'written during the tick').to.be.greaterThan(0);
    expect(s.bytes.equals(Buffer.concat(Array.from({ length: s.bytes.length / 1000 }, (_, i) => frame(1000, i))))).to.equal(true);
  });

  it('bytes handed to the socket are not overwritten by later frames (the socket may still hold them)', async () => {
    const s = new FakeSocket();
    const held: Buffer[] = [];
    const w = new FrameWriter({ ...s, destroyed: false, writable: true, write: (b: Buffer) => { held.push(b); return true; } } as any);
    w.append(frame(1000, 1));
    await tick();
    for (let i = 0; i < 200; i++) w.append(frame(1000, 2)); // fills the rest of the slab and more
    await tick();
    expect(held[0].equals(frame(1000, 1))).to.equal(true);
  });

  it('reuses its slab once the socket has taken every byte (writableLength 0), and only then', async () => {
    for (const takes of [true, false]) {
      const views: Buffer[] = [];
      const copies: Buffer[] = [];
      const sock = {
        destroyed: false, writable: true,
        write(b: Buffer) { views.push(b); copies.push(Buffer.from(b)); return true; },
        // a socket that took everything at once holds nothing; otherwise it holds what it was given
        get writableLength() { return takes ? 0 : copies.reduce((n, c) => n + c.length, 0); },
      };
      const w = new FrameWriter(sock as any);
      const sent: Buffer[] = [];
      for (let round = 0; round < 5; round++) {
        for (let i = 0; i < 150; i++) { const f = frame(1000, (round * 150 + i) % 251); sent.push(f); w.append(f); } // > 2 slabs per tick
        await tick();
      }
      expect(Buffer.concat(copies).equals(Buffer.concat(sent)), `takes=${takes}: bytes as written`).to.equal(true);
      const slabs = new Set(views.map((v) => v.buffer));
      if (takes) expect(slabs.size, 'one slab, reused').to.equal(1);
      else {
        expect(slabs.size, 'a new slab whenever one fills').to.be.greaterThan(5);
        // nothing the socket holds was overwritten afterwards
        views.forEach((v, i) => expect(v.equals(copies[i]), `write ${i} unchanged`).to.equal(true));
      }
    }
  });

  it('installed on a rhea connection: the header first, then frames; socket.end flushes what waits', async () => {
    const s = new FakeSocket();
    const transport: any = { protocol_id: 0, pending: [], header_sent: undefined };
    const conn: any = { amqp_transport: transport };
    const w = FrameWriter.install(conn, s as any, frames);
    expect(FrameWriter.of(conn)).to.equal(w);
    const close = frames.amqp_frame(0, frames.close({}));
    transport.pending.push(close);
    transport.write(s);
    expect(transport.pending).to.have.length(0);
    expect(transport.header_sent).to.not.equal(undefined);
    (s as any).end(); // rhea ends the socket when its transport has nothing pending
    expect(s.ended).to.equal(true);
    expect(s.bytes.subarray(0, 8).toString('latin1')).to.equal('AMQP\x00\x01\x00\x00');
    expect(s.bytes.subarray(8).equals(frames.write_frame(close))).to.equal(true);
    await tick(); // and nothing is written twice or after the end
    expect(s.writes).to.have.length(1);
  });

  it('installed: a transfer rhea made is encoded in place, the same bytes rhea\'s write_frame gives', async () => {
    const s = new FakeSocket();
    const transport: any = { protocol_id: 0, pending: [], header_sent: { protocol_id: 0 } };
    FrameWriter.install({ amqp_transport: transport }, s as any, frames);
    const t = frames.transfer({ handle: 2, message_format: 0, delivery_id: 300, delivery_tag: Buffer.from('12'), settled: false, more: false });
    expect(t).to.be.instanceOf(OutgoingTransfer);
    const f = frames.amqp_frame(5, t, Buffer.from([0x00, 0x53, 0x77, 0xa1, 0x01, 0x78]));
    transport.pending.push(f);
    transport.write(s);
    await tick();
    expect(s.bytes.equals(frames.write_frame(f))).to.equal(true);
  });

  it('sealed (a failed connection): what was gathered leaves, nothing after it', async () => {
    const s = new FakeSocket();
    const w = new FrameWriter(s as any);
    w.append(frame(4, 1));
    w.seal();
    expect(s.bytes.equals(frame(4, 1))).to.equal(true);
    w.append(frame(4, 2));
    w.transfer(0, 0, 0, Buffer.from('0'), 0, true, false, undefined);
    await tick();
    expect(s.writes).to.have.length(1);
  });

  it('writes nothing to a destroyed socket', async () => {
    const s = new FakeSocket();
    const w = new FrameWriter(s as any);
    w.append(frame(4, 1));
    s.destroyed = true;
    await tick();
    expect(s.writes).to.have.length(0);
  });
});
