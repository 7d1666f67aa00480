/**
 * The broker's own delivery-ids, transfer-ids and delivery-counts are serial numbers: after
 * 2^32 deliveries on one session they wrap [AMQP 2.5.6, 2.6.7; RFC 1982]. The test starts
 * the broker's sessions 3 short of 2^32 (as if that many had been sent) and checks that
 * consumers carry on through the wrap: small and multi-frame messages, credit, drain.
 * Before the fix the 4th delivery was the last: the id did not fit its uint and the window
 * computed from the client's wrapped next-incoming-id went negative.
 */
import { expect } from 'chai';
import { createRequire } from 'node:module';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, openSender, sendAll, collect, sleep, type Conn } from '../support/client.js';
import { protonAvailable, runProton } from '../support/proton.js';

const require = createRequire(import.meta.url);
const Session = require('rhea/lib/session.js');
const START = 2 ** 32 - 3;

describe('delivery ids past 2^32 on the broker side', function () {
  this.timeout(30000);
  let tb: TestBroker;
  let onBegin: any;
  before(async () => {
    tb = await startTestBroker(); // (installs the broker's rhea guards first: this hook must run before them)
    onBegin = Session.prototype.on_begin;
    // Only the broker's sessions (the client's begin is written before it sees the broker's).
    Session.prototype.on_begin = function (frame: any) {
      if (this.connection.is_server && this.outgoing.next_transfer_id === 0 && this.outgoing.next_delivery_id === 0) {
        const o = this.outgoing;
        o.next_transfer_id = o.next_delivery_id = o.next_pending_delivery = START;
        this.local.begin.next_outgoing_id = START;
      }
      return onBegin.call(this, frame);
    };
  });
  after(async () => { Session.prototype.on_begin = onBegin; await tb?.stop(); });

  async function publish(c: Conn, address: string, bodies: string[]): Promise<void> {
    const s = await openSender(c, { address, capabilities: ['create-on-demand', 'queue'] });
    const out = await sendAll(s, bodies.map((body) => ({ body })));
    expect(out.map((o) => o.state)).to.deep.equal(bodies.map(() => 'accepted'));
  }

  it('a consumer receives every message through the wrap, small and multi-frame, under small credit', async () => {
    const c = await connect(tb.url, { max_frame_size: 512 });
    try {
      const big = 'x'.repeat(2000); // 4-5 frames of 512 bytes: sent through rhea's own queue
      const bodies = ['m0', 'm1', 'm2', 'm3', big + '4', 'm5', big + '6', 'm7', 'm8', 'm9'];
      await publish(c, 'wrap-q', bodies);
      const r = await openReceiver(c, { address: 'wrap-q' });
      const got = await collect(r, { count: bodies.length, idleMs: 3000, credit: 3 });
      expect(got.map((m) => m.message.body)).to.deep.equal(bodies);
      expect(c.connection.is_open(), 'connection still open').to.equal(true);
      // the ids the client saw wrapped: 2^32-3 .. 2^32-1, then 0 ..
      expect(got.map((m) => m.delivery.id >>> 0).slice(2, 5)).to.deep.equal([2 ** 32 - 1, 0, 1]);
    } finally { await c.close(); }
  });

  it('drain after the wrap answers with the wrapped delivery-count, and the link carries on', async () => {
    const c = await connect(tb.url);
    try {
      await publish(c, 'wrap-drain', ['a', 'b', 'c', 'd', 'e']);
      const r = await openReceiver(c, { address: 'wrap-drain' });
      const first = await collect(r, { count: 5, idleMs: 3000, credit: 5 });
      expect(first.map((m) => m.message.body)).to.deep.equal(['a', 'b', 'c', 'd', 'e']);
      // Nothing left: a drain of 10 credits must come back with credit 0.
      const drained = new Promise<boolean>((res) => { r.once('receiver_drained', () => res(true)); setTimeout(() => res(false), 3000); });
      r.drain = true;
      r.add_credit(10);
      expect(await drained, 'receiver_drained').to.equal(true);
      expect(r.credit).to.equal(0);
      r.drain = false;
      await publish(c, 'wrap-drain', ['f', 'g']);
      const more = await collect(r, { count: 2, idleMs: 3000, credit: 2 });
      expect(more.map((m) => m.message.body)).to.deep.equal(['f', 'g']);
      await sleep(10);
      expect(c.connection.is_open()).to.equal(true);
    } finally { await c.close(); }
  });

  it('Python Proton (an independent AMQP stack) reads the wrapped ids: 12 messages across the wrap', async () => {
    if (!protonAvailable()) throw new Error('python3-qpid-proton is missing: apt-get install -y python3-qpid-proton');
    const c = await connect(tb.url);
    const bodies = Array.from({ length: 12 }, (_, i) => 'p' + i);
    try { await publish(c, 'wrap-proton', bodies); } finally { await c.close(); }
    const r = await runProton('simple_recv.py', ['-a', `${tb.url}/wrap-proton`, '-m', '12']);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stdout.trim().split('\n')).to.deep.equal(bodies);
  });
});
