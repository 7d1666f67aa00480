/**
 * AMQP 1.0 2.6.2/2.7.3: a handle is bound to a link until the link is detached (both detach
 * frames exchanged). After the BROKER detached a link and the client answered with its own
 * detach, the client's endpoint is detached: it may reuse the handle at once. A client that
 * pipelines detach(h0) + attach(h0, new link) + flow(h0) (one socket write) must get a working
 * new link. rhea's Session.remove_link (run two ticks after on_detach) deletes
 * remote.handles[old.remote.handle] unconditionally, wiping the NEW link's mapping.
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openSender, sendAll } from '../support/client.js';
import * as F from '../support/amqp-frames.js';
import { RawClient, t } from '../support/amqp-frames.js';

const names = (c: RawClient) => c.frames.map((f) => f.name + (f.error ? `{${f.error.condition}}` : ''));

describe('handle reuse after a broker-initiated detach', function () {
  this.timeout(20000);
  const b = useBroker({ limits: { idleTimeoutMs: 60000 } });

  it('a pipelined detach + attach on the same handle gives a working link', async () => {
    const q = 'proto22.reuse.' + Math.random().toString(36).slice(2);
    const c = await RawClient.connect(b.get().port);
    try {
      await c.handshake();
      // A receiver attach with no source address: the broker refuses it (null source, detach invalid-field).
      c.write(F.attach({ name: t.str('bad'), handle: t.uint(0), role: t.bool(true), source: F.source(), target: F.target() }));
      expect(await c.waitFor((x) => x.frames.some((f) => f.name === 'detach'), 3000), names(c).join(',')).to.equal(true);
      // Answer the detach and reuse handle 0 for a good link, in one write.
      c.write(
        F.detach(0, true),
        F.attach({ name: t.str('good'), handle: t.uint(0), role: t.bool(true), source: F.source({ address: t.str(q) }), target: F.target() }),
        F.flow({ handle: t.uint(0), linkCredit: t.uint(10), deliveryCount: t.uint(0), nextIncomingId: t.uint(0), incomingWindow: t.uint(2048), nextOutgoingId: t.uint(0), outgoingWindow: t.uint(2048) }),
      );
      expect(await c.waitFor((x) => x.frames.filter((f) => f.name === 'attach').length >= 2, 3000), names(c).join(',')).to.equal(true);
      const conn = await connect(b.get().url);
      try {
        const s = await openSender(conn, { address: q });
        const [o] = await sendAll(s, [{ body: 'hello' }]);
        expect(o.state).to.equal('accepted');
      } finally { await conn.close(); }
      await c.waitFor((x) => x.frames.some((f) => f.name === 'transfer' || f.name === 'end'), 3000);
      expect(names(c), 'session must not end').to.not.include.members(['end{amqp:session:unattached-handle}']);
      expect(names(c), 'the new link gets the message').to.include('transfer');
      // The new link is attached on handle 0: a flow and then a detach on it are the client's right.
      c.write(F.flow({ handle: t.uint(0), linkCredit: t.uint(20), deliveryCount: t.uint(1), nextIncomingId: t.uint(1), incomingWindow: t.uint(2048), nextOutgoingId: t.uint(0), outgoingWindow: t.uint(2048) }));
      await new Promise((r) => setTimeout(r, 300));
      c.write(F.detach(0, true));
      await c.waitFor((x) => x.frames.filter((f) => f.name === 'detach').length >= 2 || x.frames.some((f) => f.name === 'end'), 3000);
      expect(names(c).filter((n) => n.startsWith('end')), 'session must not end: ' + names(c).join(',')).to.deep.equal([]);
      expect(names(c).filter((n) => n.startsWith('detach')).length, 'detach of the new link answered: ' + names(c).join(',')).to.equal(2);
    } finally { c.destroy(); }
  });
});
