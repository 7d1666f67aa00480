/**
 * sow_and_subscribe with a content filter and no `oof`: a delivered record that stops
 * matching leaves focus silently (the client keeps the state it was sent), and a later delete
 * of it is still sent (semantics.md 5: "`delete` when a delivered record is deleted"). The link
 * used to forget the record when it stopped matching, so the delete never came and the client
 * held a deleted record for good (found by a model-based concurrency test, session 23).
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openReceiver, send, sleep } from '../support/client.js';
import { tmFilters, cmdOf, keyOf, bodyJson } from '../support/sow-client.js';

const sq = (name: string) => ({ address: name, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } });
const pub = (id: string, v: number) => ({ body: JSON.stringify({ id, v }) });
const del = (id: string) => ({ body: JSON.stringify({ id }), message_annotations: { 'x-opt-tm-op': 'delete' } });

describe('a filtered sow_and_subscribe: a record that left the filter and is then deleted', function () {
  this.timeout(30000);
  const b = useBroker();

  async function run(queue: string, oof: boolean): Promise<string[]> {
    await send(b.get().url, sq(queue), [pub('k', 10), pub('other', 10)]);
    const c = await connect(b.get().url);
    try {
      const rcv = await openReceiver(c, { address: queue, filter: tmFilters({ command: 'sow_and_subscribe', filter: '/v > 5', options: oof ? { oof: true } : {} }) });
      const seen: string[] = [];
      rcv.on('message', (ctx: any) => {
        const m = { message: ctx.message, delivery: ctx.delivery };
        const cmd = cmdOf(m);
        const reason = ctx.message.message_annotations?.['x-opt-tm-oof-reason'];
        if (cmd === 'group_begin' || cmd === 'group_end') seen.push(cmd);
        else seen.push(`${cmd}${reason ? `(${reason})` : ''}:${keyOf(m)}${cmd === 'publish' || cmd === 'sow' ? `=${bodyJson(m).v}` : ''}`);
        ctx.delivery.accept();
      });
      rcv.add_credit(100);
      await sleep(300);
      await send(b.get().url, queue, [pub('k', 1)]); // k stops matching
      await send(b.get().url, queue, [del('k')]);
      await send(b.get().url, queue, [del('other')]);
      await sleep(500);
      return seen;
    } finally { await c.close(); }
  }

  it('without oof: nothing when it stops matching, then the delete (before: no delete for k)', async function () {
    expect(await run('lv.plain', false)).to.deep.equal(['group_begin', 'sow:k=10', 'sow:other=10', 'group_end', 'delete:k', 'delete:other']);
  });

  it('with oof: oof match when it stops matching, and nothing for its delete (unchanged)', async function () {
    expect(await run('lv.oof', true)).to.deep.equal(['group_begin', 'sow:k=10', 'sow:other=10', 'group_end', 'oof(match):k', 'oof(deleted):other']);
  });
});
