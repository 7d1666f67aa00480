/**
 * Codec audit (session 23): maps with an odd item count refused at receive (they broke every
 * later delivery of the message), a delivery that cannot be built no longer strands a list
 * message, a header delivery-count at 2^32-1 redelivered, SOW keys from bytes that are not
 * valid UTF-8, JSON content types, and what a connection close says about an empty transfer
 * or a null section.
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openSender, openReceiver, collect, createOnDemand, sleep, errorOf, r, type Conn, type Outcome } from '../support/client.js';
import { tmFilters, sowQuery, cmdOf, keyOf } from '../support/sow-client.js';
import * as F from '../support/amqp-frames.js';
import { RawClient, t } from '../support/amqp-frames.js';
import type { ListStructure } from '../../lib/core/queue/list-structure.js';

const H = (s: string) => Buffer.from(s.replace(/\s+/g, ''), 'hex');
const sec = (code: number, val: Buffer) => Buffer.concat([H('0053'), Buffer.from([code]), val]);
const str8 = (s: string | Buffer) => { const b = Buffer.isBuffer(s) ? s : Buffer.from(s); return Buffer.concat([Buffer.from([0xa1, b.length]), b]); };
const sym8 = (s: string) => { const b = Buffer.from(s); return Buffer.concat([Buffer.from([0xa3, b.length]), b]); };
const vbin8 = (b: Buffer) => Buffer.concat([Buffer.from([0xa0, b.length]), b]);
const list8 = (...items: Buffer[]) => { const c = Buffer.concat(items); return Buffer.concat([Buffer.from([0xc0, c.length + 1, items.length]), c]); };
/** A map8 holding exactly these items (an odd number of them if asked). */
const items8 = (...items: Buffer[]) => { const c = Buffer.concat(items); return Buffer.concat([Buffer.from([0xc1, c.length + 1, items.length]), c]); };
const propsCT = (ct: string) => sec(0x73, list8(H('40'), H('40'), H('40'), H('40'), H('40'), H('40'), sym8(ct)));
const ODD = items8(sym8('x-opt-a'), str8('A'), sym8('x-opt-dangling'));

/** Sends encoded messages as they are (format 0) and resolves with their outcomes. */
async function sendRaw(conn: Conn, target: unknown, payloads: Buffer[]): Promise<Outcome[]> {
  const s = await openSender(conn, target);
  return Promise.all(payloads.map((p) => new Promise<Outcome>((res) => {
    const d = s.send(p, undefined, 0);
    for (const state of ['accepted', 'rejected', 'released', 'modified']) {
      s.on(state, (ctx: any) => { if (ctx.delivery === d) res({ state, condition: ctx.delivery.remote_state?.error?.condition, description: ctx.delivery.remote_state?.error?.description }); });
    }
  })));
}

describe('codec audit (session 23)', function () {
  this.timeout(30000);
  const b = useBroker();
  let conn: Conn;
  beforeEach(async () => { conn = await connect(b.get().url); });
  afterEach(async () => { await conn.close(); });
  const sowTarget = (q: string) => createOnDemand(q, { 'sow.key': '/id' });

  describe('maps with an odd item count', function () {
    for (const [code, name] of [[0x71, 'delivery-annotations'], [0x72, 'message-annotations'], [0x74, 'application-properties'], [0x78, 'footer']] as const) {
      it(`a ${name} map with an odd count is rejected with amqp:decode-error naming the section; nothing is stored`, async function () {
        const q = `odd.${name}`;
        const msg = code === 0x78 ? Buffer.concat([sec(0x77, str8('x')), sec(code, ODD)]) : Buffer.concat([sec(code, ODD), sec(0x77, str8('x'))]);
        const [o] = await sendRaw(conn, createOnDemand(q, {}), [msg]);
        expect(o.state).to.equal('rejected');
        expect(o.condition).to.equal('amqp:decode-error');
        expect(o.description).to.equal(`the ${name} section is a map with an odd number of items (3): a map holds key-value pairs [AMQP 1.6.23]; nothing was stored`);
        expect(b.get().broker.nodes.get(q)!.structure.stats().depth).to.equal(0);
      });
    }

    it('one such publish to a SOW queue leaves its subscribers attached and its sow queries answering', async function () {
      const q = 'odd.sow';
      expect((await sendRaw(conn, sowTarget(q), [sec(0x77, str8('{"id":"a","v":0}'))]))[0].state).to.equal('accepted');
      const sub = await openReceiver(conn, { address: q, filter: tmFilters({ command: 'sow_and_subscribe' }) });
      const first = await collect(sub, { idleMs: 300 });
      expect(first.map(cmdOf)).to.deep.equal(['group_begin', 'sow', 'group_end']);
      const later = collect(sub, { idleMs: 500 });
      const [o] = await sendRaw(conn, { address: q }, [Buffer.concat([sec(0x72, ODD), sec(0x77, str8('{"id":"b","v":1}'))])]);
      expect(o.condition).to.equal('amqp:decode-error');
      const [ok] = await sendRaw(conn, { address: q }, [sec(0x77, str8('{"id":"c","v":2}'))]);
      expect(ok.state).to.equal('accepted');
      const more = await later;
      expect(more.map(keyOf)).to.deep.equal(['c']);
      expect(sub.is_open()).to.equal(true);
      const { records } = await sowQuery(b.get().url, q);
      expect(records.map(keyOf).sort()).to.deep.equal(['a', 'c']);
    });
  });

  describe('a list-queue delivery that cannot be built', function () {
    it('a header delivery-count of 2^32-1 released once is redelivered at 2^32-1 (the encoder refused 2^32: the message was stranded)', async function () {
      const q = 'strand.dc';
      const hdr = sec(0x70, list8(H('40'), H('40'), H('40'), H('40'), H('70ffffffff')));
      expect((await sendRaw(conn, createOnDemand(q, {}), [Buffer.concat([hdr, sec(0x77, str8('A'))])]))[0].state).to.equal('accepted');
      const r1 = await openReceiver(conn, { address: q });
      const got1 = await collect(r1, { count: 1, settle: () => 'modify' });
      expect(got1).to.have.length(1);
      r1.close();
      await sleep(100);
      const r2 = await openReceiver(conn, { address: q });
      const got2 = await collect(r2, { count: 1, idleMs: 1000 });
      expect(got2, 'redelivered').to.have.length(1);
      expect(got2[0].message.delivery_count).to.equal(0xffffffff);
      expect(got2[0].message.body).to.equal('A');
    });

    it('a failure of this link\'s delivery (its annotations) releases the message to other consumers and detaches only that link, with amqp:internal-error naming the cause', async function () {
      const q = 'strand.link';
      expect((await sendRaw(conn, createOnDemand(q, {}), [sec(0x77, str8('{"v":1}'))]))[0].state).to.equal('accepted');
      const st = b.get().broker.nodes.get(q)!.structure as ListStructure;
      const [e] = [...st.list.live()];
      // Section bounds that make the annotations rewrite throw (a stand-in for stored bytes the
      // rewrite cannot read); the plain copy-through is unaffected.
      Object.defineProperty(e, 'sections', { value: { annotations: [0, 3], restStart: 3 } });
      const filtered = await openReceiver(conn, { address: q, filter: tmFilters({ filter: '/v = 1' }) });
      let err: { condition?: string; description?: string } = {};
      const detached = new Promise<void>((res) => filtered.once('receiver_close', () => { err = errorOf(filtered.error); res(); }));
      filtered.add_credit(5);
      await Promise.race([detached, sleep(2000)]);
      expect(err.condition).to.equal('amqp:internal-error');
      expect(err.description).to.match(/^a message \(SCN \d+\) could not be encoded for this link \(.+\); link detached, the message stays in the queue$/);
      expect(e.acquiredBy, 'not left acquired').to.equal(null);
      const plain = await openReceiver(conn, { address: q });
      const got = await collect(plain, { count: 1, idleMs: 1000 });
      expect(got.map((m) => m.message.body)).to.deep.equal(['{"v":1}']);
    });

    it('a message that cannot be sent to anyone (its own bytes) is taken out of the queue and logged; the link and the messages after it go on', async function () {
      const q = 'strand.own';
      expect((await sendRaw(conn, createOnDemand(q, {}), [sec(0x77, str8('bad')), sec(0x77, str8('good'))])).map((o) => o.state)).to.deep.equal(['accepted', 'accepted']);
      const st = b.get().broker.nodes.get(q)!.structure as ListStructure;
      const [e] = [...st.list.live()];
      // A header the rewrite cannot read, needed because the message was redelivered.
      Object.defineProperty(e, 'header', { get() { throw new Error('unreadable header (test)'); } });
      e.deliveryCount = 1;
      const rcv = await openReceiver(conn, { address: q });
      const got = await collect(rcv, { idleMs: 800 });
      expect(got.map((m) => m.message.body)).to.deep.equal(['good']);
      expect(rcv.is_open()).to.equal(true);
      expect(e.removed).to.equal(true);
      expect(st.stats().depth).to.equal(0);
    });
  });

  describe('SOW keys from bytes that are not valid UTF-8', function () {
    const bad = (b: number) => Buffer.concat([Buffer.from('{"id":"k'), Buffer.from([b]), Buffer.from('"}')]);
    it('data bodies with different invalid bytes are refused (they used to merge into one record "k\\ufffd")', async function () {
      const q = 'utf8.data';
      const outs = await sendRaw(conn, sowTarget(q), [0xff, 0xfe].map((x) => Buffer.concat([propsCT('application/json'), sec(0x75, vbin8(bad(x)))])));
      for (const o of outs) {
        expect(o.condition).to.equal('amqp:decode-error');
        expect(o.description).to.equal(`queue ${q}: cannot read the SOW key (sow.key=/id): body is not valid UTF-8`);
      }
      expect((await sowQuery(b.get().url, q)).records).to.have.length(0);
    });

    it('amqp-value strings and an x-opt-tm-key with invalid bytes are refused; U+FFFD sent as UTF-8 is a key like any other', async function () {
      const q = 'utf8.value';
      const outs = await sendRaw(conn, sowTarget(q), [
        sec(0x77, str8(bad(0xc3))),
        sec(0x77, str8(bad(0x80))),
        sec(0x77, str8('{"id":"k\ufffd"}')),
        Buffer.concat([sec(0x72, items8(sym8('x-opt-tm-op'), sym8('delete'), sym8('x-opt-tm-key'), str8(Buffer.from([0x6b, 0xff])))), sec(0x77, str8('{}'))]),
      ]);
      expect(outs[0].condition).to.equal('amqp:decode-error');
      expect(outs[0].description).to.equal(`queue ${q}: the amqp-value body section holds a string that is not valid UTF-8 (read with U+FFFD for the invalid bytes, distinct SOW keys would share one record); nothing was stored`);
      expect(outs[1].condition).to.equal('amqp:decode-error');
      expect(outs[2].state).to.equal('accepted');
      expect(outs[3].condition, outs[3].description).to.equal('amqp:decode-error');
      expect(outs[3].description).to.match(/the message-annotations section holds a string that is not valid UTF-8/);
      const { records } = await sowQuery(b.get().url, q);
      expect(records.map(keyOf)).to.deep.equal(['k\ufffd']);
    });

    it('content types compare case-insensitively; +json binaries read as data; gzip is refused', async function () {
      const q = 'ct.sow';
      const outs = await sendRaw(conn, sowTarget(q), [
        Buffer.concat([propsCT('Application/JSON'), sec(0x75, vbin8(Buffer.from('{"id":"a"}')))]),
        Buffer.concat([propsCT('application/vnd.x+json'), sec(0x77, vbin8(Buffer.from('{"id":"b"}')))]),
        Buffer.concat([sec(0x73, list8(H('40'), H('40'), H('40'), H('40'), H('40'), H('40'), sym8('application/json'), sym8('gzip'))), sec(0x75, vbin8(Buffer.from('{"id":"c"}')))]),
      ]);
      expect(outs.slice(0, 2).map((o) => o.state)).to.deep.equal(['accepted', 'accepted']);
      expect(outs[2].condition).to.equal('amqp:decode-error');
      expect(outs[2].description).to.match(/content-encoding "gzip" is not read/);
    });
  });

  describe('connection close descriptions', function () {
    let raw: RawClient | undefined;
    afterEach(() => { raw?.destroy(); raw = undefined; });
    const attachSender = (q: string) => F.attach({ name: t.str('s-' + q), handle: t.uint(0), role: t.bool(false), source: F.source(), target: F.target({ address: t.str(q) }) });
    async function closeFor(payload: Buffer): Promise<{ condition?: string; description?: string }> {
      raw = await RawClient.connect(b.get().port);
      await raw.handshake();
      raw.write(attachSender('close.desc'));
      await raw.waitFor((x) => !!x.find('flow'), 3000);
      raw.write(F.transfer({ handle: t.uint(0), payload }));
      await raw.waitFor((x) => !!x.find('close'), 3000);
      return raw.find('close')?.error ?? {};
    }
    it('a transfer with no payload says so (not "Cannot read properties of undefined")', async function () {
      const e = await closeFor(Buffer.alloc(0));
      expect(e.condition).to.equal('amqp:decode-error');
      expect(e.description).to.equal('malformed frame: transfer with no payload: a message needs at least one section [AMQP 3.2]');
    });
    it('a message-annotations section encoded as null says which section and what it should be', async function () {
      const e = await closeFor(Buffer.concat([H('00537240'), sec(0x77, str8('x'))]));
      expect(e.condition).to.equal('amqp:decode-error');
      expect(e.description).to.equal('malformed frame: message-annotations section is null, expected a map [AMQP 3.2]');
    });
  });
});

void r;
