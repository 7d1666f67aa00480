/**
 * Queue arguments an outside audit (session 17) found ignored or taken silently: node
 * properties of a dynamic (temporary) queue, an empty last-value key, and other brokers'
 * arguments that are kept but do nothing. Each case fails on the code before its fix.
 * Real broker, real rhea client.
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openReceiver, openSender, collect, send, sendAll, sleep, createOnDemand } from '../support/client.js';
import { setLogDestination, setLogLevel, getLogLevel } from '../../lib/core/log.js';


describe('queue arguments (audit, session 17)', function () {
  this.timeout(30000);
  let tb: TestBroker;
  beforeEach(async () => { tb = await startTestBroker(); });
  afterEach(async () => { await tb.stop(); });

  it('a dynamic receiver\'s node properties are its temporary queue\'s arguments: a ring of 2 keeps the newest 2', async function () {
    const c = await connect(tb.url);
    try {
      const rcv = await openReceiver(c, { dynamic: true, dynamic_node_properties: { 'qpid.max_count': 2, 'qpid.policy_type': 'ring', 'lifetime-policy': 'delete-on-close' } });
      const address = rcv.remote.attach.source.address as string;
      expect(address).to.match(/^tmp\./);
      expect(tb.broker.nodes.get(address)!.arguments).to.deep.equal({ 'qpid.max_count': 2, 'qpid.policy_type': 'ring' });
      const outcomes = await send(tb.url, address, [1, 2, 3].map((n) => ({ body: `m${n}` })));
      expect(outcomes.map((o) => o.state)).to.deep.equal(['accepted', 'accepted', 'accepted']);
      const got = await collect(rcv, { count: 3, credit: 3, idleMs: 500 });
      expect(got.map((m) => m.message.body)).to.deep.equal(['m2', 'm3']);
      rcv.close();
      await sleep(100);
      expect(tb.broker.nodes.get(address), 'deleted with its link').to.equal(undefined);
    } finally { await c.close(); }
  });

  it('a dynamic sender\'s temporary queue can be a last-value queue', async function () {
    const c = await connect(tb.url);
    try {
      const snd = await openSender(c, { dynamic: true, dynamic_node_properties: { 'qpid.last_value_queue_key': 'k' } });
      const address = snd.remote.attach.target.address as string;
      expect(tb.broker.nodes.get(address)!.arguments).to.deep.equal({ 'qpid.last_value_queue_key': 'k' });
      const outcomes = await sendAll(snd, [['a', 'a1'], ['b', 'b1'], ['a', 'a2']].map(([k, body]) => ({ body, application_properties: { k } })));
      expect(outcomes.map((o) => o.state)).to.deep.equal(['accepted', 'accepted', 'accepted']);
      expect(tb.broker.nodes.get(address)!.structure.stats().depth).to.equal(2);
    } finally { await c.close(); }
  });

  it('a dynamic node with sow.key is a temporary SOW queue: one record per key, gone with its link', async function () {
    const c = await connect(tb.url);
    try {
      const snd = await openSender(c, { dynamic: true, dynamic_node_properties: { 'sow.key': '/id' } });
      const address = snd.remote.attach.target.address as string;
      const outcomes = await sendAll(snd, [{ body: '{"id":1,"v":1}' }, { body: '{"id":1,"v":2}' }, { body: '{"id":2,"v":1}' }]);
      expect(outcomes.map((o) => o.state)).to.deep.equal(['accepted', 'accepted', 'accepted']);
      expect(tb.broker.nodes.get(address)!.structure.stats().depth).to.equal(2);
      snd.close();
      await sleep(100);
      expect(tb.broker.nodes.get(address)).to.equal(undefined);
    } finally { await c.close(); }
  });

  it('a bad argument on a dynamic node refuses the attach with invalid-field naming it, and no queue is left', async function () {
    const c = await connect(tb.url);
    try {
      const before = tb.broker.nodes.list().length;
      const err = await openReceiver(c, { dynamic: true, dynamic_node_properties: { 'qpid.max_count': 'lots' } }).then(() => undefined, (e) => e);
      expect(err?.condition).to.equal('amqp:invalid-field');
      expect(err?.message).to.match(/qpid\.max_count/);
      expect(tb.broker.nodes.list().length).to.equal(before);
    } finally { await c.close(); }
  });

  it('an empty qpid.last_value_queue_key is invalid-field (it names no property: nothing would ever be replaced)', async function () {
    const c = await connect(tb.url);
    try {
      const err = await openSender(c, createOnDemand('lvq.empty', { 'qpid.last_value_queue_key': '' })).then(() => undefined, (e) => e);
      expect(err?.condition).to.equal('amqp:invalid-field');
      expect(err?.message).to.match(/qpid\.last_value_queue_key.*empty/);
      expect(tb.broker.nodes.get('lvq.empty')).to.equal(undefined);
    } finally { await c.close(); }
  });

  it('arguments of other brokers (or misspelt) are kept as declared and logged at warn as not applied', async function () {
    const lines: string[] = [];
    const level = getLogLevel();
    setLogDestination({ write: (s: string) => { lines.push(s); } });
    setLogLevel('warn');
    try {
      const out = await send(tb.url, createOnDemand('foreign.args', { 'x-max-length': 5, 'qpid.max_cnt': 3, 'qpid.max_count': 10 }), [{ body: 'x' }]);
      expect(out[0].state).to.equal('accepted');
    } finally { setLogLevel(level); setLogDestination(undefined); }
    expect(tb.broker.nodes.get('foreign.args')!.arguments).to.deep.equal({ 'x-max-length': 5, 'qpid.max_cnt': 3, 'qpid.max_count': 10 });
    const warns = lines.map((l) => JSON.parse(l)).filter((o) => o.level === 'warn' && o.queue === 'foreign.args');
    expect(warns).to.have.length(1);
    expect(warns[0].unapplied).to.deep.equal(['x-max-length', 'qpid.max_cnt']);
    expect(warns[0].known).to.include('qpid.max_count');
  });
});
