/**
 * A plain AMQP client (rhea here) given a whole Qpid address string, options and all, as the
 * address of its attach: the broker reads the options as qpid::messaging would have sent
 * them (docs/addresses.md "Sent by a plain client"). Before, the queue was created under the
 * whole string, without its arguments, and a receiver of the bare name saw nothing.
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openSender, openReceiver, sendAll, collect, send, receive, type Conn } from '../support/client.js';
import { protonAvailable, runProton } from '../support/proton.js';
import { expandQpidAddress } from '../../lib/core/protocol/terminus.js';

const json = (o: unknown) => ({ body: JSON.stringify(o), content_type: 'application/json' });
const bodies = (got: Array<{ message: any }>) => got.map((m) => m.message.body);

describe('Qpid address strings sent by a plain AMQP client', function () {
  const b = useBroker({});
  let c: Conn;
  beforeEach(async () => { c = await connect(b.get().url); });
  afterEach(async () => { await c?.close(); });

  it('a sender\'s x-declare arguments declare the queue under its name (a SOW queue keeps one record per key)', async function () {
    const s = await openSender(c, { address: "pc.sow; {create: always, node: {x-declare: {arguments: {'sow.key': '/id'}}}}" });
    expect(s.remote.attach.target.address, 'the reply names the address as given').to.equal("pc.sow; {create: always, node: {x-declare: {arguments: {'sow.key': '/id'}}}}");
    const out = await sendAll(s, [json({ id: 'a', v: 1 }), json({ id: 'a', v: 2 }), json({ id: 'b', v: 1 })]);
    expect(out.map((o) => o.state)).to.deep.equal(['accepted', 'accepted', 'accepted']);
    const got = await receive(b.get().url, { address: 'pc.sow' }, { idleMs: 500 });
    expect(bodies(got).map((x) => JSON.parse(x)).sort((x: any, y: any) => x.id.localeCompare(y.id))).to.deep.equal([{ id: 'a', v: 2 }, { id: 'b', v: 1 }]);
  });

  it('a receiver\'s mode: browse reads without consuming, and its selector filters', async function () {
    await send(b.get().url, 'pc.plain', [{ body: 'r1', application_properties: { color: 'red' } }, { body: 'g1', application_properties: { color: 'green' } }]);
    const browser = await openReceiver(c, "pc.plain; {mode: browse, link: {selector: \"color = 'red'\"}}");
    expect(browser.remote.attach.source.address).to.equal("pc.plain; {mode: browse, link: {selector: \"color = 'red'\"}}");
    expect(String(browser.remote.attach.source.distribution_mode)).to.equal('copy');
    expect(bodies(await collect(browser, { idleMs: 400 }))).to.deep.equal(['r1']);
    const all = await receive(b.get().url, { address: 'pc.plain' }, { idleMs: 400 });
    expect(bodies(all), 'nothing was consumed by the browser').to.deep.equal(['r1', 'g1']);
  });

  it('options the broker cannot read end that link with amqp:invalid-field naming them; the connection goes on', async function () {
    const err = await openSender(c, { address: 'pc.bad; {create: always, node: {x-declare: ' }).then(() => undefined, (e) => e);
    expect(err?.condition).to.equal('amqp:invalid-field');
    expect(err.message).to.match(/Qpid address options/).and.to.include('pc.bad');
    const err2 = await openReceiver(c, 'pc.bad2; {create: always, x-bindings: []}').then(() => undefined, (e) => e);
    expect(err2?.condition).to.equal('amqp:invalid-field');
    expect(err2.message).to.include('x-bindings');
    const s = await openSender(c, { address: 'pc.after' });
    expect((await sendAll(s, [{ body: 'ok' }]))[0].state).to.equal('accepted');
  });

  it('options nested past the parser\'s limit are amqp:invalid-field (not a stack overflow)', async function () {
    const deep = (n: number) => `pc.deep; {create: always, node: {x-declare: {arguments: {'x': ${'['.repeat(n)}${']'.repeat(n)}}}}}`;
    const err = await openReceiver(c, deep(5000)).then(() => undefined, (e) => e);
    expect(err?.condition).to.equal('amqp:invalid-field');
    expect(err.message).to.match(/Nested too deeply/);
    const s = await openSender(c, { address: deep(20) });
    expect((await sendAll(s, [{ body: 'ok' }]))[0].state).to.equal('accepted');
  });

  it('a subject in a sender\'s address is refused (the broker cannot put it on each message); a receiver\'s filters', async function () {
    const err = await openSender(c, { address: 'pc.subj/red; {create: always}' }).then(() => undefined, (e) => e);
    expect(err?.condition).to.equal('amqp:invalid-field');
    expect(err.message).to.include('subject').and.to.include('"pc.subj; {create: always}"');
    await send(b.get().url, 'pc.subj', [{ body: 'r', subject: 'red' }, { body: 'g', subject: 'green' }]);
    const rcv = await openReceiver(c, 'pc.subj/red; {mode: browse}');
    expect(bodies(await collect(rcv, { idleMs: 400 }))).to.deep.equal(['r']);
  });

  it('Python Proton\'s blocking client opens a sender and a receiver on the address string (its reply names the address as given)', async function () {
    if (!protonAvailable()) this.skip();
    const addr = "pc.proton; {create: always, node: {x-declare: {arguments: {'sow.key': '/id'}}}}";
    const r = await runProton('blocking_qpid_address.py', ['-u', b.get().url, '-a', addr, '-m', '{"id":"a","v":1}', '-m', '{"id":"a","v":2}']);
    expect(r.code, r.stderr).to.equal(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
    expect(out).to.deep.equal({ sent: 2, received: ['{"id":"a","v":2}'] });
  });

  it('no queue is made with a name holding "; {" (the anonymous relay\'s `to` is a name: refused), and an existing queue of that very name is attached by name', async function () {
    const s = await openSender(c, {});
    const [o] = await sendAll(s, [{ to: 'pc.lit; {link: {selector: "1=1"}}', body: 'x' }]);
    expect(o.state).to.equal('rejected');
    expect(o.condition).to.equal('amqp:invalid-field');
    expect(o.description).to.include("holds ';' followed by '{'");
    expect(b.get().broker.nodes.get('pc.lit; {link: {selector: "1=1"}}')).to.equal(undefined);
    // a terminus naming an existing queue is left as it is (the console attaches by name)
    const t = { address: 'old; {mode: browse}' };
    expect(expandQpidAddress(t, 'receiver', (n) => n === 'old; {mode: browse}')).to.equal(t);
    expect(expandQpidAddress(t, 'receiver', () => false).address).to.equal('old');
  });

  it('an address without options is the queue\'s name as before, semicolon or not', async function () {
    const s = await openSender(c, { address: 'pc.semi;colon' });
    expect(s.remote.attach.target.address).to.equal('pc.semi;colon');
    expect((await sendAll(s, [{ body: 'x' }]))[0].state).to.equal('accepted');
    expect(bodies(await receive(b.get().url, { address: 'pc.semi;colon' }, { idleMs: 400 }))).to.deep.equal(['x']);
  });
});
