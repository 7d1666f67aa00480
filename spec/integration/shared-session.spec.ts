/**
 * Links that share one session share rhea's outgoing queue: a link whose credit was used up
 * by transfers of other links still waiting in that queue must start sending once rhea has
 * written them. (An audit saw a sow_and_subscribe with credit 5 get nothing, for good,
 * while a historical sow_and_subscribe and a checkpoint link streamed on its connection.)
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openSender, sendAll, sleep, type Conn } from '../support/client.js';
import { tmFilters } from '../support/sow-client.js';

const Q = 'shared-session-q';
const RECORDS = 300;

describe('links sharing one session', function () {
  this.timeout(60000);
  const b = useBroker();

  before(async () => {
    const c = await connect(b.get().url);
    try {
      const s = await openSender(c, { address: Q, capabilities: ['create-on-demand', 'queue', 'durable'], dynamic_node_properties: { 'sow.key': '/id', 'sow.history.window': '1h', durable: true } });
      const out = await sendAll(s, Array.from({ length: RECORDS }, (_, i) => ({ durable: true, body: JSON.stringify({ id: 'k' + String(i).padStart(3, '0'), v: i }) })));
      expect(out.filter((o) => o.state === 'accepted')).to.have.length(RECORDS);
    } finally { await c.close(); }
  });

  /** Opens a receiver on `conn` with `credit` (granted once attached) and counts what arrives. */
  function counted(conn: Conn, name: string, filter: Record<string, unknown> | undefined, credit: number): { got: string[]; link: any } {
    const got: string[] = [];
    const link = conn.connection.open_receiver({ name, source: { address: Q, filter }, autoaccept: true, credit_window: 0 });
    link.once('receiver_open', () => link.add_credit(credit));
    link.on('message', (ctx: any) => got.push(String(ctx.message.message_annotations?.['x-opt-tm-cmd'] ?? '')));
    return { got, link };
  }

  for (let round = 1; round <= 3; round++) {
    it(`a sow_and_subscribe with small credit gets its messages while other links stream on the session (round ${round})`, async () => {
      const c = await connect(b.get().url);
      try {
        // Opened in one go, as the audit did: a replay that stops at its credit, a historical
        // snapshot and a checkpoint bootstrap of 300 each, and the small-credit snapshot last.
        counted(c, 'replay-5', tmFilters({ command: 'subscribe', bookmark: '0' }), 5);
        const hist = counted(c, 'historical', tmFilters({ command: 'sow_and_subscribe', bookmark: '1' }), 1000);
        const ckpt = counted(c, 'checkpoint', tmFilters({ checkpoint: JSON.stringify({ windowScn: -1, prevScn: -1, windowOffset: -1, consumption_mode: 'ONLINE_CONSUMPTION' }) }), 1000);
        const small = counted(c, 'snapshot-5', tmFilters({ command: 'sow_and_subscribe' }), 5);
        for (let i = 0; i < 100 && (small.got.length < 5 || hist.got.length < RECORDS + 2 || ckpt.got.length < RECORDS); i++) await sleep(50);
        // the state at SCN 1 (one record), then the other 299 as events
        expect(hist.got.filter((x) => x === 'sow' || x === 'publish'), 'historical records and events').to.have.length(RECORDS);
        expect(ckpt.got.length, 'checkpoint records').to.be.at.least(RECORDS);
        expect(small.got, 'the small-credit link').to.deep.equal(['group_begin', 'sow', 'sow', 'sow', 'sow']);
      } finally { await c.close(); }
    });
  }
});
