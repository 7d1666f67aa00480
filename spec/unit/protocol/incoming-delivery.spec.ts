/**
 * lib/core/protocol/incoming-delivery.ts: the same steps as rhea's own Incoming.on_transfer,
 * run side by side on seeded random frame sequences (single and multi-frame deliveries,
 * out-of-sequence ids, transfers after detach, no credit), then every delivery method.
 */
import { expect } from 'chai';
import { tuneRhea } from '../../../lib/core/protocol/rhea-tuning.js';
import { onTransfer, rheaOnTransfer, IncomingDelivery } from '../../../lib/core/protocol/incoming-delivery.js';
import { prng } from '../../../tools/crash/common.js'; // seeded mulberry32: a failure names a reproducible case
import rhea from 'rhea';

const amqp: any = rhea;

/** What one run observed: every call out of on_transfer, in order, as plain values. */
type Trace = unknown[];

function delivered(d: any): Record<string, unknown> {
  return { id: d.id, tag: d.tag, format: d.format, settled: d.settled, state: d.state, remote_settled: d.remote_settled, remote_state: d.remote_state, incomplete: d.incomplete, frames: d.frames };
}

function world(trace: Trace) {
  const deliveries: any[] = [];
  const incoming: any = {
    next_transfer_id: 0, next_delivery_id: undefined,
    deliveries: { push: (d: any) => { deliveries.push(d); trace.push(['push', d.id]); } },
    update: (d: any, settled: unknown, state: any) => trace.push(['update', d.id, settled, state === undefined ? undefined : JSON.stringify(state)]),
  };
  const receiver: any = {
    open: true, _incomplete: undefined, credit: 0, delivery_count: 0, local: { attach: { rcv_settle_mode: 0 } },
    is_remote_open() { return this.open; },
    _context(c: any) { return c; },
    dispatch(name: string, ctx: any) { trace.push(['dispatch', name, ctx.format, JSON.stringify(ctx.message), delivered(ctx.delivery)]); },
  };
  return { incoming, receiver, deliveries };
}

function payload(rand: () => number): Buffer {
  const m = amqp.message.encode({ body: 'x'.repeat(Math.floor(rand() * 40)), application_properties: { n: Math.floor(rand() * 1000) } });
  return Buffer.from(m);
}

/** One seeded scenario run through `fn`; returns what it did. */
function run(fn: (this: any, frame: any, receiver: any) => void, seed: number): Trace {
  const rand = prng(seed);
  const trace: Trace = [];
  const { incoming, receiver, deliveries } = world(trace);
  const origError = console.error, origWarn = console.warn;
  console.error = (...a: unknown[]) => { trace.push(['console.error', ...a]); };
  // (rhea's decoder warns about the garbage a broken-up delivery can make: part of the trace too)
  console.warn = (...a: unknown[]) => { trace.push(['console.warn', ...a]); };
  try {
    let nextId = Math.floor(rand() * 5);
    for (let step = 0; step < 60; step++) {
      const r = rand();
      receiver.credit = rand() < 0.1 ? 0 : Math.floor(rand() * 5);
      receiver.open = rand() > 0.03;
      receiver.local.attach.rcv_settle_mode = rand() < 0.5 ? 0 : 1;
      const body = payload(rand);
      let frame: any;
      if (r < 0.6) frame = { performative: { delivery_id: nextId, delivery_tag: Buffer.from(String(step)), message_format: rand() < 0.9 ? 0 : 7, settled: [undefined, null, true, false][Math.floor(rand() * 4)], more: false, state: undefined }, payload: body };
      else if (r < 0.85) {
        // a delivery in two frames (the second without a delivery id, as is allowed)
        const cut = Math.floor(body.length / 2);
        const first = { performative: { delivery_id: nextId, delivery_tag: Buffer.from('m' + step), message_format: 0, settled: false, more: true }, payload: body.subarray(0, cut) };
        frame = { performative: { delivery_id: rand() < 0.5 ? undefined : nextId, more: false }, payload: rand() < 0.2 ? undefined : body.subarray(cut) };
        try { fn.call(incoming, first, receiver); } catch (e) { trace.push(['threw', (e as Error).message]); }
      } else if (r < 0.93) frame = { performative: { delivery_id: nextId + 1 + Math.floor(rand() * 3), delivery_tag: Buffer.from('bad'), message_format: 0, more: false }, payload: body };
      else frame = { performative: { delivery_id: nextId, delivery_tag: Buffer.from('p'), message_format: 0, more: true }, payload: body };
      try { fn.call(incoming, frame, receiver); } catch (e) { trace.push(['threw', (e as Error).message]); }
      nextId = incoming.next_delivery_id ?? nextId;
      trace.push(['state', incoming.next_transfer_id, incoming.next_delivery_id, receiver.credit, receiver.delivery_count, receiver._incomplete?.id]);
    }
    // Every delivery method, on every delivery.
    for (const d of deliveries) {
      const k = Math.floor(rand() * 7);
      if (k === 0) d.accept();
      else if (k === 1) d.release();
      else if (k === 2) d.release({ delivery_failed: true, undeliverable_here: rand() < 0.5 });
      else if (k === 3) d.reject({ condition: 'amqp:internal-error', description: 'no' });
      else if (k === 4) d.modified({ delivery_failed: true });
      else if (k === 5) d.update(true, amqp.message.accepted().described());
      else d.update();
    }
  } finally { console.error = origError; console.warn = origWarn; }
  return trace;
}

describe('incoming deliveries with shared methods (rhea tuning 6)', () => {
  before(() => tuneRhea());

  it('is installed, and rhea\'s own function was kept for comparison', () => {
    const proto = Object.getPrototypeOf(amqp.create_connection({ host: '127.0.0.1', port: 0 }).create_session().incoming);
    expect(proto.on_transfer).to.equal(onTransfer);
    expect(rheaOnTransfer).to.be.a('function');
  });

  it('does what rhea\'s on_transfer does, over 300 seeded scenarios', () => {
    let dispatched = 0, threw = 0;
    for (let seed = 1; seed <= 300; seed++) {
      const ours = run(onTransfer, seed);
      const theirs = run(rheaOnTransfer!, seed);
      expect(ours, `seed ${seed}`).to.deep.equal(theirs);
      dispatched += ours.filter((t: any) => t[0] === 'dispatch').length;
      threw += ours.filter((t: any) => t[0] === 'threw').length;
    }
    // The scenarios reach every branch that matters.
    expect(dispatched).to.be.greaterThan(5000);
    expect(threw).to.be.greaterThan(500);
  });

  it('a delivery is an IncomingDelivery with rhea\'s fields and no own closures', () => {
    const trace: Trace = [];
    const { incoming, receiver, deliveries } = world(trace);
    receiver.credit = 1;
    onTransfer.call(incoming, { performative: { delivery_id: 0, delivery_tag: Buffer.from('0'), message_format: 0, settled: true, more: false }, payload: amqp.message.encode({ body: 'hi' }) }, receiver);
    const d = deliveries[0];
    expect(d).to.be.instanceOf(IncomingDelivery);
    expect(Object.keys(d).sort()).to.deep.equal(['format', 'frames', 'id', 'incomplete', 'link', 'remote_settled', 'remote_state', 'settled', 'state', 'tag']);
    expect(Object.values(d).some((v) => typeof v === 'function')).to.equal(false);
    expect(d.link).to.equal(receiver);
  });
});
