/**
 * Issue #7, bounded: `drain --checkpoint` killed with kill -9 at random points while a publisher
 * writes (publish / delta / delete, some in transactions), restarted each time; the state folded
 * from what it applied (up to the checkpoint in its file at each kill) must equal the SOW, and
 * the events it applied must have no gap and no duplicate. The log is short (log.max_count), so
 * the consumer falls off and bootstraps (snapshot, catch-up, online), also from the middle of a
 * catch-up; kills must land in each phase and mid-window. tools/crash/drain-kill.ts does the
 * work; the long run is in docs/robustness.md. The tools run from dist/: build first.
 *
 * TIDEMARK_DRAINKILL_SEED, TIDEMARK_DRAINKILL_ROUNDS and TIDEMARK_DRAINKILL_TX (share of
 * transactional op groups, 0 = none) change the run.
 */
import { expect } from 'chai';
import { runDrainKill, type Printed } from '../../tools/crash/drain-kill.js';

describe('tools: drain --checkpoint under kill -9 while a publisher writes (issue #7)', function () {
  this.timeout(180000);

  it('the applied state equals the SOW and applied events have no gap or duplicate, over 10 kills in every phase', async function () {
    const lines: string[] = [];
    const seed = Number(process.env.TIDEMARK_DRAINKILL_SEED ?? 20240607);
    const rounds = Number(process.env.TIDEMARK_DRAINKILL_ROUNDS ?? 10);
    const txShare = Number(process.env.TIDEMARK_DRAINKILL_TX ?? 0.3);
    const res = await runDrainKill({ rounds, seed, txShare, log: (l) => lines.push(l) });
    const report = `seed ${seed}\n${lines.join('\n')}`;
    expect(res.violations, report).to.deep.equal([]);
    expect(res.kills).to.equal(rounds);
    expect(res.landed.snapshot, 'kills in the snapshot\n' + report).to.be.at.least(1);
    expect(res.landed.catchup, 'kills in the catch-up\n' + report).to.be.at.least(1);
    expect(res.landed.online, 'kills online\n' + report).to.be.at.least(1);
    if (txShare > 0) {
      expect(res.midWindow, 'kills mid-window\n' + report).to.be.at.least(1);
      expect(res.midWindowResumes, 'restarts that resumed mid-window\n' + report).to.be.at.least(1);
    }
    expect(res.fresh.catchup, 'fell off the log during catch-up\n' + report).to.be.at.least(1);
    expect(res.fresh.online, 'fell off the log while online\n' + report).to.be.at.least(1);
    expect(res.snapshotResumes, 'snapshots resumed after a kill\n' + report).to.be.at.least(1);
    expect(res.events, report).to.be.greaterThan(100);
    expect(res.finalRecords, report).to.be.greaterThan(0);
    expect(lines.at(-1)).to.match(/^kills=\d+ .* violations=0$/);
  });

  it('fails when the consumer drops one applied event (the checks are live)', async function () {
    let dropped: Printed | undefined;
    const lines: string[] = [];
    const res = await runDrainKill({
      rounds: 3, seed: 11, txShare: 0, requireCoverage: false, log: (l) => lines.push(l),
      tamper: (_run, applied) => {
        if (dropped) return applied;
        const i = applied.findIndex((m) => m.cmd === 'publish' || m.cmd === 'delete');
        if (i < 0) return applied;
        dropped = applied[i];
        return [...applied.slice(0, i), ...applied.slice(i + 1)];
      },
    });
    expect(dropped, lines.join('\n')).to.not.equal(undefined);
    expect(res.violations.map((v) => v.check), lines.join('\n')).to.include('gap');
  });
});
