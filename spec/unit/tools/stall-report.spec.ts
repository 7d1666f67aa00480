/**
 * The latency stall report (tools/bench/lib/stall-report.ts) on a hand-made scheduler trace:
 * a broker (pid 100, threads 100 and 104) and a client (pid 200, threads 200 and 203) on two
 * cores, one message sent at t = 10.000 s that took 5.5 ms because thread 104 of the broker
 * waited 4 ms for a core held by the client's thread 203.
 */
import { expect } from 'chai';
import { formatStallReport, parseLatencyTrace, parsePerfSched, stallReport } from '../../../tools/bench/lib/stall-report.js';

const sw = (t: string, cpu: number, pid: number, tid: number, prev: number, state: string, next: number) =>
  `            node ${pid}/${tid}    [00${cpu}] ${t}: sched:sched_switch: prev_comm=node prev_pid=${prev} prev_prio=120 prev_state=${state} ==> next_comm=node next_pid=${next} next_prio=120`;
const wk = (t: string, cpu: number, pid: number, tid: number, woken: number, target: number) =>
  `            node ${pid}/${tid}    [00${cpu}] ${t}: sched:sched_wakeup: comm=node pid=${woken} prio=120 target_cpu=00${target}`;

const PERF = [
  sw('9.999000', 1, 0, 0, 0, 'R', 203), // core 1: the client's helper thread takes it
  sw('9.999500', 0, 0, 0, 0, 'R', 100), // core 0: the broker's main thread
  wk('10.000500', 0, 100, 100, 104, 1), // main wakes its worker onto core 1, held by 203
  sw('10.000600', 0, 100, 100, 100, 'S', 0), // main sleeps: core 0 idle
  'a line perf prints that is not an event',
  sw('10.004500', 1, 200, 203, 203, 'R', 104), // 4 ms later the worker gets core 1
  sw('10.004700', 1, 100, 104, 104, 'S', 203),
  wk('10.004800', 1, 200, 203, 100, 0),
  sw('10.004900', 0, 0, 0, 0, 'R', 100),
  sw('10.005400', 0, 100, 100, 100, 'S', 0),
].join('\n');

const TRACE = [
  '# tidemark-bench latency trace, client pid 200',
  'side,round,queue,sent_mono_ms,latency_ms',
  'A,1,q-r1-lat,9990.000,0.400',
  'A,1,q-r1-lat,10000.000,5.500',
  'A,1,q-r1-lat,10001.000,4.600', // same stall (within 30 ms), not the slowest
  'A,1,q-r1-lat,11000.000,0.500',
].join('\n');

describe('latency stall report (tools/bench/stalls.ts)', () => {
  it('parses perf script sched lines and the latency trace (client pid from its header)', () => {
    const ev = parsePerfSched(PERF);
    expect(ev).to.have.length(9);
    expect(ev[2]).to.include({ kind: 'wakeup', wokenTid: 104, t: 10.0005, pid: 100, tid: 100 });
    expect(ev[3]).to.include({ kind: 'switch', prevTid: 100, prevState: 'S', nextTid: 0, cpu: 0 });
    const tr = parseLatencyTrace(TRACE);
    expect(tr.clientPid).to.equal(200);
    expect(tr.rows.map((r) => r.latencyMs)).to.deep.equal([0.4, 5.5, 4.6, 0.5]);
    expect(tr.rows[1]).to.deep.equal({ side: 'A', round: 1, sentMs: 10000, latencyMs: 5.5 });
  });

  it('one stall per run of slow messages: who waited for a core, and who held the cores', () => {
    const rep = stallReport(parsePerfSched(PERF), parseLatencyTrace(TRACE).rows, 100, 200, 4);
    expect(rep.stalls).to.have.length(1);
    const s = rep.stalls[0];
    expect(s).to.include({ side: 'A', round: 1, startMs: 10000, latencyMs: 5.5 });
    expect(s.windowMs).to.be.closeTo(5.6, 1e-6); // to the arrival of the one sent at 10.001
    // the broker's worker: runnable from its wakeup at 10.0005 until it got core 1 at 10.0045
    expect(s.waiting['broker thread 104']).to.be.closeTo(4, 1e-6);
    // the client's helper, preempted by 104 for its 0.2 ms; the broker's main, woken at
    // 10.0048 and on core 0 at 10.0049
    expect(s.waiting['client thread 203']).to.be.closeTo(0.2, 1e-6);
    expect(s.waiting['broker main']).to.be.closeTo(0.1, 1e-6);
    expect(Object.keys(s.waiting)).to.have.members(['broker thread 104', 'client thread 203', 'broker main']);
    // window 10.000-10.0056 (the trace ends at 10.0054): core 1 held by the client's helper
    // but for 104's 0.2 ms; core 0 by the broker's main for 0.6 + 0.5 ms, idle in between
    expect(s.running['client thread 203']).to.be.closeTo(4.5 + 0.7, 1e-6);
    expect(s.running['broker thread 104']).to.be.closeTo(0.2, 1e-6);
    expect(s.running['broker main']).to.be.closeTo(1.1, 1e-6);
    expect(s.running.idle).to.be.closeTo(4.3, 1e-6);
    expect(rep.waitingTotal).to.have.keys(['broker other threads', 'client other threads', 'broker main']);
    expect(rep.waitingTotal['broker other threads']).to.be.closeTo(4, 1e-6);
    expect(formatStallReport(rep)).to.match(/A round 1 at 10000\.0: 5\.5 ms \(window 5\.6 ms\); runnable, waiting for a core \(ms\): broker thread 104 4\.0, client thread 203 0\.2, broker main 0\.1;/);
  });

  it('no stall when every message is under the threshold', () => {
    const rep = stallReport(parsePerfSched(PERF), parseLatencyTrace(TRACE).rows, 100, 200, 6);
    expect(rep.stalls).to.have.length(0);
    expect(formatStallReport(rep)).to.match(/^0 stall\(s\)/);
  });
});
