import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openSender, sendAll, openReceiver, collect, send, sleep, r, type Received } from '../support/client.js';
import { tmFilters, cmdOf, scnOf, keyOf, bodyJson, sowQuery } from '../support/sow-client.js';

const sowQueue = (name: string, args: Record<string, unknown> = {}) => ({
  address: name, capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'sow.key': '/id', ...args },
});
const op = (o: string, body: unknown, extra: Record<string, unknown> = {}) => ({ message_annotations: { 'x-opt-tm-op': o, ...extra }, body: JSON.stringify(body) });

describe('SOW queues (semantics.md 2, 4)', function () {
  const b = useBroker();

  it('keeps the latest record per key: 3 versions of 1000 keys give 1000 records between group markers', async function () {
    const url = b.get().url;
    const msgs = [];
    for (let v = 1; v <= 3; v++) for (let i = 0; i < 1000; i++) msgs.push({ body: JSON.stringify({ id: `k${String(i).padStart(4, '0')}`, v, price: i % 50 }) });
    const out = await send(url, sowQueue('sow.b1'), msgs);
    expect(out.every((o) => o.state === 'accepted')).to.equal(true);
    const q = await sowQuery(url, 'sow.b1');
    expect(cmdOf(q.all[0])).to.equal('group_begin');
    expect(q.records).to.have.length(1000);
    expect(q.records.every((m) => bodyJson(m).v === 3)).to.equal(true);
    expect(q.records.map(keyOf)).to.deep.equal([...q.records.map(keyOf)].sort());
    expect(q.groupEnd).to.equal(3000);
    const f = await sowQuery(url, 'sow.b1', { filter: '/price > 45' });
    expect(f.records.map((m) => bodyJson(m).price).every((p: number) => p > 45)).to.equal(true);
    expect(f.records).to.have.length(80);
    const top = await sowQuery(url, 'sow.b1', { options: { top_n: 5, order_by: '/price DESC' } });
    expect(top.records.map((m) => bodyJson(m).price)).to.deep.equal([49, 49, 49, 49, 49]);
    const page1 = await sowQuery(url, 'sow.b1', { options: { top_n: 10 } });
    const page2 = await sowQuery(url, 'sow.b1', { options: { top_n: 10, skip_n: 10 } });
    expect(page1.records.map(keyOf)).to.deep.equal(Array.from({ length: 10 }, (_, i) => `k${String(i).padStart(4, '0')}`));
    expect(page2.records.map(keyOf)).to.deep.equal(Array.from({ length: 10 }, (_, i) => `k${String(i + 10).padStart(4, '0')}`));
  });

  it('integers beyond 2^53: two ids stay two records, keys and filters see the exact value, a delta keeps it exact', async function () {
    const url = b.get().url;
    const out = await send(url, sowQueue('sow.bigint'), [
      { body: '{"id":9007199254740993,"big":12345678901234567890}' }, { body: '{"id":9007199254740992,"big":1}' },
      { body: '{"id":12345678901234567891,"big":2}' }, { body: '{"id":12345678901234567890,"big":3}' },
    ]);
    expect(out.every((o) => o.state === 'accepted')).to.equal(true);
    const all = await sowQuery(url, 'sow.bigint');
    expect(all.records.map(keyOf).sort()).to.deep.equal(['12345678901234567890', '12345678901234567891', '9007199254740992', '9007199254740993']);
    const exact = await sowQuery(url, 'sow.bigint', { filter: '/big = 12345678901234567890' });
    expect(exact.records.map(keyOf)).to.deep.equal(['9007199254740993']);
    expect((await sowQuery(url, 'sow.bigint', { filter: '/big = 12345678901234567168' })).records).to.have.length(0);
    expect((await sowQuery(url, 'sow.bigint', { filter: '/id = 9007199254740992' })).records.map(keyOf)).to.deep.equal(['9007199254740992']);
    await send(url, 'sow.bigint', [{ message_annotations: { 'x-opt-tm-op': 'delta' }, body: '{"id":9007199254740992,"big":98765432109876543210}' }]);
    const merged = (await sowQuery(url, 'sow.bigint', { filter: '/id = 9007199254740992' })).records[0];
    expect(String(merged.message.body)).to.contain('"big":98765432109876543210');
  });

  it('a path through an array of objects collects the elements\' values (docs/filters.md): any element can match', async function () {
    const url = b.get().url;
    await send(url, sowQueue('sow.arrpath'), [
      { body: JSON.stringify({ id: 'k1', items: [{ sym: 'A' }, { sym: 'B' }] }) },
      { body: JSON.stringify({ id: 'k2', items: [{ sym: 'C' }] }) },
      { body: JSON.stringify({ id: 'k3', items: [] }) },
    ]);
    const keys = async (filter: string) => (await sowQuery(url, 'sow.arrpath', { filter })).records.map(keyOf);
    expect(await keys("/items/sym = 'B'")).to.deep.equal(['k1']);
    expect(await keys("'C' IN (/items/sym)")).to.deep.equal(['k2']);
    expect(await keys('/items/sym IS NULL')).to.deep.equal(['k3']);
    expect(await keys("/items[1]/sym = 'B'")).to.deep.equal(['k1']);
  });

  it('rejects a message without key (invalid-field) or with an unparseable body (decode-error)', async function () {
    const url = b.get().url;
    const out = await send(url, sowQueue('sow.bad'), [{ body: JSON.stringify({ nokey: 1 }) }, { body: 'not json {' }, { body: JSON.stringify({ id: 'ok' }) }]);
    expect(out[0].state).to.equal('rejected');
    expect(out[0].condition).to.equal('amqp:invalid-field');
    expect(out[0].description).to.match(/\/id/);
    expect(out[1].condition).to.equal('amqp:decode-error');
    expect(out[2].state).to.equal('accepted');
  });

  it('delta merges top-level fields, delete removes, both seen by subscribers; oof for delivered records only', async function () {
    const url = b.get().url;
    await send(url, sowQueue('sow.b3'), [{ body: JSON.stringify({ id: 'a', x: 1, y: { n: 1 }, colour: 'red' }) }, { body: JSON.stringify({ id: 'b', x: 2, colour: 'blue' }) }]);
    const c = await connect(url);
    try {
      const rcv = await openReceiver(c, { address: 'sow.b3', filter: tmFilters({ command: 'sow_and_subscribe', filter: "/colour = 'red'", options: { oof: true } }) });
      const got: Received[] = [];
      rcv.on('message', (ctx: any) => { got.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept(); });
      rcv.add_credit(100);
      await sleep(200);
      await send(url, 'sow.b3', [
        op('delta', { id: 'a', x: 10, y: { m: 2 } }),
        op('delta', { id: 'b', colour: 'red' }),
        op('delta', { id: 'a', colour: 'green' }),
        op('delete', { id: 'b' }),
        op('publish', { id: 'c', colour: 'blue' }),
        op('delete', { id: 'c' }),
      ]);
      await sleep(500);
      const seq = got.map((m) => `${cmdOf(m)}:${keyOf(m)}${m.message.message_annotations?.['x-opt-tm-oof-reason'] ? ':' + m.message.message_annotations['x-opt-tm-oof-reason'] : ''}`);
      expect(seq).to.deep.equal(['group_begin:', 'sow:a', 'group_end:', 'publish:a', 'publish:b', 'oof:a:match', 'oof:b:deleted']);
      expect(bodyJson(got[3])).to.deep.equal({ id: 'a', x: 10, y: { m: 2 }, colour: 'red' });
    } finally { await c.close(); }
    const q = await sowQuery(url, 'sow.b3');
    expect(q.records.map((m) => bodyJson(m))).to.deep.equal([{ id: 'a', x: 10, y: { m: 2 }, colour: 'green' }]);
  });

  it('sow on a queue without SOW is amqp:not-found; bad options are amqp:invalid-field', async function () {
    const url = b.get().url;
    await send(url, 'plain.q', [{ body: 'x' }]);
    const c = await connect(url);
    try {
      let err: any;
      try { await openReceiver(c, { address: 'plain.q', filter: tmFilters({ command: 'sow' }) }); } catch (e) { err = e; }
      expect(err?.condition).to.equal('amqp:not-found');
      err = undefined;
      try { await openReceiver(c, { address: 'sow.b1', filter: tmFilters({ command: 'sow', options: { skip_n: 3 } }) }); } catch (e) { err = e; }
      expect(err?.condition).to.equal('amqp:invalid-field');
      expect(err?.message).to.match(/skip_n needs top_n/);
      err = undefined;
      try { await openReceiver(c, { address: 'sow.b1', filter: tmFilters({ command: 'sow', filter: '/a > (1 + 2' }) }); } catch (e) { err = e; }
      expect(err?.condition).to.equal('amqp:invalid-field');
    } finally { await c.close(); }
  });

  it('sow_and_subscribe under fire: snapshot + live equals the final state, live SCNs > group_end, none twice', async function () {
    this.timeout(60000);
    const url = b.get().url;
    const K = 50;
    await send(url, sowQueue('sow.fire'), Array.from({ length: K }, (_, i) => ({ body: JSON.stringify({ id: `k${i}`, n: 0 }) })));
    const pc = await connect(url);
    const sender = await openSender(pc, { address: 'sow.fire' });
    let stop = false;
    const counters = new Array(K).fill(0);
    const publisher = (async () => {
      let rounds = 0;
      while (!stop && rounds < 200) {
        rounds++;
        const batch = [];
        for (let i = 0; i < K; i++) batch.push({ body: JSON.stringify({ id: `k${i}`, n: ++counters[i] }) });
        await sendAll(sender, batch);
      }
    })();
    const subs = [];
    for (let s = 0; s < 4; s++) {
      await sleep(40 + Math.floor(Math.random() * 60));
      const c = await connect(url);
      const rcv = await openReceiver(c, { address: 'sow.fire', filter: tmFilters({ command: 'sow_and_subscribe' }) });
      const got: Received[] = [];
      rcv.on('message', (ctx: any) => { got.push({ message: ctx.message, delivery: ctx.delivery }); ctx.delivery.accept(); if (rcv.credit < 200) rcv.add_credit(500); });
      rcv.add_credit(500);
      subs.push({ c, got });
    }
    await sleep(300);
    stop = true;
    await publisher;
    await pc.close();
    await sleep(800);
    const final = await sowQuery(url, 'sow.fire');
    const finalMap = new Map(final.records.map((m) => [keyOf(m), bodyJson(m).n]));
    for (const s of subs) {
      const end = s.got.find((m) => cmdOf(m) === 'group_end');
      expect(end, 'group_end').to.exist;
      const S = scnOf(end!);
      const map = new Map<string, number>();
      const live: number[] = [];
      let afterEnd = false;
      for (const m of s.got) {
        const cmd = cmdOf(m);
        if (cmd === 'group_end') { afterEnd = true; continue; }
        if (cmd === 'sow') { expect(afterEnd).to.equal(false); map.set(keyOf(m), bodyJson(m).n); }
        if (cmd === 'publish') { expect(afterEnd).to.equal(true); live.push(scnOf(m)); map.set(keyOf(m), bodyJson(m).n); }
      }
      expect(live.every((x) => x > S), 'live SCNs after group_end').to.equal(true);
      expect(new Set(live).size).to.equal(live.length);
      for (let i = 1; i < live.length; i++) expect(live[i]).to.be.greaterThan(live[i - 1]);
      expect(map).to.deep.equal(finalMap);
      await s.c.close();
    }
  });

  it('a plain receiver (no tidemark filter) gets the current records then every change', async function () {
    const url = b.get().url;
    await send(url, sowQueue('sow.plain'), [{ body: JSON.stringify({ id: 'a', v: 1 }) }, { body: JSON.stringify({ id: 'a', v: 2 }) }, { body: JSON.stringify({ id: 'b', v: 1 }) }]);
    const c = await connect(url);
    try {
      const rcv = await openReceiver(c, { address: 'sow.plain' });
      const p = collect(rcv, { count: 3, idleMs: 1500 });
      await sleep(200);
      await send(url, 'sow.plain', [{ body: JSON.stringify({ id: 'a', v: 3 }) }]);
      const got = await p;
      expect(got.map((m) => bodyJson(m))).to.deep.equal([{ id: 'a', v: 2 }, { id: 'b', v: 1 }, { id: 'a', v: 3 }]);
    } finally { await c.close(); }
  });

  it('SOW state, log and SCNs survive a restart', async function () {
    const tb = b.get();
    await send(tb.url, sowQueue('sow.restart'), [{ body: JSON.stringify({ id: 'x', v: 1 }) }, { body: JSON.stringify({ id: 'x', v: 2 }) }]);
    await tb.restart();
    const url = tb.broker.urls[0];
    const out = await send(url, 'sow.restart', [{ body: JSON.stringify({ id: 'y', v: 1 }) }]);
    expect(out[0].state).to.equal('accepted');
    const q = await sowQuery(url, 'sow.restart');
    expect(q.records.map((m) => [keyOf(m), bodyJson(m).v, scnOf(m)])).to.deep.equal([['x', 2, 2], ['y', 1, 3]]);
    expect(q.groupEnd).to.equal(3);
  });
});

void r;

describe('SOW replace and conflation (semantics.md 5, acceptance B4, B5)', function () {
  this.timeout(30000);
  const b = useBroker();
  const q = (name: string) => ({ address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } });
  const rec = (id: string, extra: Record<string, unknown>) => ({ body: JSON.stringify({ id, ...extra }) });

  it('replace: the new link gets only newly matching records, oof for those leaving focus, then live; the old link closes', async function () {
    const url = b.get().url;
    await send(url, q('sow.replace'), [rec('a', { p: 5 }), rec('b', { p: 15 }), rec('c', { p: 25 }), rec('d', { p: 35 })]);
    const c = await connect(url);
    try {
      const old = await openReceiver(c, { address: 'sow.replace', filter: tmFilters({ command: 'sow_and_subscribe', filter: '/p > 10 AND /p < 30', options: { oof: true } }) }, { name: 'view-1' });
      const first = await collect(old, { idleMs: 400, until: (m) => cmdOf(m) === 'group_end' });
      expect(first.filter((m) => cmdOf(m) === 'sow').map(keyOf)).to.deep.equal(['b', 'c']);
      let oldClosed = false;
      old.on('receiver_close', () => { oldClosed = true; });
      const nu = await openReceiver(c, { address: 'sow.replace', filter: tmFilters({ command: 'sow_and_subscribe', filter: '/p > 20', options: { oof: true, replace: 'view-1' } }) }, { name: 'view-2' });
      const p = collect(nu, { idleMs: 800 });
      await sleep(200);
      await send(url, 'sow.replace', [rec('e', { p: 50 })]);
      const got = await p;
      const seq = got.map((m) => `${cmdOf(m)}:${keyOf(m)}${m.message.message_annotations?.['x-opt-tm-oof-reason'] ? ':' + m.message.message_annotations['x-opt-tm-oof-reason'] : ''}`);
      // semantics.md 5: records between the markers, then the oof for one that left focus, then live
      expect(seq).to.deep.equal(['group_begin:', 'sow:d', 'group_end:', 'oof:b:match', 'publish:e']);
      expect(oldClosed).to.equal(true);
    } finally { await c.close(); }
  });

  it('replace of a sow query still streaming: the new link skips the records the query delivered', async function () {
    const url = b.get().url;
    await send(url, q('sow.replace-query'), ['a', 'b', 'c', 'd', 'e'].map((k) => rec(k, { p: 1 })));
    const c = await connect(url);
    try {
      const old = await openReceiver(c, { address: 'sow.replace-query', filter: tmFilters({ command: 'sow' }) }, { name: 'query-1' });
      const first: Received[] = [];
      await new Promise<void>((resolve) => {
        old.on('message', (ctx: any) => { first.push({ message: ctx.message, delivery: ctx.delivery }); if (first.length === 3) resolve(); });
        old.add_credit(3); // group_begin, a, b: then the query waits for credit
      });
      await sleep(200);
      expect(first).to.have.length(3);
      expect(first.map((m) => `${cmdOf(m)}:${keyOf(m) ?? ''}`)).to.deep.equal(['group_begin:', 'sow:a', 'sow:b']);
      const nu = await openReceiver(c, { address: 'sow.replace-query', filter: tmFilters({ command: 'sow_and_subscribe', options: { replace: 'query-1' } }) }, { name: 'view-2' });
      const got = await collect(nu, { idleMs: 600 });
      expect(got.map((m) => `${cmdOf(m)}:${keyOf(m) ?? ''}`)).to.deep.equal(['group_begin:', 'sow:c', 'sow:d', 'sow:e', 'group_end:']);
    } finally { await c.close(); }
  });

  it('conflation: 100 updates of one key within the interval arrive as one message with the last state; the snapshot is not conflated', async function () {
    const url = b.get().url;
    await send(url, q('sow.conflate'), [rec('x', { n: 0 }), rec('y', { n: 0 })]);
    const c = await connect(url);
    try {
      const rcv = await openReceiver(c, { address: 'sow.conflate', filter: tmFilters({ command: 'sow_and_subscribe', options: { conflation: '1s' } }) });
      const p = collect(rcv, { idleMs: 2500 });
      await sleep(100);
      await send(url, 'sow.conflate', Array.from({ length: 100 }, (_, i) => rec('x', { n: i + 1 })));
      const got = await p;
      expect(got.filter((m) => cmdOf(m) === 'sow').map(keyOf)).to.deep.equal(['x', 'y']);
      const live = got.filter((m) => cmdOf(m) === 'publish');
      expect(live).to.have.length(1);
      expect(bodyJson(live[0]).n).to.equal(100);
    } finally { await c.close(); }
  });
});

describe('non-durable SOW queues', function () {
  const b = useBroker();
  it('answer queries from storage, and leave nothing behind for a queue that reuses their id after a restart', async function () {
    const tb = b.get();
    const nd = { address: 'sow.transient', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', durable: false } };
    await send(tb.url, nd, [{ body: JSON.stringify({ id: 'a', v: 1 }) }]);
    expect((await sowQuery(tb.url, 'sow.transient')).records.map(keyOf)).to.deep.equal(['a']);
    await tb.restart();
    const url = tb.broker.urls[0];
    expect(tb.broker.nodes.get('sow.transient')).to.equal(undefined);
    await send(url, { address: 'sow.next', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } }, [{ body: JSON.stringify({ id: 'z', v: 1 }) }]);
    const q = await sowQuery(url, 'sow.next');
    expect(q.records.map(keyOf)).to.deep.equal(['z']);
    expect(q.groupEnd).to.equal(1);
  });
});
