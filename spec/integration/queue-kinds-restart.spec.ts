import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { send, receive } from '../support/client.js';

// semantics.md 1: ring, reject and LVQ queues keep their rules and contents across a restart.
describe('queue kinds across a restart', function () {
  const b = useBroker();
  const declare = (name: string, args: Record<string, unknown>) => ({ address: name, capabilities: ['create-on-demand', 'queue', 'durable'], dynamic_node_properties: { durable: true, ...args } });

  it('ring keeps the newest N, LVQ one message per key, reject still refuses at the limit', async function () {
    const tb = b.get();
    await send(tb.url, declare('k.ring', { 'qpid.max_count': 3, 'qpid.policy_type': 'ring', 'qpid.browse-only': true }), Array.from({ length: 6 }, (_, i) => ({ body: i })));
    await send(tb.url, declare('k.lvq', { 'qpid.last_value_queue_key': 'k', 'qpid.browse-only': true }), [['a', 1], ['b', 1], ['a', 2]].map(([k, v]) => ({ application_properties: { k }, body: `${k}${v}` })));
    const rej = await send(tb.url, declare('k.reject', { 'qpid.max_count': 2 }), [{ body: 1 }, { body: 2 }]);
    expect(rej.map((o) => o.state)).to.deep.equal(['accepted', 'accepted']);
    await tb.restart();
    const url = tb.broker.urls[0];
    expect((await receive(url, 'k.ring', { idleMs: 300 })).map((m) => m.message.body)).to.deep.equal([3, 4, 5]);
    await send(url, 'k.ring', [{ body: 6 }]);
    expect((await receive(url, 'k.ring', { idleMs: 300 })).map((m) => m.message.body)).to.deep.equal([4, 5, 6]);
    expect((await receive(url, 'k.lvq', { idleMs: 300 })).map((m) => m.message.body)).to.deep.equal(['b1', 'a2']);
    await send(url, 'k.lvq', [{ application_properties: { k: 'b' }, body: 'b2' }]);
    expect((await receive(url, 'k.lvq', { idleMs: 300 })).map((m) => m.message.body)).to.deep.equal(['a2', 'b2']);
    const third = await send(url, 'k.reject', [{ body: 3 }]);
    expect(third[0].state).to.equal('rejected');
    expect(third[0].condition).to.equal('amqp:resource-limit-exceeded');
  });
});
