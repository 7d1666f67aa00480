/**
 * The hostile-input audit's validation defects in the SOW, checkpoint and management
 * extensions (docs/sow.md "What a publish must hold", "Delta merge", "SOW-DELETE";
 * docs/decisions.md). Bad input gets a clear error and loses nothing; each case failed on the
 * code before its fix. Real broker on an ephemeral port, rhea client.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { r, connect, openSender, openReceiver, collect, send, sendAll, errorOf, isNullTerminus, sleep, type Conn } from '../support/client.js';
import { tmFilters, keyOf, bodyJson, sowQuery } from '../support/sow-client.js';
import { listSubscriptions } from '../../lib/ext/checkpoints/index.js';
import { SowStructure } from '../../lib/ext/sow/sow-structure.js';

const T = r.types;
const sowQ = (address: string, args: Record<string, unknown> = {}) => ({ address, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id', ...args } });
const rec = (o: Record<string, unknown>) => ({ body: JSON.stringify(o) });

/** Attaches a receiver; the reply's source, or the detach error. */
function attach(c: Conn, source: any, opts: Record<string, unknown> = {}): Promise<{ error?: { condition?: string; description?: string }; link: any }> {
  return new Promise((resolve) => {
    const link = c.connection.open_receiver({ source, credit_window: 0, autoaccept: false, ...opts });
    link.once('receiver_open', () => { if (!isNullTerminus(link.remote.attach.source)) resolve({ link }); });
    link.once('receiver_close', () => resolve({ error: errorOf(link.remote.detach?.error ?? link.error), link }));
    link.once('receiver_error', () => resolve({ error: errorOf(link.error), link }));
  });
}

/** One `$management` request; its status, description and body. */
async function mgmt(url: string, props: Record<string, unknown>, body: unknown, extra: Record<string, unknown> = {}): Promise<{ status: number; description: string; body: any }> {
  const c = await connect(url);
  try {
    const replies = await openReceiver(c, { dynamic: true });
    const s = await openSender(c, { address: '$management' });
    const got = collect(replies, { count: 1, idleMs: 3000 });
    await sendAll(s, [{ message_id: `m-${Math.random()}`, reply_to: replies.remote.attach.source.address, application_properties: { type: 'queue', ...props }, body, ...extra }]);
    const [res] = await got;
    const ap = res.message.application_properties;
    return { status: ap.statusCode, description: String(ap.statusDescription), body: res.message.body };
  } finally { await c.close(); }
}

const keys = async (url: string, q: string) => (await sowQuery(url, q)).records.map(keyOf).sort();

describe('hostile input: validation in the SOW, checkpoint and management extensions', function () {
  this.timeout(60000);
  let tb: TestBroker;
  beforeEach(async () => { tb = await startTestBroker(); });
  afterEach(async () => { await tb.stop(); });

  it('1: SOW-DELETE needs a map body with a filter or all: true; anything else is 400 and deletes nothing', async function () {
    const q = 'iv.sowdel';
    await send(tb.url, sowQ(q), ['k0', 'k1', 'k2', 'k3', 'k4'].map((id, v) => rec({ id, v })));
    const refused: Array<[unknown, RegExp, Record<string, unknown>?]> = [
      ["/id = 'k1'", /body must be an amqp-value map.*got a string/],
      [{ Filter: "/id = 'k1'" }, /unknown key "Filter"/],
      [{ filtre: "/id = 'k1'" }, /unknown key "filtre"/],
      [T.wrap_list(["/id = 'k1'"]), /got a list/],
      [r.message.data_section(Buffer.from(JSON.stringify({ filter: "/id = 'k1'" }))), /got binary/, { content_type: 'application/json' }],
      [{ filter: null }, /filter must be a non-empty content filter string, got null/],
      [{ filter: '' }, /got an empty string/],
      [{ filter: 42 }, /got number/],
      [{ filter: { expr: "/id = 'k1'" } }, /got object/],
      [{}, /give filter .* or all: true/],
      [{ filter: '/id = ' }, /filter: expected .* at 6/],
    ];
    for (const [body, why, extra] of refused) {
      const res = await mgmt(tb.url, { operation: 'SOW-DELETE', name: q }, body, extra);
      expect(res.status, JSON.stringify(body)).to.equal(400);
      expect(res.description, JSON.stringify(body)).to.match(why).and.include(q).and.include('nothing was deleted');
      expect(await keys(tb.url, q), `after ${JSON.stringify(body)}`).to.have.length(5);
    }
    const one = await mgmt(tb.url, { operation: 'SOW-DELETE', name: q }, { filter: "/id = 'k1'" });
    expect([one.status, one.body]).to.deep.equal([200, { count: 1 }]);
    const all = await mgmt(tb.url, { operation: 'SOW-DELETE', name: q }, { all: true });
    expect([all.status, all.body]).to.deep.equal([200, { count: 4 }]);
    expect(await keys(tb.url, q)).to.deep.equal([]);
  });

  it('2: a checkpoint with an SCN ahead of the head is refused naming the field (it skipped live events)', async function () {
    const q = 'iv.cp';
    await send(tb.url, sowQ(q), [1, 2, 3, 4, 5].map((v) => rec({ id: `k${v % 3}`, v })));
    const c = await connect(tb.url);
    try {
      const cases: Array<[Record<string, unknown>, RegExp]> = [
        [{ consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: 1, prevScn: 1, windowOffset: -1, bootstrap_start_scn: 1, bootstrap_target_scn: 2, catchup_offset: 1000 }, /catchup_offset 1000 is ahead of the head of iv\.cp \(5\)/],
        [{ consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: 1, prevScn: 1, windowOffset: -1, bootstrap_start_scn: 1000 }, /bootstrap_start_scn 1000 is ahead/],
        [{ consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: 1000, prevScn: 1000, windowOffset: -1, bootstrap_start_scn: 1000 }, /windowScn 1000 is ahead/],
        [{ consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: 1, prevScn: 1, windowOffset: -1, bootstrap_start_scn: 3, bootstrap_target_scn: 1 }, /bootstrap_target_scn 1 is before bootstrap_start_scn 3/],
      ];
      for (const [cp, why] of cases) {
        const res = await attach(c, { address: q, filter: tmFilters({ checkpoint: cp }) });
        expect(res.error?.condition, JSON.stringify(cp)).to.equal('amqp:invalid-field');
        expect(res.error?.description, JSON.stringify(cp)).to.match(why);
      }
      // A catch-up within the head still resumes, and sees what is published next.
      const ok = await openReceiver(c, { address: q, filter: tmFilters({ checkpoint: { consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: 1, prevScn: 1, windowOffset: -1, bootstrap_start_scn: 1, bootstrap_target_scn: 5, catchup_offset: 5 } }) });
      const got = collect(ok, { idleMs: 1500, credit: 20 });
      await send(tb.url, q, [rec({ id: 'k9', v: 9 })]);
      expect((await got).map(keyOf)).to.include('k9');
    } finally { await c.close(); }
  });

  it('3: conflation_key must be /paths and conflation an interval a timer can keep', async function () {
    const q = 'iv.conf';
    await send(tb.url, sowQ(q), [rec({ id: 'a', sym: 'X', v: 1 })]);
    const c = await connect(tb.url);
    try {
      const cases: Array<[Record<string, unknown>, RegExp]> = [
        [{ conflation: '500ms', conflation_key: ['not a path'] }, /conflation_key\[0\] "not a path" is not a \/path/],
        [{ conflation: '500ms', conflation_key: [''] }, /conflation_key\[0\] "" is not a \/path/],
        [{ conflation: '500ms', conflation_key: ['/a[0]'] }, /array index/],
        [{ conflation: 3e9 }, /conflation 3000000000 is 3000000000000 ms, longer than the longest interval .*2147483647 ms/],
        [{ conflation: '3000000000ms' }, /longer than/],
        [{ conflation: T.wrap_double(NaN) }, /got NaN/],
        [{ conflation: T.wrap_int(-1) }, /got -1/],
        [{ conflation: T.wrap_double(1.5) }, /got 1\.5/],
      ];
      for (const [options, why] of cases) {
        const res = await attach(c, { address: q, filter: tmFilters({ command: 'subscribe', options }) });
        expect(res.error?.condition, JSON.stringify(options)).to.equal('amqp:invalid-field');
        expect(res.error?.description, JSON.stringify(options)).to.match(why);
      }
      // A real path conflates by its value: one message per /sym value per interval.
      const rcv = await openReceiver(c, { address: q, filter: tmFilters({ command: 'subscribe', options: { conflation: '300ms', conflation_key: ['/sym'] } }) });
      const got = collect(rcv, { idleMs: 1200, credit: 20 });
      await send(tb.url, q, [rec({ id: 'a', sym: 'X', v: 2 }), rec({ id: 'b', sym: 'X', v: 3 }), rec({ id: 'c', sym: 'Y', v: 4 })]);
      expect((await got).map((m) => bodyJson(m).v).sort()).to.deep.equal([3, 4]);
    } finally { await c.close(); }
  });

  it('4: a SOW key that is not well-formed Unicode is rejected, so no record is lost on disk', async function () {
    const q = 'iv.sur';
    const out = await send(tb.url, sowQ(q), [
      { body: '{"id":"\\ufffd-order-1","owner":"alice"}' },
      { body: '{"id":"\\ud800-order-1","owner":"mallory"}' },
      { content_type: 'application/json', body: Buffer.from('{"id":"\\udfff-order-1","owner":"eve"}') },
    ]);
    expect(out.map((o) => o.state)).to.deep.equal(['accepted', 'rejected', 'rejected']);
    for (const o of out.slice(1)) {
      expect(o.condition).to.equal('amqp:invalid-field');
      expect(o.description).to.include(`queue ${q}`).and.include('/id').and.include('not well-formed Unicode');
    }
    await tb.restart();
    const after = await sowQuery(tb.broker.urls[0], q);
    expect(after.records.map((m) => bodyJson(m))).to.deep.equal([{ id: '\ufffd-order-1', owner: 'alice' }]);
  });

  it('5: a delta changes only the fields it names: map entries keep their AMQP types, JSON text its digits', async function () {
    const q = 'iv.delta';
    const typed: Record<string, unknown> = {
      ts: T.wrap_timestamp(1700000000123), big: T.wrap_ulong(Buffer.from('1000000000000001', 'hex')), bin: T.wrap_binary(Buffer.from([1, 2, 3])),
      sym: T.wrap_symbol('SYM'), dbl: T.wrap_double(1.0), u: T.wrap_uuid(Buffer.alloc(16, 7)),
    };
    const delta = (body: string) => ({ message_annotations: { 'x-opt-tm-op': 'delta' }, body });
    const out = await send(tb.url, sowQ(q), [
      { body: T.wrap_map({ id: 'm', ...typed, px: 1 }) }, delta('{"id":"m","px":5}'),
      { body: '{"id":"n","big":12345678901234567890,"f":1.10}' }, delta('{"id":"n","px":1}'),
    ]);
    expect(out.map((o) => o.state)).to.deep.equal(['accepted', 'accepted', 'accepted', 'accepted']);
    // The stored record holds each untouched entry exactly as published.
    const stored = (tb.broker.nodes.get(q)!.structure as SowStructure).records.get('m')!.bytes;
    const enc = (v: unknown) => { const w = new T.Writer(); w.write(v); return w.toBuffer() as Buffer; };
    for (const [k, v] of Object.entries(typed)) expect(stored.includes(Buffer.concat([enc(T.wrap_string(k)), enc(v)])), k).to.equal(true);
    const { records } = await sowQuery(tb.url, q);
    const m = records.find((x) => keyOf(x) === 'm')!.message.body;
    expect(m.ts).to.be.instanceOf(Date);
    expect(m.ts.getTime()).to.equal(1700000000123);
    expect(Buffer.from(m.big).toString('hex')).to.equal('1000000000000001');
    expect([...m.bin]).to.deep.equal([1, 2, 3]);
    expect(m.px).to.equal(5);
    const n = records.find((x) => keyOf(x) === 'n')!.message.body;
    expect(n).to.equal('{"id":"n","big":12345678901234567890,"f":1.10,"px":1}');
  });

  it('6: delete with an x-opt-tm-key that is not a string or number is rejected and deletes nothing', async function () {
    const q = 'iv.delkey';
    await send(tb.url, sowQ(q), [rec({ id: '1,2' }), rec({ id: '[object Object]' }), rec({ id: 'true' }), rec({ id: '7' })]);
    const del = (key: unknown) => ({ message_annotations: { 'x-opt-tm-op': 'delete', 'x-opt-tm-key': key }, body: null });
    const out = await send(tb.url, q, [del(T.wrap_list([1, 2])), del({ a: 1 }), del(true), del(''), del(7)]);
    expect(out.map((o) => o.state)).to.deep.equal(['rejected', 'rejected', 'rejected', 'rejected', 'accepted']);
    for (const [o, why] of [[out[0], 'got a list'], [out[1], 'got a map'], [out[2], 'got a boolean'], [out[3], 'is empty']] as const) {
      expect(o.condition, why).to.equal('amqp:invalid-field');
      expect(o.description, why).to.include(`queue ${q}: x-opt-tm-key`).and.include(why).and.include('nothing was deleted');
    }
    expect(await keys(tb.url, q)).to.deep.equal(['1,2', '[object Object]', 'true']);
  });

  it('7: a body nested deeper than 256 levels is rejected at publish; 256 levels are accepted and merge', async function () {
    const q = 'iv.deep';
    const nested = (d: number) => '['.repeat(d) + ']'.repeat(d);
    const out = await send(tb.url, sowQ(q), [
      { body: `{"id":"d","x":${nested(200_000)}}` },
      { content_type: 'application/json', body: Buffer.from(`{"id":"j","x":${nested(256)}}`) },
      { body: `{"id":"e","x":${nested(255)}}` },
      { message_annotations: { 'x-opt-tm-op': 'delta' }, body: '{"id":"e","px":1}' },
      { message_annotations: { 'x-opt-tm-op': 'delta' }, body: `{"id":"e","y":${nested(256)}}` },
    ]);
    expect(out.map((o) => o.state)).to.deep.equal(['rejected', 'rejected', 'accepted', 'accepted', 'rejected']);
    for (const o of [out[0], out[1], out[4]]) {
      expect(o.condition).to.equal('amqp:decode-error');
      expect(o.description).to.include(`queue ${q}`).and.include('JSON nested too deeply (more than 256 levels');
    }
    const { records } = await sowQuery(tb.url, q);
    expect(records.map(keyOf)).to.deep.equal(['e']);
    expect(records[0].message.body).to.equal(`{"id":"e","x":${nested(255)},"px":1}`);
  });

  it('8: a time bookmark with a field out of range is malformed, not moved to another instant', async function () {
    const q = 'iv.bm';
    await send(tb.url, sowQ(q), [rec({ id: 'a' })]);
    const c = await connect(tb.url);
    try {
      for (const [bm, field] of [['20261301T000000Z', 'month 13'], ['20260230T000000Z', 'day 30'], ['20260101T250000Z', 'hour 25'], ['20260101T000060Z', 'second 60'],
        ['2026-02-30T00:00:00Z', 'day 30'], ['2026-01-01T24:00:00Z', 'hour 24']]) {
        const res = await attach(c, { address: q, filter: tmFilters({ command: 'subscribe', bookmark: bm }) });
        expect(res.error?.condition, bm).to.equal('amqp:invalid-field');
        expect(res.error?.description, bm).to.include(`malformed bookmark "${bm}"`).and.include(field);
      }
      const ok = await attach(c, { address: q, filter: tmFilters({ command: 'subscribe', bookmark: '20240229T000000Z' }) });
      expect(ok.error).to.equal(undefined);
    } finally { await c.close(); }
  });

  it('9: a durable subscription attached a second time takes over; the first link is detached with amqp:link:stolen', async function () {
    const q = 'iv.dur';
    await send(tb.url, sowQ(q), [rec({ id: 'a', v: 1 }), rec({ id: 'b', v: 1 })]);
    const source = { address: q, durable: 2, expiry_policy: 'never', filter: tmFilters({ command: 'subscribe', bookmark: '0' }) };
    const a = await connect(tb.url, { container_id: 'iv-dup' });
    const b = await connect(tb.url, { container_id: 'iv-dup' });
    try {
      const ra = await openReceiver(a, source, { name: 'dur' });
      const stolen = new Promise<{ condition?: string; description?: string }>((res) => ra.once('receiver_close', () => res(errorOf(ra.remote.detach?.error ?? ra.error))));
      const gotA: string[] = [];
      ra.on('message', (ctx: any) => {
        const m = { message: ctx.message, delivery: ctx.delivery };
        if (keyOf(m)) gotA.push(`${keyOf(m)}${bodyJson(m).v}`); // (not the completed marker)
        ctx.delivery.accept();
      });
      ra.add_credit(10);
      await sleep(500);
      expect(gotA).to.deep.equal(['a1', 'b1']);
      const rb = await openReceiver(b, source, { name: 'dur' });
      const err = await Promise.race([stolen, sleep(3000).then(() => ({ condition: 'none: the first link is still attached', description: '' }))]);
      expect(err.condition).to.equal('amqp:link:stolen');
      expect(err.description).to.include('iv-dup/dur').and.include(q);
      const gotB = collect(rb, { idleMs: 1000, credit: 10 });
      await send(tb.url, q, [rec({ id: 'a', v: 2 })]);
      expect((await gotB).filter(keyOf).map((m) => `${keyOf(m)}${bodyJson(m).v}`)).to.deep.equal(['a2']);
      expect(gotA, 'the stolen link gets nothing more').to.deep.equal(['a1', 'b1']);
      expect(listSubscriptions(tb.broker).map((s) => [s.container, s.link, s.queue]), 'the subscription outlives the stolen link').to.deep.equal([['iv-dup', 'dur', q]]);
    } finally { await a.close(); await b.close(); }
  });

  it('10: management names and bodies are checked, not coerced', async function () {
    await send(tb.url, 'iv.ctl', [{ body: 'keep me' }]);
    const bad: Array<[Record<string, unknown>, unknown, RegExp]> = [
      [{ operation: 'CREATE', name: 'iv.args.list' }, { arguments: ['sow.key', '/id'] }, /arguments must be a map of queue arguments, got a list/],
      [{ operation: 'CREATE', name: 'iv.args.str' }, { arguments: 'sow.key=/id' }, /arguments must be a map .*got a string/],
      [{ operation: 'CREATE', name: 'iv.body.str' }, 'durable=false', /CREATE body must be a map/],
      [{ operation: 'CREATE', name: 'iv.both' }, { arguments: { 'sow.key': '/id' }, 'qpid.max_count': 5 }, /not both .*qpid\.max_count/],
      [{ operation: 'CREATE', name: 123 }, {}, /name must be a string, got a number/],
      [{ operation: 'PURGE', name: T.wrap_list(['iv.ctl']) }, {}, /name must be a string, got a list/],
      [{ operation: 'READ', name: T.wrap_binary(Buffer.from('iv.ctl')) }, {}, /name must be a string, got binary/],
      [{ operation: 'QUERY' }, { prefix: 5 }, /prefix must be a string/],
    ];
    for (const [props, body, why] of bad) {
      const res = await mgmt(tb.url, props, body);
      expect(res.status, JSON.stringify(props)).to.equal(400);
      expect(res.description, JSON.stringify(props)).to.match(why);
    }
    for (const n of ['iv.args.list', 'iv.args.str', 'iv.body.str', 'iv.both', '123']) expect(tb.broker.nodes.get(n), n).to.equal(undefined);
    expect((await mgmt(tb.url, { operation: 'READ', name: 'iv.ctl' }, {})).body.depth, 'PURGE with a list name purged nothing').to.equal(1);
    const yes = await mgmt(tb.url, { operation: 'CREATE', name: 'iv.dur.yes' }, { durable: 'yes' });
    expect([yes.status, yes.body.durable]).to.deep.equal([201, true]);
    const made = await mgmt(tb.url, { operation: 'CREATE', name: 'iv.args.ok' }, { durable: true, arguments: { 'sow.key': '/id' } });
    expect([made.status, made.body.arguments]).to.deep.equal([201, { 'sow.key': '/id' }]);
  });

  // Needs the lib/core change described in the session report (Queue.markDeleted passing
  // amqp:resource-deleted to QueueStructure.close, ListStructure.close handing it to its
  // sinks, and sow-consumer.ts passing its subscriber close error to the sink). Enable then.
  it('10: DELETE of a queue with consumers detaches them with amqp:resource-deleted naming the queue', async function () {
    await send(tb.url, 'iv.del.plain', [{ body: 'x' }]);
    await send(tb.url, sowQ('iv.del.sow'), [rec({ id: 'a' })]);
    const c = await connect(tb.url);
    try {
      for (const q of ['iv.del.plain', 'iv.del.sow']) {
        const rcv = await openReceiver(c, { address: q });
        const closed = new Promise<{ condition?: string; description?: string }>((res) => rcv.once('receiver_close', () => res(errorOf(rcv.remote.detach?.error ?? rcv.error))));
        await collect(rcv, { count: 1, idleMs: 1000 });
        expect((await mgmt(tb.url, { operation: 'DELETE', name: q }, {})).status).to.equal(204);
        const err = await closed;
        expect(err.condition, q).to.equal('amqp:resource-deleted');
        expect(err.description, q).to.equal(`queue ${q} was deleted`);
      }
    } finally { await c.close(); }
  });

  it('10c: a producer whose queue was deleted gets its message rejected and its link detached with amqp:resource-deleted', async function () {
    // It stayed attached and had every later message rejected (20000 of 20000 in an audit).
    const q = 'iv.del.producer';
    const c = await connect(tb.url);
    try {
      const snd = await openSender(c, q);
      expect((await sendAll(snd, [{ body: 'kept' }]))[0].state).to.equal('accepted');
      expect((await mgmt(tb.url, { operation: 'DELETE', name: q }, {})).status).to.equal(204);
      const closed = new Promise<{ condition?: string; description?: string }>((res) => snd.once('sender_close', () => res(errorOf(snd.remote.detach?.error ?? snd.error))));
      const out = await sendAll(snd, [{ body: 'after' }]);
      expect([out[0].state, out[0].condition]).to.deep.equal(['rejected', 'amqp:resource-deleted']);
      const err = await closed;
      expect(err.condition).to.equal('amqp:resource-deleted');
      expect(err.description).to.include(`queue ${q} was deleted`);
    } finally { await c.close(); }
    expect(tb.broker.nodes.get(q), 'not re-created by the refused message').to.equal(undefined);
  });

  it('10b: a sow_and_subscribe link still in its snapshot is detached too when its queue is deleted', async function () {
    // Links subscribed to their SOW queue only once the snapshot was sent: one deleted
    // mid-snapshot stayed attached (and kept the deleted queue in memory) until its client left.
    const q = 'iv.del.snap';
    await send(tb.url, sowQ(q), Array.from({ length: 50 }, (_, i) => rec({ id: `k${i}` })));
    const c = await connect(tb.url);
    try {
      const rcv = await openReceiver(c, { address: q, filter: tmFilters({ command: 'sow_and_subscribe' }) }, { credit_window: 0 });
      const closed = new Promise<{ condition?: string; description?: string }>((res) => rcv.once('receiver_close', () => res(errorOf(rcv.remote.detach?.error ?? rcv.error))));
      const got = collect(rcv, { count: 3, idleMs: 1000, credit: 3 });
      expect(await got).to.have.length(3); // group_begin and two records: mid-snapshot, no more credit
      expect((await mgmt(tb.url, { operation: 'DELETE', name: q }, {})).status).to.equal(204);
      const err: { condition?: string; description?: string } = await Promise.race([closed, sleep(3000).then(() => ({ condition: 'still attached after 3 s' }))]);
      expect(err.condition).to.equal('amqp:resource-deleted');
      expect(err.description).to.equal(`queue ${q} was deleted`);
    } finally { await c.close(); }
  });
});
