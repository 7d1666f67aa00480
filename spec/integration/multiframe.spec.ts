/**
 * Multi-frame transfers [AMQP 2.7.5] (the second case: rhea-guards.ts patch 5, session 22):
 *  - interleaved on two links of one session (allowed: one incomplete delivery per link);
 *  - settled=true on the LAST frame only: "For subsequent transfers in a multi-transfer delivery
 *    if the settled flag is left unset then it MUST be interpreted as true if and only if the
 *    value of the settled flag on any of the preceding transfers was true" -> a delivery settled
 *    on any frame is settled; the receiver sends no disposition for it.
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { connect, openReceiver, collect } from '../support/client.js';
import * as F from '../support/amqp-frames.js';
import { RawClient, t, Code } from '../support/amqp-frames.js';

function transfer(o: { handle?: number; id?: number | null; settled?: boolean; more?: boolean; payload?: Buffer }): Buffer {
  const first = o.id !== null && o.id !== undefined;
  return F.amqp(Code.transfer, [
    t.uint(o.handle ?? 0), first ? t.uint(o.id!) : null, first ? t.bin(Buffer.from(String(o.id))) : null, first ? t.uint(0) : null,
    o.settled === undefined ? null : t.bool(o.settled), o.more === undefined ? null : t.bool(o.more),
  ], 0, o.payload ?? Buffer.alloc(0));
}
const names = (c: RawClient) => c.frames.map((f) => f.name + (f.error ? `{${f.error.condition}: ${f.error.description}}` : ''));
const senderAttach = (name: string, address: string, handle: number) => F.attach({ name: t.str(name), handle: t.uint(handle), role: t.bool(false), source: F.source(), target: F.target({ address: t.str(address) }) });

describe('multi-frame transfers', function () {
  this.timeout(20000);
  const b = useBroker({ limits: { idleTimeoutMs: 60000, senderCredit: 10 } });

  it('interleaved multi-frame deliveries on two links are both stored and accepted', async () => {
    const qa = 'proto22.mfa.' + Math.random().toString(36).slice(2), qb = qa + 'b';
    const c = await RawClient.connect(b.get().port);
    try {
      await c.handshake();
      c.write(senderAttach('sa', qa, 0), senderAttach('sb', qb, 1));
      expect(await c.waitFor((x) => x.frames.filter((f) => f.name === 'flow').length >= 2, 3000), names(c).join(',')).to.equal(true);
      const ma = F.amqpValueMessage('A'.repeat(300)), mb = F.amqpValueMessage('B'.repeat(300));
      c.write(
        transfer({ handle: 0, id: 0, more: true, payload: ma.subarray(0, 100) }),
        transfer({ handle: 1, id: 1, more: true, payload: mb.subarray(0, 100) }),
        transfer({ handle: 0, id: null, more: true, payload: ma.subarray(100, 200) }),
        transfer({ handle: 1, id: null, more: false, payload: mb.subarray(100) }),
        transfer({ handle: 0, id: null, more: false, payload: ma.subarray(200) }),
      );
      await c.waitFor((x) => x.frames.filter((f) => f.name === 'disposition').length >= 2 || x.frames.some((f) => f.name === 'end' || f.name === 'close'), 3000);
      expect(names(c).filter((n) => n.startsWith('end') || n.startsWith('close') || n.startsWith('detach'))).to.deep.equal([]);
      const conn = await connect(b.get().url);
      try {
        const ra = await openReceiver(conn, { address: qa });
        expect((await collect(ra, { count: 1, idleMs: 1500 })).map((m) => m.message.body)).to.deep.equal(['A'.repeat(300)]);
        const rb = await openReceiver(conn, { address: qb });
        expect((await collect(rb, { count: 1, idleMs: 1500 })).map((m) => m.message.body)).to.deep.equal(['B'.repeat(300)]);
      } finally { await conn.close(); }
    } finally { c.destroy(); }
  });

  it('a delivery settled on its last frame gets no disposition (it is settled) and is stored', async () => {
    const q = 'proto22.mfs.' + Math.random().toString(36).slice(2);
    const c = await RawClient.connect(b.get().port);
    try {
      await c.handshake();
      c.write(senderAttach('s', q, 0));
      expect(await c.waitFor((x) => x.frames.some((f) => f.name === 'flow'), 3000)).to.equal(true);
      const m = F.amqpValueMessage('settled-late');
      c.write(transfer({ handle: 0, id: 0, settled: false, more: true, payload: m.subarray(0, 5) }), transfer({ handle: 0, id: null, settled: true, more: false, payload: m.subarray(5) }));
      // control delivery, unsettled: its disposition marks when the broker has answered both
      const m2 = F.amqpValueMessage('unsettled');
      c.write(transfer({ handle: 0, id: 1, settled: false, more: false, payload: m2 }));
      await c.waitFor((x) => x.frames.some((f) => f.name === 'disposition' && ((f.fields[2] ?? f.fields[1]) as number) >= 1), 3000);
      await new Promise((r) => setTimeout(r, 200));
      const disps = c.frames.filter((f) => f.name === 'disposition').map((f) => [f.fields[1], f.fields[2] ?? f.fields[1]]);
      expect(disps.some(([a]) => a === 0), 'disposition(s) ' + JSON.stringify(disps)).to.equal(false);
      const conn = await connect(b.get().url);
      try {
        const r = await openReceiver(conn, { address: q });
        expect((await collect(r, { count: 2, idleMs: 1500 })).map((x) => x.message.body)).to.deep.equal(['settled-late', 'unsettled']);
      } finally { await conn.close(); }
    } finally { c.destroy(); }
  });
});
