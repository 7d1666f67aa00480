/**
 * Filtering consumers on list queues: each queued message is tested once per consumer, not on
 * every dispatch (lib/core/queue/list-structure.ts #nextAvailable), and what a consumer turned
 * down comes back to others when released.
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openReceiver, collect, send, receive } from '../support/client.js';
import { tmFilters } from '../support/sow-client.js';
import type { ListStructure } from '../../lib/core/queue/list-structure.js';
import type { ConsumerRequest } from '../../lib/core/extensions.js';
import type { DeliverySink, Outcome } from '../../lib/core/queue/delivery.js';

describe('list queues: filtering consumers scan each message once', function () {
  this.timeout(60000);
  const b = useBroker();
  const accepted = (out: Array<{ state: string }>) => expect(out.every((o) => o.state === 'accepted'), JSON.stringify(out)).to.equal(true);

  /** An acquiring consumer opened on the queue's structure, whose predicate counts its calls. */
  function countingConsumer(q: string, match: (body: unknown) => boolean) {
    const list = b.get().broker.nodes.get(q)!.structure as ListStructure;
    let calls = 0;
    const got: unknown[] = [];
    const req: ConsumerRequest = {
      mode: 'move', filters: new Map(), annotate: false, linkName: 'counting', containerId: 'spec', connectionId: 'spec', durable: false, user: 'anonymous',
      predicates: [(env: any) => { calls++; return match(env.message?.body); }],
    };
    const sink: DeliverySink = {
      id: 'spec/counting', presettled: false, credit: () => 1000, drained() {}, close() {},
      send(_bytes: Buffer, onOutcome?: (o: Outcome) => void) { got.push(_bytes); onOutcome?.({ type: 'accepted' }); },
    };
    const consumer = list.openConsumer(req, sink);
    return { consumer, list, calls: () => calls, got };
  }

  it('a filter that matches nothing tests each message once, however many are published after it', async function () {
    const url = b.get().url;
    const q = 'lf.none';
    accepted(await send(url, q, Array.from({ length: 200 }, (_, i) => ({ body: `old-${i}` }))));
    const c = countingConsumer(q, () => false);
    c.list.dispatch();
    expect(c.calls(), 'the queued 200, once each').to.equal(200);
    // One publish per batch: each commit dispatches. The old scan re-tested the whole queue each time.
    for (let i = 0; i < 100; i++) accepted(await send(url, q, [{ body: `new-${i}` }]));
    expect(c.calls(), 'the 100 new ones, once each').to.equal(300);
    expect(c.got).to.have.length(0);
    c.consumer.close();
    // Nothing was taken: a plain consumer gets all 300, in order.
    const all = await receive(url, q, { count: 300, idleMs: 500 });
    expect(all.map((m) => m.message.body)).to.deep.equal([...Array.from({ length: 200 }, (_, i) => `old-${i}`), ...Array.from({ length: 100 }, (_, i) => `new-${i}`)]);
  });

  it('competing filters share the queue exactly; messages a consumer gives back go to the other one, which had passed them while held', async function () {
    const url = b.get().url;
    const q = 'lf.compete';
    const msgs = Array.from({ length: 60 }, (_, i) => ({ body: i, application_properties: { colour: i % 3 === 0 ? 'red' : 'blue' } }));
    accepted(await send(url, q, msgs));
    const conn = await connect(url);
    try {
      // Holds every red one unsettled, then releases them.
      const red = await openReceiver(conn, { address: q, filter: tmFilters({ selector: "colour = 'red'" }) });
      const held = await collect(red, { count: 20, settle: () => 'none' });
      expect(held.map((m) => m.message.body)).to.deep.equal(Array.from({ length: 20 }, (_, i) => i * 3));
      // Takes everything: gets the blue ones now (the red ones are held).
      const any = await openReceiver(conn, { address: q });
      const blue = await collect(any, { count: 40, idleMs: 500 });
      expect(blue.map((m) => m.message.body)).to.deep.equal(Array.from({ length: 60 }, (_, i) => i).filter((i) => i % 3 !== 0));
      red.close(); // its unsettled deliveries are released (and it takes none back)
      const back = await collect(any, { count: 20, idleMs: 1000 });
      expect(back.map((m) => m.message.body).sort((x: number, y: number) => x - y)).to.deep.equal(Array.from({ length: 20 }, (_, i) => i * 3));
    } finally { await conn.close(); }
    expect(b.get().broker.nodes.get(q)!.structure.stats().depth).to.equal(0);
  });
});
