/**
 * [AMQP 2.5.6] outgoing-window. rhea starts a session's `outgoing.window` at 2^32-1 and
 * subtracts one per transfer frame it writes (Outgoing.process `this.window -= num_to_send`;
 * sink.ts's direct path `out.window--`, before the fix); nothing ever raised it again. So after N transfer
 * frames the broker's flows announce outgoing-window = 2^32-1-N, and after 2^32-1 frames the
 * value goes negative: rhea's encoder then throws (wrap_uint of -1 -> SmallUint RangeError) on
 * every flow of that session, and the connection is closed with amqp:decode-error. This is the
 * state serial-wrap.spec.ts simulates (2^32-3 ids already used), except that it leaves the
 * window at 2^32-1; here the window is what 2^32-3 single-frame transfers really leave: 2.
 * Fixed in rhea-guards.ts (patch 13): the window is a constant, whatever rhea (or the test) writes.
 */
import { expect } from 'chai';
import { createRequire } from 'node:module';
import { startTestBroker, useBroker, type TestBroker } from '../support/broker.js';
import * as F from '../support/amqp-frames.js';
import { RawClient, t } from '../support/amqp-frames.js';
import { connect, openReceiver, openSender, sendAll, collect, sleep, type Conn } from '../support/client.js';

const require = createRequire(import.meta.url);
const Session = require('rhea/lib/session.js');
const START = 2 ** 32 - 3;

async function publish(c: Conn, address: string, bodies: string[]): Promise<void> {
  const s = await openSender(c, { address });
  const out = await sendAll(s, bodies.map((body) => ({ body })));
  expect(out.map((o) => o.state)).to.deep.equal(bodies.map(() => 'accepted'));
}

describe('the broker outgoing-window after 2^32 transfers', function () {
  this.timeout(30000);
  let tb: TestBroker;
  let onBegin: any;
  before(async () => {
    tb = await startTestBroker();
    onBegin = Session.prototype.on_begin;
    Session.prototype.on_begin = function (frame: any) {
      if (this.connection.is_server && this.outgoing.next_transfer_id === 0 && this.outgoing.next_delivery_id === 0) {
        const o = this.outgoing;
        o.next_transfer_id = o.next_delivery_id = o.next_pending_delivery = START;
        this.local.begin.next_outgoing_id = START;
        o.window -= START; // what START transfer frames have taken from it (2^32-1 - START = 2)
        this.local.begin.outgoing_window = o.window;
      }
      return onBegin.call(this, frame);
    };
  });
  after(async () => { Session.prototype.on_begin = onBegin; await tb?.stop(); });

  it('drain after the window is spent: answered, connection stays open', async () => {
    const c = await connect(tb.url);
    try {
      await publish(c, 'proto22-ow', ['a', 'b', 'c', 'd', 'e']);
      const r = await openReceiver(c, { address: 'proto22-ow' });
      const first = await collect(r, { count: 5, idleMs: 3000, credit: 5 });
      expect(first.map((m) => m.message.body)).to.deep.equal(['a', 'b', 'c', 'd', 'e']);
      const drained = new Promise<boolean>((res) => { r.once('receiver_drained', () => res(true)); setTimeout(() => res(false), 3000); });
      r.drain = true;
      r.add_credit(10);
      const ok = await drained;
      await sleep(50);
      expect(c.connection.is_open(), 'connection open; error: ' + JSON.stringify(c.connection.error ?? c.connection.remote?.close?.error)).to.equal(true);
      expect(ok, 'receiver_drained').to.equal(true);
    } finally { await c.close(); }
  });
});

describe('the broker outgoing-window stays what its begin announced', function () {
  this.timeout(20000);
  const b = useBroker({ limits: { idleTimeoutMs: 60000 } });

  it('flows after transfers announce the same outgoing-window as the begin [2.5.6]', async () => {
    const q = 'ow.same.' + Math.random().toString(36).slice(2);
    const conn = await connect(b.get().url);
    try { await publish(conn, q, ['a', 'b', 'c', 'd', 'e']); } finally { await conn.close(); }
    const c = await RawClient.connect(b.get().port);
    try {
      await c.handshake();
      // begin fields: 1 next-outgoing-id, 2 incoming-window, 3 outgoing-window; flow: 3 outgoing-window
      const announced = c.frames.find((f) => f.name === 'begin')?.fields[3];
      expect(announced).to.equal(0xffffffff);
      c.write(F.attach({ name: t.str('r'), handle: t.uint(0), role: t.bool(true), source: F.source({ address: t.str(q) }), target: F.target() }));
      c.write(F.flow({ handle: t.uint(0), linkCredit: t.uint(5), deliveryCount: t.uint(0), nextIncomingId: t.uint(0), incomingWindow: t.uint(2048), nextOutgoingId: t.uint(0), outgoingWindow: t.uint(2048) }));
      expect(await c.waitFor((x) => x.frames.filter((f) => f.name === 'transfer').length >= 5, 3000)).to.equal(true);
      // echo asks for the broker's flow state (rhea-patches.md patch 10)
      c.write(F.flow({ nextIncomingId: t.uint(5), incomingWindow: t.uint(2048), nextOutgoingId: t.uint(0), outgoingWindow: t.uint(2048), echo: t.bool(true) }));
      expect(await c.waitFor((x) => x.frames.some((f) => f.name === 'flow'), 3000)).to.equal(true);
      const windows = c.frames.filter((f) => f.name === 'flow').map((f) => f.fields[3]);
      expect(windows).to.deep.equal(windows.map(() => announced));
    } finally { c.destroy(); }
  });
});
