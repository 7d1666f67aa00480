/**
 * Message TTL on list queues (standard, browse-only): the expiry sweep goes by an expiry heap,
 * not a pass over the queue (lib/core/queue/list-structure.ts).
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openReceiver, collect, send, receive } from '../support/client.js';
import { ManualClock } from '../../lib/index.js';
import type { ListStructure } from '../../lib/core/queue/list-structure.js';

const T0 = Date.UTC(2026, 5, 1, 9, 0, 0);

describe('list queue expiry (semantics: message TTL)', function () {
  this.timeout(60000);
  // One broker for the file: each case uses queues of its own and starts the clock at T0.
  const clock = new ManualClock(T0);
  const b = useBroker({}, { clock });
  let tb: ReturnType<typeof b.get>;
  beforeEach(() => { clock.set(T0); tb = b.get(); });

  const list = (q: string) => tb.broker.nodes.get(q)!.structure as ListStructure;
  const accepted = (out: Array<{ state: string }>) => expect(out.every((o) => o.state === 'accepted'), JSON.stringify(out)).to.equal(true);

  it('one sweep removes every expired message, and only those', async function () {
    // The sweep used to walk the list while removing from it: once the removed front was
    // spliced off, it skipped the rest, and they stayed until the next second.
    const q = 'le.all';
    accepted(await send(tb.url, q, [
      { body: 'a', ttl: 100 }, { body: 'b', ttl: 100 }, { body: 'keep-1' }, { body: 'c', ttl: 100 },
      { body: 'd', ttl: 100 }, { body: 'keep-2', ttl: 60000 }, { body: 'e', ttl: 50 },
    ]));
    const l = list(q);
    expect(l.list.depth).to.equal(7);
    l.sweep(T0 + 99);
    expect(l.list.depth, 'only e (50 ms) is due at 99 ms').to.equal(6);
    l.sweep(T0 + 100);
    expect(l.list.depth, 'one sweep at 100 ms').to.equal(2);
    expect(tb.broker.nodes.get(q)!.counters.expired).to.equal(5);
    const left = await receive(tb.url, q, { count: 2, idleMs: 500 });
    expect(left.map((m) => m.message.body)).to.deep.equal(['keep-1', 'keep-2']);
    // All of a queue due at once: the front removed first is spliced off mid-walk.
    accepted(await send(tb.url, 'le.all-due', ['p', 'q', 'r'].map((body) => ({ body, ttl: 100 }))));
    const all = list('le.all-due');
    all.sweep(T0 + 100);
    expect(all.list.depth, 'every message due goes in the one sweep').to.equal(0);
  });

  it('a message that expires while a consumer holds it goes once released, not while held; accepted, it counts as consumed', async function () {
    const q = 'le.held';
    accepted(await send(tb.url, q, [{ body: 'x', ttl: 1000 }, { body: 'y', ttl: 1000 }]));
    const c = await connect(tb.url);
    try {
      const rcv = await openReceiver(c, { address: q });
      const held = await collect(rcv, { count: 2, settle: () => 'none' });
      expect(held).to.have.length(2);
      clock.set(T0 + 5000);
      const l = list(q);
      l.sweep(T0 + 5000);
      expect(l.list.depth, 'held, so still queued').to.equal(2);
      held[0].delivery.accept();
      held[1].delivery.release();
      for (let i = 0; i < 50 && l.list.depth > 0; i++) { await new Promise((r) => setTimeout(r, 20)); l.sweep(T0 + 5000); }
      expect(l.list.depth).to.equal(0);
      const counters = tb.broker.nodes.get(q)!.counters;
      expect(counters.expired, 'y expired once released').to.equal(1);
      expect(counters.acknowledged, 'x was accepted').to.equal(1);
    } finally { await c.close(); }
  });

  it('consumed messages with a long TTL do not pile up in the expiry heap', async function () {
    const q = 'le.consumed';
    const N = 3000;
    accepted(await send(tb.url, q, Array.from({ length: N }, (_, i) => ({ body: i, ttl: 3600000 }))));
    const got = await receive(tb.url, q, { count: N, credit: 1000 });
    expect(got).to.have.length(N);
    accepted(await send(tb.url, q, Array.from({ length: N }, (_, i) => ({ body: N + i, ttl: 3600000 }))));
    const l = list(q);
    expect(l.list.depth).to.equal(N);
    expect(l.expiryBacklog, 'the consumed ones were dropped from the heap').to.be.below(1.5 * N);
    l.sweep(T0 + 3600000);
    expect(l.list.depth).to.equal(0);
    expect(l.expiryBacklog).to.equal(0);
  });
});
