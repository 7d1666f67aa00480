/**
 * Crash safety, bounded (acceptance E.1): two rounds of tools/crash-test.ts — 10 publishers,
 * kill -9 at a random moment, restart on the same data, every accepted message present once
 * and in order per publisher. The long run is documented in docs/robustness.md.
 */
import { expect } from 'chai';
import { runCrashTest } from '../../tools/crash-test.js';

describe('crash safety: kill -9 while 10 publishers send (acceptance E.1)', function () {
  this.timeout(60000);

  it('loses, duplicates and reorders nothing accepted over 2 rounds', async function () {
    const lines: string[] = [];
    const seed = Number(process.env.TIDEMARK_CRASH_SEED ?? 20240601);
    const res = await runCrashTest({ rounds: 2, publishers: 10, messages: 150, queues: 3, seed, log: (l) => lines.push(l) });
    expect(res.violations, lines.join('\n')).to.deep.equal([]);
    expect(res.rounds).to.equal(2);
    expect(res.accepted, 'some deliveries were accepted before the kills').to.be.greaterThan(0);
    expect(res.checked).to.be.at.least(res.accepted);
    expect(lines.at(-1)).to.match(/^rounds=2 messages checked=\d+ lost=0 duplicated=0$/);
  });
});
