/**
 * Filters a client chooses must not hold the broker (session 22 security review, docs/robustness.md
 * section 13 "Resource exhaustion"; docs/filters.md "Limits"). Each timing case publishes one
 * message to the attacker's own queue and attaches one browsing link with the filter, while a
 * control client's publishes are timed: the broker runs as a child process.
 */
import { expect } from 'chai';
import { child, pinger, rssMB, type Child } from '../support/child-broker.js';
import { connect, openSender, openReceiver, collect, sendAll, sleep } from '../support/client.js';
import { tmFilters } from '../support/sow-client.js';

const HEAVY = '.{0,1000}'.repeat(9) + 'z'; // ~18,000 regex states, ~9,000 threads alive a character

describe('filters a client chooses (session 22 review)', function () {
  this.timeout(120000);
  let b: Child;
  before(async () => { b = await child(); });
  after(async () => { await b?.stop(); });

  /** The longest a control publish waited while a link with `source` read `message`; and what the link got. */
  async function probe(queue: string, message: any, source: any): Promise<{ worst: number; got: number }> {
    const c = await connect(b.url);
    try {
      await sendAll(await openSender(c, queue), [message]);
      const ping = await pinger(b.url, 20);
      await sleep(300);
      const rcv = await openReceiver(c, source);
      const got = await collect(rcv, { credit: 10, idleMs: 1500 });
      const worst = await ping.stop();
      return { worst, got: got.length };
    } finally { await c.close(); }
  }

  it('content filter: a regex LIKE over a 24 KB string does not hold other clients (8.6 s before)', async function () {
    const { worst, got } = await probe('fd.re', { body: JSON.stringify({ s: 'a'.repeat(24000) }) },
      { address: 'fd.re', distribution_mode: 'copy', filter: tmFilters({ filter: `/s LIKE '${HEAVY}'` }) });
    expect(got, 'past the evaluation budget the LIKE is NULL: no match').to.equal(0);
    expect(worst, 'ms a publish of another client waited').to.be.below(1000);
  });

  it('JMS selector: LIKE with an 8000-character pattern over a 64 KB property does not hold other clients (5.9 s before)', async function () {
    const pat = '%' + 'a'.repeat(8000) + 'b';
    const { worst, got } = await probe('fd.sel', { body: 'x', application_properties: { p: 'a'.repeat(65000) } },
      { address: 'fd.sel', distribution_mode: 'copy', filter: tmFilters({ selector: `p LIKE '${pat}'` }) });
    expect(got).to.equal(0);
    expect(worst, 'ms a publish of another client waited').to.be.below(1000);
    // And it still matches what it should.
    const hit = await probe('fd.sel2', { body: 'x', application_properties: { p: 'a'.repeat(65000) + 'b' } },
      { address: 'fd.sel2', distribution_mode: 'copy', filter: tmFilters({ selector: `p LIKE '${pat}'` }) });
    expect(hit.got).to.equal(1);
  });

  it('INSTR with an 8000-character needle over a 1 MB string does not hold other clients (V8 indexOf: 1.5 s each)', async function () {
    const needle = 'a'.repeat(4000) + 'b' + 'a'.repeat(3999);
    const text = Array.from({ length: 4 }, () => `INSTR(/s, '${needle}') > 0`).join(' OR ');
    const { worst, got } = await probe('fd.instr', { body: JSON.stringify({ s: 'a'.repeat(1 << 20) }) },
      { address: 'fd.instr', distribution_mode: 'copy', filter: tmFilters({ filter: text }) });
    expect(got).to.equal(0);
    expect(worst, 'ms a publish of another client waited').to.be.below(1000);
  });

  it('UPPER over a 4 MB string 600 times does not hold other clients (2.8 s before)', async function () {
    const text = Array.from({ length: 600 }, () => "UPPER(/s) = 'X'").join(' OR ');
    const { worst } = await probe('fd.upper', { body: JSON.stringify({ s: 'a'.repeat(4 << 20) }) },
      { address: 'fd.upper', distribution_mode: 'copy', filter: tmFilters({ filter: text }) });
    expect(worst, 'ms a publish of another client waited').to.be.below(1000);
  });

  it('a selector `qty > 10` meeting a 60,000-digit string property does not hold other clients (3.1 s before)', async function () {
    // Any consumer comparing a property with a number: the publisher alone chooses the value.
    const { worst, got } = await probe('fd.num', { body: 'x', application_properties: { qty: '1'.repeat(60000) + 'x' } },
      { address: 'fd.num', distribution_mode: 'copy', filter: tmFilters({ selector: 'qty > 10' }) });
    expect(worst, 'ms a publish of another client waited').to.be.below(1000);
    expect(got, 'a non-numeric string is greater than any number').to.equal(1);
  });

  it('comparing two 20,000-element arrays of an 80 KB body does not hold other clients (3.5 s before)', async function () {
    const body = JSON.stringify({ a: new Array(20000).fill(1), b: new Array(20000).fill(2) });
    const { worst, got } = await probe('fd.pairs', { body },
      { address: 'fd.pairs', distribution_mode: 'copy', filter: tmFilters({ filter: '/a = /b' }) });
    expect(worst, 'ms a publish of another client waited').to.be.below(1000);
    expect(got, 'past the budget the comparison is NULL').to.equal(0);
  });

  it('20 clauses reading /a/x over a body of 500,000 objects do not hold other clients (3.5 s before)', async function () {
    const body = JSON.stringify({ a: new Array(500000).fill({ x: 0 }), s: 'ok' });
    const text = Array.from({ length: 20 }, (_, i) => `/a/x = ${i + 1}`).join(' OR ') + " OR /s = 'ok'";
    const { worst, got } = await probe('fd.fanout', { body },
      { address: 'fd.fanout', distribution_mode: 'copy', filter: tmFilters({ filter: text }) });
    expect(worst, 'ms a publish of another client waited').to.be.below(1000);
    expect(got, '/s is read after the budget is spent').to.equal(1);
  });

  it('one attach with 600 heavy LIKEs (58 KB) is refused at once naming the limit, and holds no memory (3.7 s and +331 MB before)', async function () {
    const clause = `/s LIKE '${HEAVY}'`;
    const balanced = (n: number): string => (n === 1 ? clause : `(${balanced(n >> 1)} OR ${balanced(n - (n >> 1))})`);
    const text = balanced(600);
    expect(text.length).to.be.below(65536);
    const c = await connect(b.url);
    try {
      await sendAll(await openSender(c, 'fd.mem'), [{ body: 'not json' }]);
      await sleep(500);
      const before = rssMB(b.pid);
      const t0 = performance.now();
      let err: any;
      try { await openReceiver(c, { address: 'fd.mem', distribution_mode: 'copy', filter: tmFilters({ filter: text }) }); } catch (e) { err = e; }
      const attachMs = performance.now() - t0;
      await sleep(1000);
      const grew = rssMB(b.pid) - before;
      expect(err?.condition).to.equal('amqp:invalid-field');
      expect(err?.message).to.match(/LIKE patterns too complex in total \(more than 50000 regex states in one filter\)/);
      expect(attachMs, 'ms to answer the attach').to.be.below(1000);
      expect(grew, 'MB held after the attach').to.be.below(50);
    } finally { await c.close(); }
  });

  it('a filter within the allowance (3 × 16,000 states) is accepted and matches', async function () {
    const p = '.{0,1000}'.repeat(8) + 'z';
    const text = `/a LIKE '${p}' OR /b LIKE '${p}' OR /s LIKE '${p}'`;
    const { got, worst } = await probe('fd.ok', { body: JSON.stringify({ s: 'xyz' }) },
      { address: 'fd.ok', distribution_mode: 'copy', filter: tmFilters({ filter: text }) });
    expect(got).to.equal(1);
    expect(worst).to.be.below(1000);
  });
});
