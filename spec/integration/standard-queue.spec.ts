import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openSender, sendAll, openReceiver, collect, receive, send, sleep } from '../support/client.js';
import { tmFilters } from '../support/sow-client.js';
import type { ListStructure } from '../../lib/core/queue/list-structure.js';

describe('standard queue (semantics.md 1)', function () {
  const b = useBroker();

  it('accepts a message only once stored, and a consumer receives it byte-faithfully', async function () {
    const url = b.get().url;
    const msg = { message_id: 'm1', subject: 'subj', application_properties: { a: 1, s: 'x' }, body: { k: 'v', n: [1, 2] }, durable: true, priority: 7, first_acquirer: true };
    const outcomes = await send(url, 'q.basic', [msg]);
    expect(outcomes.map((o) => o.state)).to.deep.equal(['accepted']);
    const got = await receive(url, 'q.basic', { count: 1 });
    expect(got).to.have.length(1);
    const m = got[0].message;
    expect(m.message_id).to.equal('m1');
    expect(m.subject).to.equal('subj');
    expect(m.application_properties).to.deep.equal({ a: 1, s: 'x' });
    expect(m.body).to.deep.equal({ k: 'v', n: [1, 2] });
    expect(m.priority).to.equal(7);
    expect(m.first_acquirer).to.equal(true);
  });

  it('keeps FIFO order and removes accepted messages', async function () {
    const url = b.get().url;
    await send(url, 'q.fifo', Array.from({ length: 50 }, (_, i) => ({ body: `m${i}` })));
    const got = await receive(url, 'q.fifo', { count: 50 });
    expect(got.map((x) => x.message.body)).to.deep.equal(Array.from({ length: 50 }, (_, i) => `m${i}`));
    const again = await receive(url, 'q.fifo', { idleMs: 300 });
    expect(again).to.have.length(0);
  });

  it('shares messages between competing consumers with none twice', async function () {
    const url = b.get().url;
    const c1 = await connect(url); const c2 = await connect(url);
    try {
      const r1 = await openReceiver(c1, { address: 'q.compete' });
      const r2 = await openReceiver(c2, { address: 'q.compete' });
      const pa = collect(r1, { credit: 10, idleMs: 600 }), pb = collect(r2, { credit: 10, idleMs: 600 });
      await send(url, 'q.compete', Array.from({ length: 100 }, (_, i) => ({ body: i })));
      const [a, bb] = await Promise.all([pa, pb]);
      const all = [...a, ...bb].map((x) => x.message.body as number).sort((x, y) => x - y);
      expect(all).to.deep.equal(Array.from({ length: 100 }, (_, i) => i));
      expect(a.length).to.be.greaterThan(0);
      expect(bb.length).to.be.greaterThan(0);
    } finally { await c1.close(); await c2.close(); }
  });

  it('released redelivers with delivery-count unchanged; modified(delivery-failed) increments it', async function () {
    const url = b.get().url;
    await send(url, 'q.outcomes', [{ body: 'r' }]);
    const first = await receive(url, 'q.outcomes', { count: 1, settle: () => 'release' });
    expect(first[0].message.delivery_count ?? 0).to.equal(0);
    const second = await receive(url, 'q.outcomes', { count: 1, settle: () => 'modify' });
    expect(second[0].message.delivery_count ?? 0).to.equal(0);
    const third = await receive(url, 'q.outcomes', { count: 1 });
    expect(third[0].message.body).to.equal('r');
    expect(third[0].message.delivery_count).to.equal(1);
  });

  it('rejected removes the message', async function () {
    const url = b.get().url;
    await send(url, 'q.reject', [{ body: 'x' }]);
    await receive(url, 'q.reject', { count: 1, settle: () => 'reject' });
    expect(await receive(url, 'q.reject', { idleMs: 300 })).to.have.length(0);
  });

  it('gives unsettled deliveries back when the consumer disconnects', async function () {
    const url = b.get().url;
    await send(url, 'q.unsettled', [{ body: 1 }, { body: 2 }, { body: 3 }]);
    const c = await connect(url);
    const rcv = await openReceiver(c, { address: 'q.unsettled' });
    const held = await collect(rcv, { count: 3, settle: () => 'none' });
    expect(held).to.have.length(3);
    await c.close();
    await sleep(100);
    const again = await receive(url, 'q.unsettled', { count: 3 });
    expect(again.map((x) => x.message.body)).to.deep.equal([1, 2, 3]);
  });

  it('copy receivers browse without removing', async function () {
    const url = b.get().url;
    await send(url, 'q.browse', [{ body: 'a' }, { body: 'b' }]);
    const b1 = await receive(url, { address: 'q.browse', distribution_mode: 'copy' }, { idleMs: 300 });
    const b2 = await receive(url, { address: 'q.browse', distribution_mode: 'copy' }, { idleMs: 300 });
    expect(b1.map((x) => x.message.body)).to.deep.equal(['a', 'b']);
    expect(b2.map((x) => x.message.body)).to.deep.equal(['a', 'b']);
    const consumed = await receive(url, 'q.browse', { count: 2 });
    expect(consumed).to.have.length(2);
  });

  it('keeps messages that arrive before any receiver exists, and delivers to a later one live', async function () {
    const url = b.get().url;
    const c = await connect(url);
    try {
      const rcv = await openReceiver(c, { address: 'q.live' });
      const p = collect(rcv, { count: 2 });
      await send(url, 'q.live', [{ body: 'x' }, { body: 'y' }]);
      const got = await p;
      expect(got.map((x) => x.message.body)).to.deep.equal(['x', 'y']);
    } finally { await c.close(); }
  });

  it('expires messages by TTL: never delivered, remaining ttl on the way out', async function () {
    const url = b.get().url;
    await send(url, 'q.ttl', [{ body: 'short', ttl: 100 }, { body: 'long', ttl: 60000 }]);
    await sleep(250);
    const got = await receive(url, 'q.ttl', { idleMs: 300 });
    expect(got.map((x) => x.message.body)).to.deep.equal(['long']);
    expect(got[0].message.ttl).to.be.within(1, 60000);
  });

  it('anonymous relay routes by properties.to', async function () {
    const url = b.get().url;
    const c = await connect(url);
    try {
      const s = await openSender(c, {});
      const o = await sendAll(s, [{ to: 'q.relay', body: 'via relay' }]);
      expect(o[0].state).to.equal('accepted');
    } finally { await c.close(); }
    const got = await receive(url, 'q.relay', { count: 1 });
    expect(got[0].message.body).to.equal('via relay');
  });

  it('keeps decoded views only while a consumer filters, in a bounded cache rather than on the entries; a later selector still selects', async function () {
    const url = b.get().url;
    const list = () => b.get().broker.nodes.get('q.views')!.structure as ListStructure;
    const onEntries = () => [...list().list.live()].filter((e: any) => e.view !== undefined || e.env !== undefined).length;
    await send(url, 'q.views', [0, 1, 2].map((i) => ({ application_properties: { i }, body: `early ${i}` })));
    expect([onEntries(), list().filterEnvsKept]).to.deep.equal([0, 0]); // nothing filters: bytes only (memory)
    const c = await connect(url);
    try {
      // A selector consumer with no credit yet: it filters, so the publishes' views are kept for it
      // (session 24: in the structure's bounded cache; on every entry, a deep queue held them all).
      const rcv = await openReceiver(c, { address: 'q.views', filter: tmFilters({ selector: 'i >= 1' }) });
      await send(url, 'q.views', [3, 4].map((i) => ({ application_properties: { i }, body: `late ${i}` })));
      expect(onEntries()).to.equal(0);
      expect(list().filterEnvsKept).to.equal(2);
      rcv.add_credit(10);
      const got = await collect(rcv, { count: 4 });
      expect(got.map((m) => m.message.body)).to.deep.equal(['early 1', 'early 2', 'late 3', 'late 4']);
      rcv.close();
    } finally { await c.close(); }
    await sleep(100); // the detach reaches the broker
    await send(url, 'q.views', [{ application_properties: { i: 5 }, body: 'after' }]);
    expect([onEntries(), list().filterEnvsKept]).to.deep.equal([0, 0]); // no filtering consumer again
  });
});
