/**
 * Consequence of rhea's never-cleared session.remote.handles (see stale-handle.spec.ts): every
 * link a client attaches and detaches on a fresh handle number stays referenced by its
 * session (with its attach: name, terminus, properties) until the session ends. A client
 * cycling handles 0,1,2,... (legal: handle-max is not set by the broker, so 2^32-1) grows the
 * broker's heap without bound with well-formed frames; maxLinksPerSession counts only the
 * attached ones. Control: the same cycle on handle 0 retains nothing.
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import * as F from '../support/amqp-frames.js';
import { RawClient, t } from '../support/amqp-frames.js';

v8.setFlagsFromString('--expose_gc');
const gc = vm.runInNewContext('gc') as () => void;
const heap = () => { gc(); gc(); return process.memoryUsage().heapUsed; };

async function cycle(port: number, n: number, freshHandles: boolean): Promise<RawClient> {
  const c = await RawClient.connect(port);
  await c.handshake();
  const name = 'x'.repeat(30000);
  for (let i = 0; i < n; i += 4) {
    const bufs: Buffer[] = [];
    for (let j = i; j < i + 4; j++) {
      const h = freshHandles ? j : j % 4;
      bufs.push(F.attach({ name: t.str(name + j), handle: t.uint(h), role: t.bool(false), source: F.source(), target: F.target({ address: t.str('proto22.leak') }) }), F.detach(h, true));
    }
    c.write(...bufs);
    const ok = await c.waitFor((x) => x.frames.filter((f) => f.name === 'detach').length >= 4 || x.frames.some((f) => f.name === 'end' || f.name === 'close'), 5000);
    if (!ok || c.frames.some((f) => f.name === 'end' || f.name === 'close')) throw new Error('cycle stopped at ' + i + ': ' + c.frames.map((f) => f.name).slice(-5));
    c.parser.frames.length = 0; // the test client keeps nothing it read
  }
  return c;
}

describe('detached links stay referenced by their session', function () {
  this.timeout(90000);
  const b = useBroker({ limits: { idleTimeoutMs: 60000, maxFrameSize: 65536 } });

  it('800 attach/detach cycles on fresh handles retain (almost) nothing more than on one handle', async () => {
    const base0 = heap();
    const control = await cycle(b.get().port, 800, false);
    await new Promise((r) => setTimeout(r, 200));
    const control1 = heap();
    const fresh = await cycle(b.get().port, 800, true);
    await new Promise((r) => setTimeout(r, 200));
    const fresh1 = heap();
    const mb = (x: number) => Math.round(x / 1e5) / 10;
    const growControl = control1 - base0, growFresh = fresh1 - control1;
    console.log(`      heap growth: same 4 handles ${mb(growControl)} MB, fresh handles ${mb(growFresh)} MB (sessions still open)`);
    control.destroy(); fresh.destroy();
    expect(growFresh, `fresh handles retained ${mb(growFresh)} MB vs ${mb(growControl)} MB`).to.be.below(growControl + 10e6);
  });
});
