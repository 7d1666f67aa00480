/**
 * Where a latency stall went: the slow messages of a `tidemark-bench --latency-trace` file
 * set beside a kernel scheduler trace of the same seconds (`perf record -k mono -a -e
 * sched:sched_switch,sched:sched_wakeup`, printed by `perf script -F
 * comm,pid,tid,cpu,time,event,trace`). For each stall it gives, per thread of the broker
 * and of the client, how long the thread was runnable but not on a core, and what ran on
 * the cores meanwhile. docs/performance.md "Where the latency tail comes from" is what it found.
 */

export interface SchedEvent { t: number; cpu: number; pid: number; tid: number; kind: 'switch' | 'wakeup'; prevTid?: number; prevState?: string; nextTid?: number; wokenTid?: number }

const LINE = /^\s*(.+?)\s+(\d+)\/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:sched_(switch|wakeup):\s+(.*)$/;

/** The sched_switch and sched_wakeup events of `perf script` output; other lines are skipped. */
export function parsePerfSched(text: string): SchedEvent[] {
  const out: SchedEvent[] = [];
  for (const line of text.split('\n')) {
    const m = LINE.exec(line);
    if (!m) continue;
    const [, , pid, tid, cpu, t, kind, rest] = m;
    const ev: SchedEvent = { t: Number(t), cpu: Number(cpu), pid: Number(pid), tid: Number(tid), kind: kind as SchedEvent['kind'] };
    if (kind === 'switch') {
      ev.prevTid = Number(/prev_pid=(\d+)/.exec(rest)?.[1]);
      ev.prevState = /prev_state=(\S+)/.exec(rest)?.[1];
      ev.nextTid = Number(/next_pid=(\d+)/.exec(rest)?.[1]);
    } else {
      ev.wokenTid = Number(/\bpid=(\d+)/.exec(rest)?.[1]);
    }
    out.push(ev);
  }
  return out;
}

export interface TraceRow { side: string; round: number; sentMs: number; latencyMs: number }

/** The rows of a `--latency-trace` file, and the client's PID from its first line. */
export function parseLatencyTrace(text: string): { clientPid?: number; rows: TraceRow[] } {
  const rows: TraceRow[] = [];
  let clientPid: number | undefined;
  for (const line of text.split('\n')) {
    const pid = /client pid (\d+)/.exec(line);
    if (pid) { clientPid ??= Number(pid[1]); continue; }
    const f = line.split(',');
    if (f.length !== 5 || f[0] === 'side') continue;
    rows.push({ side: f[0], round: Number(f[1]), sentMs: Number(f[3]), latencyMs: Number(f[4]) });
  }
  return { clientPid, rows };
}

export interface Stall { side: string; round: number; startMs: number; latencyMs: number; windowMs: number; waiting: Record<string, number>; running: Record<string, number> }

export interface StallReport { stalls: Stall[]; waitingTotal: Record<string, number>; runningTotal: Record<string, number> }

/**
 * Stalls = runs of messages over `thresholdMs` sent within `gapMs` of each other; a stall's
 * window runs from the first one's send to the latest arrival among them. `waiting`: ms each
 * thread was runnable and off the cores in the window; `running`: ms each held a core
 * there, summed over the cores ('idle' = a core with nothing to run).
 */
export function stallReport(events: SchedEvent[], rows: TraceRow[], brokerPid: number, clientPid: number, thresholdMs = 5, gapMs = 30): StallReport {
  const pidOf = new Map<number, number>();
  for (const e of events) pidOf.set(e.tid, e.pid);
  // Each other thread by its id: without call stacks the trace cannot tell a libuv worker
  // from a V8 helper; `perf record -g` and the thread's stacks can.
  const role = (tid: number): string => {
    if (tid === 0) return 'idle';
    if (tid === brokerPid) return 'broker main';
    if (tid === clientPid) return 'client main';
    const p = pidOf.get(tid);
    if (p === brokerPid) return `broker thread ${tid}`;
    if (p === clientPid) return `client thread ${tid}`;
    return 'other processes';
  };
  // Runnable spans: from a wakeup (or a preemption, prev_state R) to the switch onto a core.
  const waits: Array<[number, number, number]> = [];
  const runs: Array<[number, number, number]> = [];
  const since = new Map<number, number>();
  const onCpu = new Map<number, [number, number]>();
  for (const e of events) {
    if (e.kind === 'wakeup') { if (!since.has(e.wokenTid!)) since.set(e.wokenTid!, e.t); continue; }
    if (e.prevState?.startsWith('R') && e.prevTid) since.set(e.prevTid, e.t); // preempted (not the idle task)
    const w = since.get(e.nextTid!);
    if (w !== undefined) { waits.push([w, e.t, e.nextTid!]); since.delete(e.nextTid!); }
    const cur = onCpu.get(e.cpu);
    if (cur) runs.push([cur[0], e.t, cur[1]]);
    onCpu.set(e.cpu, [e.t, e.nextTid!]);
  }
  const end = events.length ? events[events.length - 1].t : 0;
  for (const [start, tid] of onCpu.values()) runs.push([start, end, tid]); // still on a core when the trace ends
  const stalls: Stall[] = [];
  const sorted = rows.filter((r) => r.latencyMs > thresholdMs).sort((a, b) => a.sentMs - b.sentMs);
  let cluster: TraceRow[] = [];
  const flush = () => {
    if (!cluster.length) return;
    const worst = cluster.reduce((a, b) => (b.latencyMs > a.latencyMs ? b : a));
    const from = cluster[0].sentMs / 1000, to = Math.max(...cluster.map((r) => r.sentMs + r.latencyMs)) / 1000;
    const waiting: Record<string, number> = {}, running: Record<string, number> = {};
    const add = (into: Record<string, number>, spans: Array<[number, number, number]>, skipIdle: boolean) => {
      for (const [s, e, tid] of spans) {
        const overlap = Math.min(e, to) - Math.max(s, from);
        if (overlap <= 0) continue;
        const r = role(tid);
        if (skipIdle && (r === 'idle' || r === 'other processes')) continue;
        into[r] = (into[r] ?? 0) + overlap * 1000;
      }
    };
    add(waiting, waits, true);
    add(running, runs, false);
    stalls.push({ side: worst.side, round: worst.round, startMs: cluster[0].sentMs, latencyMs: worst.latencyMs, windowMs: (to - from) * 1000, waiting, running });
    cluster = [];
  };
  for (const r of sorted) {
    if (cluster.length && r.sentMs - cluster[cluster.length - 1].sentMs > gapMs) flush();
    cluster.push(r);
  }
  flush();
  // Totals by role: a thread id becomes "broker threads" / "client threads".
  const sum = (pick: (s: Stall) => Record<string, number>) => {
    const out: Record<string, number> = {};
    for (const s of stalls) for (const [k, v] of Object.entries(pick(s))) { const r = k.replace(/ thread \d+$/, ' other threads'); out[r] = (out[r] ?? 0) + v; }
    return out;
  };
  return { stalls, waitingTotal: sum((s) => s.waiting), runningTotal: sum((s) => s.running) };
}

/** The report as text: one line per stall, then the totals. */
export function formatStallReport(rep: StallReport): string {
  const fmt = (o: Record<string, number>) => Object.entries(o).sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${v.toFixed(1)}`).join(', ') || '-';
  const lines = rep.stalls.map((s) => `${s.side} round ${s.round} at ${s.startMs.toFixed(1)}: ${s.latencyMs.toFixed(1)} ms (window ${s.windowMs.toFixed(1)} ms); runnable, waiting for a core (ms): ${fmt(s.waiting)}; on the cores (ms): ${fmt(s.running)}`);
  lines.push(`${rep.stalls.length} stall(s). Runnable and waiting, in all (ms): ${fmt(rep.waitingTotal)}. On the cores, in all (ms): ${fmt(rep.runningTotal)}`);
  return lines.join('\n');
}
