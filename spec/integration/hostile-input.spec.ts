/**
 * Hostile input, table-driven (acceptance E.2, wire.md 1 and 8). Every case runs against
 * one broker while a control client on its own connection keeps publishing and receiving;
 * after each case the control must have seen no error, all its messages must round-trip,
 * and the broker must still accept a new connection. Byte-level cases use raw sockets and
 * hand-built frames (spec/support/amqp-frames.ts); the rest use the rhea client.
 */
import { expect } from 'chai';
import { useBroker, type TestBroker } from '../support/broker.js';
import { r, connect, openSender, openReceiver, sendAll, collect, sleep, type Conn } from '../support/client.js';
import * as F from '../support/amqp-frames.js';
import { RawClient, t, Code } from '../support/amqp-frames.js';

const LIMITS = {
  maxFrameSize: 65536, maxMessageSize: 16384, maxConnections: 1000, maxSessionsPerConnection: 16,
  maxLinksPerSession: 8, maxUnsettledPerLink: 1000, idleTimeoutMs: 60000, senderCredit: 100,
};
const USERS = { auth: { anonymous: 'loopback', users: { alice: { password: 'secret' } } } };

const FRAMING = ['amqp:connection:framing-error', 'amqp:decode-error'];

/** What a case may use. */
interface Ctx { tb: TestBroker; raw(): Promise<RawClient>; opened(): Promise<RawClient>; conn(): Promise<Conn> }
interface Case { layer: string; name: string; run(ctx: Ctx): Promise<void> }

// ---- assertions on a raw connection ------------------------------------------------------

/** The broker closed the connection: a close frame with one of `conditions` when given, then the socket ended. */
async function expectClose(c: RawClient, conditions?: string[]): Promise<void> {
  const closed = await c.waitClosed(3000);
  const close = c.find('close');
  if (conditions) {
    expect(close, `expected close with ${conditions.join('|')}; got ${JSON.stringify(c.frames.map((f) => f.name))}`).to.not.equal(undefined);
    expect(conditions, `close: ${close!.error?.description}`).to.include(close!.error?.condition);
  }
  expect(closed, 'socket should be closed by the broker').to.equal(true);
}

/** The socket ended without any AMQP frame (bad protocol header): at most our supported header came back. */
async function expectHeaderRefused(c: RawClient): Promise<void> {
  expect(await c.waitClosed(3000), 'socket should be closed').to.equal(true);
  for (const h of c.parser.headers) expect(['414d515000010000', '414d515003010000']).to.include(h.toString('hex'));
}

async function expectEnd(c: RawClient, condition: string): Promise<void> {
  const ok = await c.waitFor((x) => !!x.find('end') || !!x.find('close'), 3000);
  expect(ok, `expected end; got ${JSON.stringify(c.frames.map((f) => f.name))}`).to.equal(true);
  const e = c.find('end') ?? c.find('close');
  expect(e!.error?.condition).to.equal(condition);
}

async function expectDetach(c: RawClient, condition: string): Promise<F.ParsedFrame> {
  const ok = await c.waitFor((x) => !!x.find('detach') || !!x.find('close'), 3000);
  expect(ok, `expected detach; got ${JSON.stringify(c.frames.map((f) => f.name))}`).to.equal(true);
  const d = c.find('detach') ?? c.find('close');
  expect(d!.error?.condition, JSON.stringify(d)).to.equal(condition);
  return d!;
}

/** The broker answered an attach (accepted it or refused it with a detach), without dropping the connection. */
async function expectAttachAnswered(c: RawClient): Promise<void> {
  const ok = await c.waitFor((x) => !!x.find('attach') || !!x.find('close'), 3000);
  expect(ok).to.equal(true);
  expect(c.find('close'), 'no connection close for a link-level problem').to.equal(undefined);
}

async function saslOutcomeFailed(c: RawClient): Promise<void> {
  const ok = await c.waitFor((x) => !!x.find('saslOutcome'), 3000);
  expect(ok, 'sasl outcome expected').to.equal(true);
  const code = Number(c.find('saslOutcome')!.fields[0]);
  expect(code, 'sasl outcome code (1 = auth failure)').to.be.greaterThan(0);
  expect(await c.waitClosed(3000), 'connection closed after failed authentication').to.equal(true);
}

const latin = (s: string) => Buffer.from(s, 'latin1');
const receiverAttach = (name: string, src: unknown, handle = 0) => F.attach({ name: t.str(name), handle: t.uint(handle), role: t.bool(true), source: src, target: F.target() });
const senderAttach = (name: string, tgt: unknown, handle = 0) => F.attach({ name: t.str(name), handle: t.uint(handle), role: t.bool(false), source: F.source(), target: tgt });

/** rhea-client attach expected to be refused with `condition`; returns the description. */
async function refusedAttach(conn: Conn, open: () => Promise<unknown>, condition: string): Promise<string> {
  try { await open(); } catch (e: any) {
    expect(e.condition, e.message).to.equal(condition);
    return String(e.message);
  }
  expect.fail('attach should have been refused with ' + condition);
  void conn;
  return '';
}

// ---- the table ---------------------------------------------------------------------------

const cases: Case[] = [
  // --- protocol header ---
  { layer: 'header', name: 'HTTP request instead of the AMQP header', async run({ raw }) { const c = await raw(); c.write(latin('GET / HTTP/1.1\r\nHost: x\r\n\r\n')); await expectHeaderRefused(c); } },
  { layer: 'header', name: 'garbage before the AMQP header', async run({ raw }) { const c = await raw(); c.write(latin('\x00\x00junk'), F.AMQP_HEADER, F.open()); await expectHeaderRefused(c); } },
  { layer: 'header', name: 'wrong protocol id (7)', async run({ raw }) { const c = await raw(); c.write(latin('AMQP\x07\x01\x00\x00')); await expectHeaderRefused(c); } },
  { layer: 'header', name: 'wrong version (2.0.0)', async run({ raw }) { const c = await raw(); c.write(latin('AMQP\x00\x02\x00\x00')); await expectHeaderRefused(c); } },
  { layer: 'header', name: 'AMQP 0-9-1 header', async run({ raw }) { const c = await raw(); c.write(latin('AMQP\x00\x00\x09\x01')); await expectHeaderRefused(c); } },
  { layer: 'header', name: 'TLS ClientHello on the plain port', async run({ raw }) { const c = await raw(); c.write(Buffer.from('160301002c010000280303' + '00'.repeat(40), 'hex')); await expectHeaderRefused(c); } },
  { layer: 'header', name: 'half a header, then the client half-closes', async run({ raw }) { const c = await raw(); c.write(latin('AMQ')); c.socket.end(); expect(await c.waitClosed(3000)).to.equal(true); } },
  { layer: 'header', name: 'TLS header (id 2) without TLS configured', async run({ raw }) { const c = await raw(); c.write(latin('AMQP\x02\x01\x00\x00')); await expectHeaderRefused(c); } },

  // --- SASL layer ---
  { layer: 'sasl', name: 'SASL header then garbage', async run({ raw }) { const c = await raw(); c.write(F.SASL_HEADER, latin('xxxxxxxxxxxxxxxxxxxxxxxx')); expect(await c.waitClosed(3000)).to.equal(true); } },
  { layer: 'sasl', name: 'SASL PLAIN with a wrong password', async run({ raw }) { const c = await raw(); c.write(F.SASL_HEADER, F.saslInit('PLAIN', F.plainResponse('alice', 'wrong'))); await saslOutcomeFailed(c); } },
  { layer: 'sasl', name: 'SASL PLAIN for an unknown user', async run({ raw }) { const c = await raw(); c.write(F.SASL_HEADER, F.saslInit('PLAIN', F.plainResponse('mallory', 'x'))); await saslOutcomeFailed(c); } },
  { layer: 'sasl', name: 'SASL with an unknown mechanism', async run({ raw }) { const c = await raw(); c.write(F.SASL_HEADER, F.saslInit('GSSAPI', Buffer.from('x'))); await saslOutcomeFailed(c); } },
  { layer: 'sasl', name: 'SASL PLAIN with a malformed response (no NULs)', async run({ raw }) { const c = await raw(); c.write(F.SASL_HEADER, F.saslInit('PLAIN', Buffer.from('alicesecret'))); await saslOutcomeFailed(c); } },
  { layer: 'sasl', name: 'SASL frame claiming 4 GiB', async run({ raw }) { const c = await raw(); c.write(F.SASL_HEADER, Buffer.from('fffffff0', 'hex'), Buffer.alloc(4096)); expect(await c.waitClosed(3000)).to.equal(true); } },
  { layer: 'sasl', name: 'AMQP frame type inside the SASL layer', async run({ raw }) { const c = await raw(); c.write(F.SASL_HEADER, F.open()); expect(await c.waitClosed(3000)).to.equal(true); } },
  { layer: 'sasl', name: 'PLAIN with the right password still works (positive control)', async run({ raw }) {
    const c = await raw(); c.write(F.SASL_HEADER, F.saslInit('PLAIN', F.plainResponse('alice', 'secret')));
    expect(await c.waitFor((x) => !!x.find('saslOutcome'), 3000)).to.equal(true);
    expect(Number(c.find('saslOutcome')!.fields[0])).to.equal(0);
    c.write(F.AMQP_HEADER, F.open());
    expect(await c.waitFor((x) => !!x.find('open'), 3000)).to.equal(true);
  } },

  // --- framing ---
  { layer: 'frame', name: 'truncated frame, then the client half-closes', async run({ raw }) { const c = await raw(); c.write(F.AMQP_HEADER, F.open().subarray(0, 10)); await sleep(50); c.socket.end(); expect(await c.waitClosed(3000)).to.equal(true); } },
  { layer: 'frame', name: 'frame size > max-frame-size (declared, partial)', async run({ opened }) { const c = await opened(); c.write(F.frame(Buffer.alloc(64), { size: 200000 })); await expectClose(c, ['amqp:connection:framing-error']); } },
  { layer: 'frame', name: 'frame size 0xffffffff', async run({ opened }) { const c = await opened(); c.write(Buffer.from('ffffffff02000000', 'hex'), Buffer.alloc(1024)); await expectClose(c, ['amqp:connection:framing-error']); } },
  { layer: 'frame', name: 'complete frame larger than max-frame-size', async run({ opened }) { const c = await opened(); c.write(F.attach({ name: t.str('n'.repeat(70000)) })); await expectClose(c, ['amqp:connection:framing-error']); } },
  { layer: 'frame', name: 'frame size 4 (< 8)', async run({ opened }) { const c = await opened(); c.write(Buffer.from('0000000402000000', 'hex')); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'frame size 0', async run({ opened }) { const c = await opened(); c.write(Buffer.alloc(16)); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'doff 1 (< 2)', async run({ opened }) { const c = await opened(); c.write(F.frame(F.performative(Code.end, []), { doff: 1 })); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'doff 0', async run({ opened }) { const c = await opened(); c.write(F.frame(F.performative(Code.end, []), { doff: 0 })); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'doff pointing past the end of the frame', async run({ opened }) { const c = await opened(); c.write(F.frame(F.performative(Code.end, []), { doff: 2, size: 12 }).subarray(0, 12).fill(0xff, 4, 5)); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'unknown frame type 5', async run({ opened }) { const c = await opened(); c.write(F.frame(F.performative(Code.end, []), { type: 5 })); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'SASL frame type after open', async run({ opened }) { const c = await opened(); c.write(F.saslInit('PLAIN', F.plainResponse('alice', 'secret'))); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'body is not a described type', async run({ opened }) { const c = await opened(); c.write(F.frame(F.encodeValue([1, 2, 3]))); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'unknown performative descriptor 0x99', async run({ opened }) { const c = await opened(); c.write(F.amqp(0x99, [1, 2])); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'unknown symbolic descriptor', async run({ opened }) { const c = await opened(); c.write(F.amqp('evil:frame:list', [1])); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'invalid type code in the body', async run({ opened }) { const c = await opened(); c.write(F.frame(Buffer.from([0x00, 0x53, 0x17, 0xff, 0xff]))); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'list whose size exceeds the frame', async run({ opened }) { const c = await opened(); c.write(F.frame(Buffer.from([0x00, 0x53, 0x17, 0xd0, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x05]))); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'array claiming 2^32-1 zero-width elements (decoder bomb)', async run({ opened }) {
    // flow whose incoming-window is array32 { size 8, count 0xffffffff, element type null }
    const c = await opened(); c.write(F.frame(Buffer.from('005313d0000000130000000443f000000008ffffffff4043', 'hex')));
    await expectClose(c, FRAMING);
  } },
  { layer: 'frame', name: 'list claiming 2^32-1 elements', async run({ opened }) { const c = await opened(); c.write(F.frame(Buffer.from('005313d000000008ffffffff4343', 'hex'))); await expectClose(c, FRAMING); } },
  { layer: 'frame', name: 'heartbeats only are fine (positive control)', async run({ opened }) { const c = await opened(); c.write(F.heartbeat(), F.heartbeat(), F.heartbeat()); await sleep(100); expect(c.isClosed).to.equal(false); expect(c.find('close')).to.equal(undefined); } },

  // --- performatives ---
  { layer: 'performative', name: 'open with wrong field types', async run({ raw }) { const c = await raw(); c.write(F.AMQP_HEADER, F.open({ containerId: t.uint(5), maxFrameSize: t.str('big') })); await expectClose(c, FRAMING); } },
  { layer: 'performative', name: 'open with max-frame-size below 512', async run({ raw }) { const c = await raw(); c.write(F.AMQP_HEADER, F.open({ maxFrameSize: t.uint(16) })); await expectClose(c, FRAMING); } },
  { layer: 'performative', name: 'open twice', async run({ opened }) { const c = await opened(); c.write(F.open()); await expectClose(c, FRAMING); } },
  { layer: 'performative', name: 'begin before open', async run({ raw }) { const c = await raw(); c.write(F.AMQP_HEADER, F.begin(0)); await expectClose(c, FRAMING); } },
  { layer: 'performative', name: 'begin on a channel already in use', async run({ opened }) { const c = await opened(); c.write(F.begin(0)); await expectClose(c, FRAMING); } },
  { layer: 'performative', name: 'begin with wrong field types', async run({ raw }) {
    const c = await raw(); c.write(F.AMQP_HEADER, F.open(), F.begin(0, { nextOutgoingId: t.str('x'), incomingWindow: t.list([1]) }));
    // Tolerated or refused, the broker must answer: a begin or a close.
    expect(await c.waitFor((x) => !!x.find('begin') || !!x.find('close'), 3000)).to.equal(true);
  } },
  { layer: 'performative', name: 'attach on a channel without a session', async run({ raw }) { const c = await raw(); c.write(F.AMQP_HEADER, F.open(), F.attach({ channel: 3 })); await expectClose(c, FRAMING); } },
  { layer: 'performative', name: 'a detach after the client\'s own close (rhea answers a broker detach that crossed its close): the close is answered without error', async run({ opened }) {
    const c = await opened(); c.write(receiverAttach('crossed', F.source({ address: t.str('hostile.crossed') })));
    expect(await c.waitFor((x) => !!x.find('attach'), 3000)).to.equal(true);
    c.write(F.close(), F.detach(0));
    expect(await c.waitClosed(3000), 'the broker ends the connection').to.equal(true);
    const close = c.find('close');
    expect(close, 'the broker answers the close').to.not.equal(undefined);
    expect(close!.error, `close: ${close!.error?.description}`).to.equal(undefined);
  } },
  { layer: 'performative', name: 'close before open', async run({ raw }) { const c = await raw(); c.write(F.AMQP_HEADER, F.close()); expect(await c.waitClosed(3000)).to.equal(true); } },
  { layer: 'performative', name: 'transfer on an unattached handle', async run({ opened }) { const c = await opened(); c.write(F.transfer({ handle: t.uint(7) })); await expectEnd(c, 'amqp:session:unattached-handle'); } },
  { layer: 'performative', name: 'flow on an unattached handle', async run({ opened }) { const c = await opened(); c.write(F.flow({ handle: t.uint(9), linkCredit: t.uint(10), deliveryCount: t.uint(0) })); await expectEnd(c, 'amqp:session:unattached-handle'); } },
  { layer: 'performative', name: 'detach on an unattached handle', async run({ opened }) { const c = await opened(); c.write(F.detach(42)); await expectEnd(c, 'amqp:session:unattached-handle'); } },
  { layer: 'performative', name: 'transfer with a string handle', async run({ opened }) { const c = await opened(); c.write(F.transfer({ handle: t.str('zero') })); await expectEnd(c, 'amqp:session:unattached-handle'); } },
  { layer: 'performative', name: 'attach with a string handle', async run({ opened }) {
    const c = await opened(); c.write(F.attach({ handle: t.str('h') }));
    expect(await c.waitFor((x) => !!x.find('attach') || !!x.find('close') || !!x.find('end'), 3000)).to.equal(true);
  } },
  { layer: 'performative', name: 'transfer that never completes (more=true), then the client vanishes', async run({ opened }) {
    const c = await opened(); c.write(senderAttach('partial', F.target({ address: t.str('hostile.partial') })));
    await c.waitFor((x) => !!x.find('flow'), 3000);
    c.write(F.transfer({ handle: t.uint(0), more: t.bool(true), payload: Buffer.alloc(1000, 0x41) }));
    await sleep(50); c.destroy();
  } },

  // --- termini and links ---
  { layer: 'link', name: 'attach whose source is a string', async run({ opened }) { const c = await opened(); c.write(receiverAttach('src-string', t.str('q'))); await expectDetach(c, 'amqp:invalid-field'); } },
  { layer: 'link', name: 'attach whose target is a number', async run({ opened }) {
    const c = await opened(); c.write(senderAttach('tgt-number', t.uint(5)));
    await expectAttachAnswered(c);
  } },
  { layer: 'link', name: 'attach whose filter is a list', async run({ opened }) { const c = await opened(); c.write(receiverAttach('filter-list', F.source({ address: t.str('hostile.f'), filter: t.list([1, 2]) }))); await expectDetach(c, 'amqp:invalid-field'); } },
  { layer: 'link', name: 'attach whose filter is a string', async run({ opened }) { const c = await opened(); c.write(receiverAttach('filter-str', F.source({ address: t.str('hostile.f'), filter: t.str('x = 1') }))); await expectDetach(c, 'amqp:invalid-field'); } },
  { layer: 'link', name: 'attach with capabilities of the wrong type', async run({ opened }) { const c = await opened(); c.write(senderAttach('caps', F.target({ address: t.str('hostile.caps'), capabilities: t.uint(3) }))); await expectAttachAnswered(c); } },
  { layer: 'link', name: 'attach with node properties that are not a map', async run({ opened }) { const c = await opened(); c.write(senderAttach('props', F.target({ address: t.str('hostile.props'), capabilities: t.sym('create-on-demand'), dynamicNodeProperties: t.list(['a']) }))); await expectAttachAnswered(c); } },
  { layer: 'link', name: 'attach with an address that is a number', async run({ opened }) { const c = await opened(); c.write(senderAttach('addr-num', F.target({ address: t.uint(12) }))); await expectAttachAnswered(c); } },
  { layer: 'link', name: 'attach with a 40 KiB link name (under max-frame-size)', async run({ opened }) { const c = await opened(); c.write(senderAttach('L'.repeat(40000), F.target({ address: t.str('hostile.longname') }))); await expectAttachAnswered(c); } },
  { layer: 'link', name: 'attach with a 200 KiB link name (over max-frame-size)', async run({ opened }) { const c = await opened(); c.write(senderAttach('L'.repeat(200000), F.target({ address: t.str('hostile.longname') }))); await expectClose(c, ['amqp:connection:framing-error']); } },
  { layer: 'link', name: 'flow with huge credit (0xffffffff) on a broker sender', async run({ opened, conn }) {
    const pub = await conn();
    const s = await openSender(pub, { address: 'hostile.credit' });
    await sendAll(s, Array.from({ length: 5 }, (_, i) => ({ body: i })));
    await pub.close();
    const c = await opened(); c.write(receiverAttach('credit', F.source({ address: t.str('hostile.credit') })));
    await c.waitFor((x) => !!x.find('attach'), 3000);
    c.write(F.flow({ handle: t.uint(0), linkCredit: t.uint(0xffffffff), deliveryCount: t.uint(0), nextIncomingId: t.uint(0) }));
    expect(await c.waitFor((x) => x.frames.filter((f) => f.name === 'transfer').length >= 5, 3000), 'the 5 messages are sent').to.equal(true);
    expect(c.find('close')).to.equal(undefined);
  } },
  { layer: 'link', name: 'flow with negative-looking delivery-count and windows', async run({ opened }) {
    const c = await opened(); c.write(receiverAttach('negflow', F.source({ address: t.str('hostile.neg') })));
    await c.waitFor((x) => !!x.find('attach'), 3000);
    c.write(F.flow({ handle: t.uint(0), linkCredit: t.uint(0x80000000), deliveryCount: t.uint(0xfffffffe), incomingWindow: t.uint(0xffffffff), nextIncomingId: t.uint(0xffffffff), drain: t.bool(true), echo: t.bool(true) }));
    await sleep(150);
  } },
  { layer: 'link', name: 'flow with int (signed) credit -1', async run({ opened }) {
    const c = await opened(); c.write(receiverAttach('intflow', F.source({ address: t.str('hostile.neg') })));
    await c.waitFor((x) => !!x.find('attach'), 3000);
    c.write(F.flow({ handle: t.uint(0), linkCredit: t.int(-1), deliveryCount: t.int(-5) }));
    await sleep(150);
  } },
  { layer: 'link', name: 'transfer with an undecodable message body', async run({ opened }) {
    const c = await opened(); c.write(senderAttach('badbody', F.target({ address: t.str('hostile.body') })));
    await c.waitFor((x) => !!x.find('flow'), 3000);
    c.write(F.transfer({ handle: t.uint(0), payload: Buffer.from([0x00, 0x53, 0x77, 0xff, 0xfe]) }));
    // Rejected (decode-error) or the connection closed with a decode error: never a crash.
    expect(await c.waitFor((x) => !!x.find('disposition') || !!x.find('close') || !!x.find('detach'), 3000)).to.equal(true);
    const d = c.find('disposition');
    if (d && !c.find('close')) expect(JSON.stringify(d.fields)).to.not.include('"descriptor":36'); // not accepted
  } },
  ...([
    ['an array of 2^31 uuids in a 13-byte body', '005377f0000000057fffffff98'],
    ['an array of 2^31 zero-width nulls', '005377f0000000057fffffff40'],
    ['a list announcing 2^31 items', '005377d0000000057fffffff'],
    ['a map announcing 2^32-2 items in application-properties', '005374d100000005fffffffe'],
  ] as const).map(([what, hex]): Case => ({ layer: 'link', name: `transfer with ${what} (rhea would exhaust memory)`, async run({ opened }) {
    const c = await opened(); c.write(senderAttach('bomb', F.target({ address: t.str('hostile.bomb') })));
    await c.waitFor((x) => !!x.find('flow'), 3000);
    c.write(F.transfer({ handle: t.uint(0), payload: Buffer.from(hex, 'hex') }));
    // A decode error ends the connection with a reason; the broker lives on (checked after each case).
    await expectClose(c, ['amqp:decode-error']);
  } })),

  { layer: 'connection', name: 'a frame whose performative descriptor is unknown (0x89): decode-error saying so', async run({ opened }) {
    const c = await opened();
    c.write(F.amqp(0x89, [t.uint(1)]));
    await expectClose(c, ['amqp:decode-error']);
    expect(c.find('close')!.error?.description).to.equal('malformed frame: the frame body is not an AMQP 1.0 performative (open, begin, attach, flow, transfer, disposition, detach, end, close, or a SASL frame during SASL)');
  } },

  { layer: 'link', name: 'transfer with 100k nested lists (deeper than any decoder\'s stack)', async run({ opened }) {
    const c = await opened(); c.write(senderAttach('deep', F.target({ address: t.str('hostile.deep') })));
    await c.waitFor((x) => !!x.find('flow'), 3000);
    // list32 inside list32 …, each announcing one item: 900 KB, sent as a multi-frame delivery.
    const depth = 100000;
    const body = Buffer.alloc(3 + 9 * depth + 1);
    body.set([0x00, 0x53, 0x77]);
    for (let i = 0; i < depth; i++) { const at = 3 + 9 * i; body[at] = 0xd0; body.writeUInt32BE(9 * (depth - i - 1) + 5, at + 1); body.writeUInt32BE(1, at + 5); }
    body[3 + 9 * depth] = 0x40;
    const chunk = 60000;
    for (let at = 0; at < body.length; at += chunk) {
      const last = at + chunk >= body.length;
      c.write(at === 0
        ? F.transfer({ handle: t.uint(0), more: t.bool(!last), payload: body.subarray(at, at + chunk) })
        : F.transfer({ handle: t.uint(0), deliveryId: null, tag: null, more: t.bool(!last), payload: body.subarray(at, at + chunk) }));
    }
    await expectClose(c, ['amqp:decode-error']);
  } },

  // --- rhea client: node properties, sizes, limits ---
  { layer: 'client', name: "qpid.max_count: 'abc' is an invalid field naming the argument", async run({ conn }) {
    const c = await conn();
    const d = await refusedAttach(c, () => openSender(c, { address: 'hostile.args1', capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.max_count': 'abc' } }), 'amqp:invalid-field');
    expect(d).to.equal('queue argument qpid.max_count: expected an integer >= 0, got "abc"'); // named once
  } },
  { layer: 'client', name: 'unknown sow.foo is an invalid field naming it', async run({ conn }) {
    const c = await conn();
    const d = await refusedAttach(c, () => openSender(c, { address: 'hostile.args2', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.foo': 'x' } }), 'amqp:invalid-field');
    expect(d).to.include('sow.foo');
  } },
  { layer: 'client', name: 'two filters of one kind (two commands, two selectors) are an invalid field, not the last one applied', async run({ conn }) {
    const c = await conn();
    const d = (desc: string, v: any) => r.types.described_nc(r.types.wrap_symbol(desc), v);
    const sowQ = { address: 'hostile.twocmd', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } };
    const two = await refusedAttach(c, () => openReceiver(c, { ...sowQ, filter: { a: d('tidemark:command:symbol', r.types.wrap_symbol('sow')), b: d('tidemark:command:symbol', r.types.wrap_symbol('subscribe')) } }), 'amqp:invalid-field');
    expect(two).to.equal('source filter: two tidemark:command:symbol filters (the second under key "b"); give each kind of filter once');
    const sel = await refusedAttach(c, () => openReceiver(c, { address: 'hostile.twosel', filter: { s1: d('apache.org:selector-filter:string', r.types.wrap_string('a = 1')), s2: d('apache.org:selector-filter:string', r.types.wrap_string('b = 2')) } }), 'amqp:invalid-field');
    expect(sel).to.include('two apache.org:selector-filter:string filters');
  } },
  { layer: 'client', name: "qpid.policy_type: 'bogus' is an invalid field", async run({ conn }) {
    const c = await conn();
    const d = await refusedAttach(c, () => openReceiver(c, { address: 'hostile.args3', capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.policy_type': 'bogus' } }), 'amqp:invalid-field');
    expect(d).to.include('qpid.policy_type');
  } },
  { layer: 'client', name: 'qpid.max_size as a map is an invalid field', async run({ conn }) {
    const c = await conn();
    const d = await refusedAttach(c, () => openSender(c, { address: 'hostile.args4', capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.max_size': { a: 1 } } }), 'amqp:invalid-field');
    expect(d).to.include('qpid.max_size');
  } },
  { layer: 'client', name: 'message larger than max-message-size is rejected with resource-limit-exceeded', async run({ conn }) {
    const c = await conn();
    const s = await openSender(c, { address: 'hostile.big' });
    const [o] = await sendAll(s, [{ body: 'x'.repeat(LIMITS.maxMessageSize + 100) }]);
    expect(o.state).to.equal('rejected');
    expect(o.condition).to.equal('amqp:resource-limit-exceeded');
  } },
  { layer: 'client', name: 'links beyond maxLinksPerSession get resource-limit-exceeded detaches', async run({ conn }) {
    const c = await conn();
    const results = await Promise.allSettled(Array.from({ length: LIMITS.maxLinksPerSession + 4 }, (_, i) => openSender(c, { address: `hostile.links.${i}` })));
    const refused = results.filter((r) => r.status === 'rejected') as PromiseRejectedResult[];
    expect(results.filter((r) => r.status === 'fulfilled')).to.have.length(LIMITS.maxLinksPerSession);
    expect(refused).to.have.length(4);
    for (const r of refused) expect(r.reason.condition).to.equal('amqp:resource-limit-exceeded');
  } },
  { layer: 'client', name: 'thousands of attaches on one raw session', async run({ opened }) {
    const c = await opened();
    const frames: Buffer[] = [];
    for (let i = 0; i < 2000; i++) frames.push(senderAttach(`mass-${i}`, F.target({ address: t.str('hostile.mass') }), i));
    c.write(...frames);
    expect(await c.waitFor((x) => x.frames.filter((f) => f.name === 'detach').length >= 2000 - LIMITS.maxLinksPerSession || x.isClosed, 10000)).to.equal(true);
    const detaches = c.frames.filter((f) => f.name === 'detach');
    if (!c.find('close')) {
      expect(detaches.length).to.be.at.least(2000 - LIMITS.maxLinksPerSession);
      for (const d of detaches) expect(d.error?.condition).to.equal('amqp:resource-limit-exceeded');
    }
  } },
  { layer: 'client', name: 'sessions beyond channel-max', async run({ opened }) {
    const c = await opened();
    const frames: Buffer[] = [];
    for (let ch = 1; ch < 40; ch++) frames.push(F.begin(ch));
    c.write(...frames);
    // The broker advertised channel-max 15: a begin past it ends the connection [AMQP 2.7.1].
    await c.waitFor((x) => !!x.find('close'), 3000);
    expect(c.find('close')?.error?.condition).to.equal('amqp:connection:framing-error');
    expect(c.frames.filter((f) => f.name === 'begin' && f.channel > 15)).to.have.length(0);
  } },
];

describe('hostile input (acceptance E.2, wire.md 8)', function () {
  this.timeout(60000);
  const b = useBroker({ limits: LIMITS, ...USERS });
  let control: Conn;
  let controlSender: any;
  let controlReceiver: any;
  let controlErrors: string[] = [];
  let seq = 0;
  const opened: RawClient[] = [];
  const conns: Conn[] = [];

  before(async function () {
    control = await connect(b.get().url);
    for (const ev of ['connection_error', 'disconnected', 'connection_close', 'session_error', 'sender_error', 'receiver_error', 'sender_close', 'receiver_close']) {
      control.connection.on(ev, () => controlErrors.push(ev));
    }
    controlSender = await openSender(control, { address: 'hostile.control' });
    controlReceiver = await openReceiver(control, { address: 'hostile.control' });
  });
  after(async () => { await control?.close(); });

  afterEach(async function () {
    for (const c of opened.splice(0)) c.destroy();
    for (const c of conns.splice(0)) await c.close();
    // The control client kept working: no error, and a round trip of 5 messages.
    const bodies = Array.from({ length: 5 }, () => `ctl-${seq++}`);
    const got = collect(controlReceiver, { count: 5, idleMs: 3000 });
    const outcomes = await sendAll(controlSender, bodies.map((body) => ({ body })));
    expect(outcomes.map((o) => o.state)).to.deep.equal(['accepted', 'accepted', 'accepted', 'accepted', 'accepted']);
    expect((await got).map((m) => m.message.body)).to.deep.equal(bodies);
    expect(controlErrors, 'control connection saw an error').to.deep.equal([]);
    // And the broker still accepts a new connection.
    const fresh = await RawClient.connect(b.get().port);
    await fresh.handshake({ begin: false });
    expect(fresh.find('open'), 'a new connection gets an open').to.not.equal(undefined);
    fresh.destroy();
  });

  const ctx = (): Ctx => ({
    tb: b.get(),
    raw: async () => { const c = await RawClient.connect(b.get().port); opened.push(c); return c; },
    opened: async () => {
      const c = await RawClient.connect(b.get().port); opened.push(c);
      await c.handshake();
      expect(c.find('begin'), 'handshake').to.not.equal(undefined);
      return c;
    },
    conn: async () => { const c = await connect(b.get().url); conns.push(c); return c; },
  });

  it(`has at least 40 cases (${cases.length})`, () => { expect(cases.length).to.be.at.least(40); });

  for (const c of cases) {
    it(`[${c.layer}] ${c.name}`, async function () { await c.run(ctx()); });
  }
});

describe('hostile input: connection limits', function () {
  this.timeout(30000);
  const b = useBroker({ limits: { ...LIMITS, maxConnections: 3 } });

  it('refuses connections beyond maxConnections with open + close(resource-limit-exceeded), acts on nothing they send, and accepts again once below', async function () {
    const held: RawClient[] = [];
    try {
      for (let i = 0; i < 3; i++) { const c = await RawClient.connect(b.get().port); await c.handshake({ begin: false }); expect(c.find('open')).to.not.equal(undefined); held.push(c); }
      const extra = await RawClient.connect(b.get().port);
      // open, begin and attach in one write: the refused connection must not get a session or link.
      extra.write(F.AMQP_HEADER, F.open(), F.begin(0), F.attach({ name: 'l', handle: t.uint(0), role: t.bool(false), target: F.target({ address: 'over.limit' }) }));
      expect(await extra.waitClosed(3000), 'excess connection closed').to.equal(true);
      // [AMQP 2.4.2] a refused connection: open, then close with the error at once
      expect(extra.frames.map((f) => f.name)).to.deep.equal(['open', 'close']);
      expect(extra.find('close')?.error?.condition).to.equal('amqp:resource-limit-exceeded');
      expect(String(extra.find('close')?.error?.description)).to.match(/maximum of 3 connections \(limits\.maxConnections\)/);
      expect(b.get().broker.nodes.get('over.limit'), 'nothing created for a refused connection').to.equal(undefined);
      // rhea clients see the condition, not a hang or a reset.
      const u = new URL(b.get().url);
      const refused: any = await new Promise((res) => {
        const conn = r.create_container({ id: 'over-limit' }).connect({ host: u.hostname, port: Number(u.port), reconnect: false });
        const timer = setTimeout(() => res(undefined), 3000);
        conn.on('connection_error', (ctx: any) => { clearTimeout(timer); res(ctx.connection.error); });
        conn.on('disconnected', () => { /* after the close */ });
      });
      expect(refused?.condition).to.equal('amqp:resource-limit-exceeded');
      held.shift()!.destroy();
      await sleep(200);
      const again = await connect(b.get().url);
      await again.close();
    } finally { for (const c of held) c.destroy(); }
  });
});

describe('hostile input: sessions beyond channel-max', function () {
  this.timeout(30000);
  const b = useBroker({ limits: { ...LIMITS, maxSessionsPerConnection: 3 } });

  it('announces channel-max = maxSessionsPerConnection - 1 and ends a connection that begins on a higher channel with framing-error [AMQP 2.7.1]', async function () {
    const c = await RawClient.connect(b.get().port);
    try {
      c.write(F.AMQP_HEADER, F.open(), F.begin(0), F.begin(1), F.begin(2));
      expect(await c.waitFor((x) => x.frames.filter((f) => f.name === 'begin').length === 3, 3000)).to.equal(true);
      expect(c.find('open')?.fields?.[3]).to.equal(2); // channel-max
      expect(c.isClosed).to.equal(false);
      c.write(F.begin(3));
      expect(await c.waitClosed(3000)).to.equal(true);
      expect(c.frames.filter((f) => f.name === 'begin').length, 'no session on channel 3').to.equal(3);
      expect(c.find('close')?.error?.condition).to.equal('amqp:connection:framing-error');
      expect(String(c.find('close')?.error?.description)).to.match(/channel 3, beyond the channel-max of 2/);
    } finally { c.destroy(); }
  });
});

describe('hostile input: idle time-out', function () {
  this.timeout(30000);
  const b = useBroker({ limits: { ...LIMITS, idleTimeoutMs: 300 } });

  it('closes a connection that opens and then stays silent, with resource-limit-exceeded', async function () {
    const c = await RawClient.connect(b.get().port);
    c.write(F.AMQP_HEADER, F.open());
    expect(await c.waitFor((x) => !!x.find('open'), 2000)).to.equal(true);
    const idle = F.Code.open; void idle;
    expect(await c.waitClosed(5000), 'silent connection closed').to.equal(true);
    expect(c.find('close')?.error?.condition).to.equal('amqp:resource-limit-exceeded');
    expect(String(c.find('close')?.error?.description)).to.match(/idle/);
  });

  it('closes a socket that never sends a byte', async function () {
    const c = await RawClient.connect(b.get().port);
    expect(await c.waitClosed(5000)).to.equal(true);
  });

  it('keeps a connection that sends heartbeats', async function () {
    const c = await RawClient.connect(b.get().port);
    c.write(F.AMQP_HEADER, F.open({ idleTimeOut: t.uint(200) }));
    for (let i = 0; i < 10; i++) { await sleep(100); c.write(F.heartbeat()); }
    expect(c.isClosed).to.equal(false);
    c.destroy();
  });
});
