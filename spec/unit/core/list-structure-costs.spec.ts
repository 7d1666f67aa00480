/**
 * Complexity, not speed: a publish to a limited queue must not walk the expired messages
 * consumers hold, and undeliverable-here settlements must not walk a consumer's whole
 * excluded set each (both were quadratic after a session 22 fix; the ratios have ample slack).
 */
import { expect } from 'chai';
import { Queue } from '../../../lib/core/queue/queue.js';
import { ListStructure } from '../../../lib/core/queue/list-structure.js';
import { encodeMessage } from '../../../lib/codec/message-bytes.js';

function makeQueue(now: () => number, durable = false) {
  const ctx: any = { clock: { now }, committer: { addQuiet() {}, add(_o: unknown, cb: () => void) { cb(); } } };
  const q = new Queue({ name: 'p', id: 1, durable, arguments: {}, created: 0 } as any, ctx);
  q.structure = new ListStructure(q);
  return q;
}
const BYTES = encodeMessage({ body: 'x' });
function msg(receivedAt: number, ttl?: number): any { return { bytes: BYTES, message: { body: 'x' }, receivedAt, attrs: {}, expiresAt: ttl ? receivedAt + ttl : undefined }; }

class Sink {
  id = 's'; presettled = false; closed = false; credits = 1e9;
  outcomes: Array<(o: any) => void> = [];
  credit() { return this.closed ? 0 : this.credits; }
  send(_b: Buffer, on?: (o: any) => void) { this.credits--; if (on) this.outcomes.push(on); }
  drained() {}
  close() { this.closed = true; }
}

describe('ListStructure costs that must not grow with what consumers hold (session 22 review)', function () {
  this.timeout(60000);

  it('publish cost does not grow with expired messages held acquired by a consumer (queue with a limit)', function () {
    let t = 1000;
    const time = (held: number) => {
      const q = makeQueue(() => t);
      const s = q.structure as ListStructure;
      s.admission.push({ admit() { /* a limit that never refuses */ } });
      const sink = new Sink();
      s.openConsumer({ mode: 'move', predicates: [] } as any, sink as any);
      // `held` messages with a 10 ms TTL, acquired by the consumer (never settled)
      for (let i = 0; i < held; i++) { const p = s.prepare(msg(t, 10), i + 1, undefined); q.headScn = i + 1; p.committed(); }
      t += 100; // they expire while held
      s.sweep(t); // the 1 s sweep moves them into #expiredHeld
      sink.credits = 0;
      const N = 3000;
      const start = performance.now();
      for (let i = 0; i < N; i++) { const scn = q.headScn + 1; const p = s.prepare(msg(t), scn, undefined); q.headScn = scn; p.committed(); }
      return performance.now() - start;
    };
    time(1000); // warm up
    const base = time(100);
    const loaded = time(50000);
    expect(loaded).to.be.lessThan(base * 5 + 50);
  });

  it('undeliverable-here settlements stay linear in their number (a consumer refusing many messages)', function () {
    const run = (n: number) => {
      const q = makeQueue(() => 1000);
      const s = q.structure as ListStructure;
      const sink = new Sink();
      s.openConsumer({ mode: 'move', predicates: [] } as any, sink as any);
      for (let i = 0; i < n; i++) { const p = s.prepare(msg(1000), i + 1, undefined); q.headScn = i + 1; p.committed(); }
      const outs = sink.outcomes.splice(0);
      sink.credits = 0; // nothing more delivered: measure the settlements only
      const start = performance.now();
      for (const on of outs) on({ type: 'modified', deliveryFailed: false, undeliverableHere: true });
      return performance.now() - start;
    };
    run(2000);
    const small = run(5000);
    const big = run(40000);
    expect(big).to.be.lessThan(small * 8 * 4 + 50);
  });
});
