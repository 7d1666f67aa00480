/**
 * [AMQP 2.4.5] "The idle timeout is measured in milliseconds, and starts from the time the
 * last frame is received." rhea's Connection.input stops the idle timer on any bytes and, while
 * a frame is incomplete, does not start it again, so a peer that trickles one byte of a frame
 * that never completes holds its connection (and a maxConnections slot, plus a frame buffer of
 * up to max-frame-size) forever without ever sending a frame. Fixed in server.ts (#harden).
 * Broker: idleTimeoutMs 300 (closes after 600 ms without a frame, docs/decisions.md).
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { RawClient } from '../support/amqp-frames.js';

describe('idle time-out counts frames, not bytes', function () {
  this.timeout(20000);
  const b = useBroker({ limits: { idleTimeoutMs: 300 } });

  it('a peer sending only bytes of an unfinished frame is closed as idle', async () => {
    const c = await RawClient.connect(b.get().port);
    try {
      await c.handshake();
      expect(c.frames.some((f) => f.name === 'begin')).to.equal(true);
      // A frame header announcing 1000 bytes, then one more byte every 250 ms (no frame completes).
      const partial = Buffer.alloc(1000); partial.writeUInt32BE(1000, 0); partial[4] = 2; partial[5] = 0;
      let at = 0;
      const started = Date.now();
      while (Date.now() - started < 3000 && !c.isClosed && !c.frames.some((f) => f.name === 'close')) {
        c.write(partial.subarray(at, at + (at === 0 ? 8 : 1))); at += at === 0 ? 8 : 1;
        await new Promise((r) => setTimeout(r, 250));
      }
      const close = c.frames.find((f) => f.name === 'close');
      expect(close?.error?.condition, `after ${Date.now() - started} ms of partial bytes: ${c.frames.map((f) => f.name)}`).to.equal('amqp:resource-limit-exceeded');
    } finally { c.destroy(); }
  });

  it('control: frames that each arrive over two reads keep the connection', async () => {
    const c = await RawClient.connect(b.get().port);
    try {
      await c.handshake();
      // Empty frames (heartbeats) in two halves 200 ms apart: a frame completes every 400 ms, under the 600 ms limit.
      const heartbeat = Buffer.from('0000000802000000', 'hex');
      const started = Date.now();
      while (Date.now() - started < 2000 && !c.isClosed) {
        c.write(heartbeat.subarray(0, 4)); await new Promise((r) => setTimeout(r, 200));
        c.write(heartbeat.subarray(4)); await new Promise((r) => setTimeout(r, 200));
      }
      expect(c.isClosed || c.frames.some((f) => f.name === 'close'), c.frames.map((f) => f.name).join(',')).to.equal(false);
    } finally { c.destroy(); }
  });

  it('control: a silent peer is closed as idle', async () => {
    const c = await RawClient.connect(b.get().port);
    try {
      await c.handshake();
      await c.waitFor((x) => x.frames.some((f) => f.name === 'close'), 3000);
      expect(c.frames.find((f) => f.name === 'close')?.error?.condition).to.equal('amqp:resource-limit-exceeded');
    } finally { c.destroy(); }
  });
});
