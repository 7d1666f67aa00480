/** lib/ext/checkpoints/durable.ts DurableSink: the accepted position, and what it keeps per delivery. */
import { expect } from 'chai';
import { DurableSink, DurableSubscriptions, subscriptionKey, type Subscription } from '../../../lib/ext/checkpoints/durable.js';
import type { DeliverySink, Outcome } from '../../../lib/core/queue/delivery.js';

/** A link that records the outcome callbacks, for the test to settle. */
function fakeLink(): DeliverySink & { settle(i: number, o: Outcome): void } {
  const pending: Array<((o: Outcome) => void) | undefined> = [];
  return {
    id: 'c/l', presettled: false,
    credit: () => 1000, drained() {}, close() {},
    send(_b: Buffer, onOutcome?: (o: Outcome) => void) { pending.push(onOutcome); },
    settle(i: number, o: Outcome) { pending[i]?.(o); },
  };
}

describe('DurableSink', function () {
  const setup = () => {
    const subs = new DurableSubscriptions();
    const key = subscriptionKey('c', 'l');
    const sub: Subscription = { queue: 'q', position: null, created: 0 };
    const link = fakeLink();
    return { subs, sub, link, sink: new DurableSink(link, subs, key, sub) };
  };
  const send = (sink: DurableSink, scn: number) => sink.send(Buffer.alloc(1), undefined, { position: scn });

  it('moves to the newest delivery whose predecessors were all accepted, in any settle order', function () {
    const { sub, link, sink } = setup();
    for (let scn = 1; scn <= 4; scn++) send(sink, scn);
    link.settle(1, { type: 'accepted' });
    expect(sub.position, 'scn 1 not settled yet').to.equal(null);
    link.settle(0, { type: 'accepted' });
    expect(sub.position).to.equal(2);
    link.settle(3, { type: 'rejected' });
    link.settle(2, { type: 'accepted' });
    expect(sub.position, 'rejected counts as consumed').to.equal(4);
    expect(sink.tracked).to.equal(0);
  });

  it('a released delivery holds the position for the rest of the link, and nothing is tracked after it', function () {
    // It used to keep one entry per delivery for the life of the link behind the released one.
    const { sub, link, sink } = setup();
    for (let scn = 1; scn <= 3; scn++) send(sink, scn);
    link.settle(0, { type: 'accepted' });
    link.settle(1, { type: 'released' });
    link.settle(2, { type: 'accepted' });
    expect(sub.position).to.equal(1);
    for (let scn = 4; scn <= 10000; scn++) send(sink, scn);
    for (let i = 3; i < 10000; i++) link.settle(i, { type: 'accepted' });
    sink.advanceTo(20000);
    expect(sub.position, 'the next attach resumes at the released delivery').to.equal(1);
    expect(sink.tracked, 'nothing kept per delivery once held').to.equal(0);
  });
});

describe('DurableSink after its subscription was deleted', function () {
  it('an accept that arrives after the subscription ended does not write it back', function () {
    // A detach with closed=true deletes the subscription while deliveries are unsettled; their
    // accepts arrived after and saved it again (an outside audit: 135 of 300 came back, and
    // stayed across restarts).
    const subs = new DurableSubscriptions();
    const key = subscriptionKey('c', 'gone');
    const sub: Subscription = { queue: 'q', position: null, created: 0 };
    subs.save(key, sub);
    const link = fakeLink();
    const sink = new DurableSink(link, subs, key, sub);
    sink.send(Buffer.alloc(1), undefined, { position: 1 });
    sink.send(Buffer.alloc(1), undefined, { position: 2 });
    link.settle(0, { type: 'accepted' });
    expect(subs.get(key)?.position).to.equal(1);
    expect(subs.delete(key)).to.equal(true);
    link.settle(1, { type: 'accepted' });
    expect(subs.get(key), 'still deleted').to.equal(undefined);
    expect(subs.list()).to.have.length(0);
  });
});
