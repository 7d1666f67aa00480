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

describe('DurableSink: events its reader passes without a delivery (passed)', function () {
  // A subscription whose filter skips most events moved only on accepted deliveries: behind a
  // run of skipped events the log dropped, its next attach was refused though it missed nothing.
  const setup = (position: number | null = null) => {
    const writes: string[] = [];
    const subs = new DurableSubscriptions();
    void subs.load({ all: async () => [] } as any, { addQuiet: (ops: any[]) => { for (const op of ops) writes.push(JSON.parse(op.value.toString()).position); } } as any);
    const key = subscriptionKey('c', 'l');
    const sub: Subscription = { queue: 'q', position, created: 0 };
    subs.save(key, sub);
    writes.length = 0;
    const link = fakeLink();
    return { subs, sub, link, writes, sink: new DurableSink(link, subs, key, sub) };
  };
  const send = (sink: DurableSink, scn: number) => sink.send(Buffer.alloc(1), undefined, { position: scn });

  it('moves over passed events once every delivery before them is settled', function () {
    const { sub, link, sink } = setup(0);
    send(sink, 1);
    sink.passed(5);
    expect(sub.position, 'delivery 1 not settled yet').to.equal(0);
    link.settle(0, { type: 'accepted' });
    expect(sub.position).to.equal(5);
    send(sink, 6);
    sink.passed(9);
    sink.passed(12);
    expect(sink.tracked, 'a run of passes is one entry').to.equal(2);
    link.settle(1, { type: 'accepted' });
    expect(sub.position).to.equal(12);
  });

  it('a released delivery before them holds the position there', function () {
    const { sub, link, sink } = setup(0);
    send(sink, 1);
    sink.passed(5);
    link.settle(0, { type: 'released' });
    sink.passed(9);
    expect(sub.position).to.equal(0);
  });

  it('passes are written coalesced: none at once, one row with the next write or flush', function () {
    const { subs, sub, link, sink, writes } = setup(0);
    for (let scn = 1; scn <= 1000; scn++) sink.passed(scn);
    expect(sub.position).to.equal(1000);
    expect(writes, 'no write per skipped event').to.deep.equal([]);
    subs.flush();
    expect(writes).to.deep.equal([1000]);
    sink.passed(1001);
    send(sink, 1002);
    link.settle(0, { type: 'accepted' });
    expect(writes, 'an accept writes the position, passes included').to.deep.equal([1000, 1002]);
    subs.flush();
    expect(writes, 'nothing left to flush').to.have.length(2);
    subs.stop();
  });

  it('an event the log bound dropped before the reader reached it, and that the link would have delivered, caps the position before it', function () {
    const { sub, link, sink } = setup(3);
    sink.dropped(4, () => false); // skipped by its filter anyway
    sink.dropped(5, () => true);  // lost to the link
    sink.dropped(6, () => true);
    send(sink, 9);
    link.settle(0, { type: 'accepted' });
    sink.passed(12);
    expect(sub.position, 'the next attach is refused (SCN 5 is gone)').to.equal(4);
  });

  it('a drop the reader had passed, or one before a new subscription began reading, caps nothing', function () {
    const a = setup(3);
    a.sink.passed(8);
    a.sink.dropped(5, () => true);
    a.sink.passed(10);
    expect(a.sub.position).to.equal(10);
    const b = setup(null);
    b.sink.dropped(1, () => true);
    send(b.sink, 2);
    b.link.settle(0, { type: 'accepted' });
    expect(b.sub.position).to.equal(2);
  });
});
