/**
 * Session 22 code review of the filters and addresses (docs/robustness.md 13, "Filters and
 * addresses"): the cases that need a broker. Unit cases: spec/unit/filter/session22-review.spec.ts.
 */
import { expect } from 'chai';
import rhea from 'rhea';
import { useBroker } from '../support/broker.js';
import { connect, openReceiver, collect, send, described, sleep } from '../support/client.js';
import type { ListStructure } from '../../lib/core/queue/list-structure.js';
import type { ConsumerRequest } from '../../lib/core/extensions.js';
import type { DeliverySink, Outcome } from '../../lib/core/queue/delivery.js';
import type { TidemarkError } from '../../lib/core/errors.js';

const t: any = (rhea as any).types;
const long = (v: bigint) => { const b = Buffer.alloc(8); b.writeBigInt64BE(v); return t.wrap_long(b); };
const NS = 1700000000123456789n;
const SELECTOR = 'apache.org:selector-filter:string';
const bodies = (got: Array<{ message: any }>) => got.map((m) => m.message.body);

describe('session 22 review: filters and addresses on a broker', function () {
  this.timeout(30000);
  const b = useBroker();

  describe('1. a selector naming an Object.prototype member', () => {
    it('does not starve the other consumers of its queue (valueOf = 1 threw on every dispatch)', async () => {
      const url = b.get().url;
      const c = await connect(url);
      try {
        const odd = await openReceiver(c, { address: 'fa.starve', filter: { s: described(SELECTOR, 'valueOf = 1') } });
        odd.add_credit(10);
        const plain = await openReceiver(c, { address: 'fa.starve' });
        const pending = collect(plain, { count: 4, idleMs: 1500 });
        await send(url, 'fa.starve', [{ body: 'm1' }, { body: 'm2' }, { body: 'm3' }, { body: 'm4' }]);
        expect(bodies(await pending)).to.deep.equal(['m1', 'm2', 'm3', 'm4']);
        expect(odd.is_open(), 'its own link carries on: NULL = 1 is not an error').to.equal(true);
      } finally { await c.close(); }
    });

    it('valueOf IS NULL matches every message (a missing property)', async () => {
      const url = b.get().url;
      const c = await connect(url);
      try {
        const rcv = await openReceiver(c, { address: 'fa.isnull', filter: { s: described(SELECTOR, 'valueOf IS NULL AND constructor IS NULL') } });
        const pending = collect(rcv, { count: 2, idleMs: 1500 });
        await send(url, 'fa.isnull', [{ body: 'm1' }, { body: 'm2' }]);
        expect(bodies(await pending)).to.deep.equal(['m1', 'm2']);
      } finally { await c.close(); }
    });

    it('a filter that throws ends its own link with amqp:internal-error; the queue serves the others', async () => {
      const url = b.get().url;
      const q = 'fa.throws';
      await send(url, q, [{ body: 'm0' }]);
      const list = b.get().broker.nodes.get(q)!.structure as ListStructure;
      let calls = 0;
      const closed: Array<TidemarkError | undefined> = [];
      const req: ConsumerRequest = {
        mode: 'move', filters: new Map(), annotate: false, linkName: 'throwing', containerId: 'spec', connectionId: 'spec', durable: false, user: 'anonymous',
        predicates: [() => { calls++; throw new TypeError('boom'); }],
      };
      const sink: DeliverySink = {
        id: 'spec/throwing', presettled: false, credit: () => 1000, drained() {}, close(err) { closed.push(err); },
        send(_bytes: Buffer, onOutcome?: (o: Outcome) => void) { onOutcome?.({ type: 'accepted' }); },
      };
      const consumer = list.openConsumer(req, sink);
      try {
        list.dispatch();
        expect(closed.map((e) => e?.condition)).to.deep.equal(['amqp:internal-error']);
        expect(closed[0]!.message).to.match(/filter failed.*boom/);
        await send(url, q, [{ body: 'm1' }, { body: 'm2' }]);
        const c = await connect(url);
        try {
          const plain = await openReceiver(c, { address: q });
          expect(bodies(await collect(plain, { count: 3, idleMs: 1500 }))).to.deep.equal(['m0', 'm1', 'm2']);
        } finally { await c.close(); }
        expect(calls, 'tested once: it matches nothing more while its link closes').to.equal(1);
      } finally { consumer.close(); }
    });
  });

  describe('2. legacy subject bindings', () => {
    it('a receiver of q/red (direct binding) gets the message whose subject is red, whatever its application property `subject` says', async () => {
      const url = b.get().url;
      const c = await connect(url);
      try {
        const rcv = await openReceiver(c, { address: 'fa.subj', filter: { 'subject-filter': described(0x0000468c00000000n, 'red') } });
        await send(url, 'fa.subj', [
          { subject: 'red', application_properties: { subject: 'blue' }, body: 'is-red' },
          { subject: 'blue', application_properties: { subject: 'red' }, body: 'is-blue' },
        ]);
        expect(bodies(await collect(rcv, { idleMs: 800 }))).to.deep.equal(['is-red']);
      } finally { await c.close(); }
    });
  });

  describe('3. 64-bit integer application properties', () => {
    it('a selector on a long ns timestamp matches, on messages received while it is attached and on messages queued before', async () => {
      const url = b.get().url;
      const q = 'fa.long';
      await send(url, q, [{ application_properties: { ts: long(NS) }, body: 'queued-ns' }, { application_properties: { ts: long(NS - 1n) }, body: 'queued-before' }]);
      const c = await connect(url);
      try {
        const rcv = await openReceiver(c, { address: q, filter: { s: described(SELECTOR, `ts >= ${NS}`) } });
        const pending = collect(rcv, { idleMs: 1000 });
        await sleep(100);
        await send(url, q, [{ application_properties: { ts: long(NS + 1n) }, body: 'live-ns' }, { application_properties: { ts: 5 }, body: 'small' }]);
        expect(bodies(await pending)).to.deep.equal(['queued-ns', 'live-ns']);
      } finally { await c.close(); }
    });
  });

  describe('4. an over-long topic binding', () => {
    it('the attach is refused with amqp:invalid-field', async () => {
      const c = await connect(b.get().url);
      try {
        let err: any;
        try { await openReceiver(c, { address: 'fa.topic', filter: { t: described(0x0000468c00000001n, 'a.'.repeat(33000) + '#') } }); } catch (e) { err = e; }
        expect(err, 'attach refused').to.not.equal(undefined);
        expect(err.condition).to.equal('amqp:invalid-field');
        expect(err.message).to.match(/topic binding: .*subject pattern too long/);
      } finally { await c.close(); }
    });
  });

  describe('6. a raw filter named __proto__ in a plain client\'s Qpid address', () => {
    it('is applied', async () => {
      const url = b.get().url;
      const c = await connect(url);
      try {
        const address = `fa.proto; {create: always, link: {filter: {name: __proto__, descriptor: '${SELECTOR}', value: "colour = 'red'"}}}`;
        const rcv = await openReceiver(c, { address });
        const pending = collect(rcv, { idleMs: 1000 });
        await sleep(100);
        await send(url, 'fa.proto', [{ application_properties: { colour: 'blue' }, body: 'blue' }, { application_properties: { colour: 'red' }, body: 'red' }]);
        expect(bodies(await pending)).to.deep.equal(['red']);
      } finally { await c.close(); }
    });

    it('an options map with a key __proto__ is refused as an unknown option, not read as its prototype', async () => {
      const c = await connect(b.get().url);
      try {
        let err: any;
        const options = t.wrap_map({ ['__proto__']: { top_n: 5 } });
        try { await openReceiver(c, { address: 'fa.options', filter: { o: described('tidemark:options:map', options) } }); } catch (e) { err = e; }
        expect(err, 'attach refused').to.not.equal(undefined);
        expect(err.condition).to.equal('amqp:invalid-field');
        expect(err.message).to.match(/unknown option __proto__/);
      } finally { await c.close(); }
    });
  });
});
