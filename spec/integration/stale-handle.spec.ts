/**
 * After a link's detach exchange its handle is no longer attached [AMQP 2.6.2, 2.7.4, 2.7.7].
 * rhea's Link.on_attach records `this.remote.handle = frame.handle` (frame.handle is always
 * undefined: the handle is frame.performative.handle), so Session.remove_link never deletes
 * session.remote.handles[h]: the detached link stays bound to the handle.
 *  - flow on that handle: [AMQP 2.7.4] "If set to a handle that is not currently attached, an
 *    unattached-handle session-error MUST be signaled" (wire.md 8 says the same). It is ignored.
 *  - detach on that handle: the broker answers a well-formed frame by closing the whole
 *    connection with amqp:decode-error "malformed frame: Detach already received", where a
 *    never-attached handle ends only the session with amqp:session:unattached-handle.
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import * as F from '../support/amqp-frames.js';
import { RawClient, t } from '../support/amqp-frames.js';

const names = (c: RawClient) => c.frames.map((f) => f.name + (f.error ? `{${f.error.condition}: ${f.error.description}}` : ''));
const flow0 = () => F.flow({ handle: t.uint(0), linkCredit: t.uint(5), deliveryCount: t.uint(0), nextIncomingId: t.uint(0), incomingWindow: t.uint(2048), nextOutgoingId: t.uint(0), outgoingWindow: t.uint(2048) });

async function attachedThenDetached(port: number): Promise<RawClient> {
  const c = await RawClient.connect(port);
  await c.handshake();
  const q = 'proto22.stale.' + Math.random().toString(36).slice(2);
  c.write(F.attach({ name: t.str('r1'), handle: t.uint(0), role: t.bool(true), source: F.source({ address: t.str(q) }), target: F.target() }));
  expect(await c.waitFor((x) => x.frames.some((f) => f.name === 'attach'), 3000)).to.equal(true);
  c.write(F.detach(0, true));
  expect(await c.waitFor((x) => x.frames.some((f) => f.name === 'detach'), 3000), names(c).join(',')).to.equal(true);
  await new Promise((r) => setTimeout(r, 100));
  return c;
}

describe('frames on a handle whose link has been detached', function () {
  this.timeout(20000);
  const b = useBroker({ limits: { idleTimeoutMs: 60000 } });

  it('flow on a detached handle ends the session with amqp:session:unattached-handle [2.7.4]', async () => {
    const c = await attachedThenDetached(b.get().port);
    try {
      c.write(flow0());
      await c.waitFor((x) => x.frames.some((f) => f.name === 'end' || f.name === 'close'), 1500);
      const end = c.frames.find((f) => f.name === 'end');
      expect(end?.error?.condition, names(c).join(' | ')).to.equal('amqp:session:unattached-handle');
    } finally { c.destroy(); }
  });

  it('detach on a detached handle ends the session (unattached-handle), not the connection with decode-error', async () => {
    const c = await attachedThenDetached(b.get().port);
    try {
      c.write(F.detach(0, true));
      await c.waitFor((x) => x.frames.some((f) => f.name === 'end' || f.name === 'close'), 1500);
      expect(c.frames.find((f) => f.name === 'close'), names(c).join(' | ')).to.equal(undefined);
      expect(c.frames.find((f) => f.name === 'end')?.error?.condition, names(c).join(' | ')).to.equal('amqp:session:unattached-handle');
    } finally { c.destroy(); }
  });

  it('a flow or a second detach in the same write as the detach is on an unattached handle too', async () => {
    // rhea frees the handle two ticks after the detach: what follows it in one read must not reach the dead link.
    for (const [what, second] of [['flow', flow0()], ['detach', F.detach(0, true)]] as const) {
      const c = await RawClient.connect(b.get().port);
      try {
        await c.handshake();
        c.write(F.attach({ name: t.str('r1'), handle: t.uint(0), role: t.bool(true), source: F.source({ address: t.str('proto22.stale.same-read') }), target: F.target() }));
        expect(await c.waitFor((x) => x.frames.some((f) => f.name === 'attach'), 3000)).to.equal(true);
        c.write(F.detach(0, true), second);
        await c.waitFor((x) => x.frames.some((f) => f.name === 'end' || f.name === 'close'), 1500);
        expect(c.frames.find((f) => f.name === 'close'), `${what}: ` + names(c).join(' | ')).to.equal(undefined);
        expect(c.frames.find((f) => f.name === 'end')?.error?.condition, `${what}: ` + names(c).join(' | ')).to.equal('amqp:session:unattached-handle');
      } finally { c.destroy(); }
    }
  });

  it('control: a never-attached handle gets end unattached-handle', async () => {
    const c = await RawClient.connect(b.get().port);
    try {
      await c.handshake();
      c.write(F.flow({ handle: t.uint(7), linkCredit: t.uint(5), deliveryCount: t.uint(0), nextIncomingId: t.uint(0), incomingWindow: t.uint(2048), nextOutgoingId: t.uint(0), outgoingWindow: t.uint(2048) }));
      await c.waitFor((x) => x.frames.some((f) => f.name === 'end' || f.name === 'close'), 1500);
      expect(c.frames.find((f) => f.name === 'end')?.error?.condition, names(c).join(' | ')).to.equal('amqp:session:unattached-handle');
    } finally { c.destroy(); }
  });
});
