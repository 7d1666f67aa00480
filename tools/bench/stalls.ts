/**
 * Stall report: where the slow messages of a latency run waited (lib/stall-report.ts).
 *
 *   perf record -k mono -a -e sched:sched_switch,sched:sched_wakeup -o sched.data -- sleep 30 &
 *   tidemark-bench ... --workloads latency --latency-trace lat.csv
 *   perf script -i sched.data -F comm,pid,tid,cpu,time,event,trace > sched.txt
 *   npx tsx tools/bench/stalls.ts --perf sched.txt --trace lat.csv --broker-pid PID
 */
import { readFile } from 'node:fs/promises';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { main, ToolError } from '../common/cli.js';
import { formatStallReport, parseLatencyTrace, parsePerfSched, stallReport } from './lib/stall-report.js';

main(async () => {
  const argv = await yargs(hideBin(process.argv))
    .scriptName('stalls')
    .usage('$0 --perf SCHED.txt --trace LAT.csv --broker-pid PID')
    .option('perf', { type: 'string', demandOption: true, describe: '`perf script -F comm,pid,tid,cpu,time,event,trace` output of a `perf record -k mono` sched_switch/sched_wakeup trace' })
    .option('trace', { type: 'string', demandOption: true, describe: 'the file of tidemark-bench --latency-trace' })
    .option('broker-pid', { type: 'number', demandOption: true, describe: 'PID of the broker that was measured' })
    .option('client-pid', { type: 'number', describe: 'PID of the bench client (default: from the trace file)' })
    .option('threshold', { type: 'number', default: 5, describe: 'a message slower than this (ms) is part of a stall' })
    .option('json', { type: 'boolean', default: false, describe: 'print the report as JSON' })
    .strict()
    .help()
    .parseAsync();
  const trace = parseLatencyTrace(await readFile(argv.trace, 'utf8'));
  const clientPid = argv['client-pid'] ?? trace.clientPid;
  if (!clientPid) throw new ToolError(`${argv.trace} names no client pid: pass --client-pid`);
  const events = parsePerfSched(await readFile(argv.perf, 'utf8'));
  if (!events.length) throw new ToolError(`${argv.perf} has no sched_switch/sched_wakeup lines: print it with perf script -F comm,pid,tid,cpu,time,event,trace`);
  const rep = stallReport(events, trace.rows, argv['broker-pid'], clientPid, argv.threshold);
  console.log(argv.json ? JSON.stringify(rep, null, 2) : formatStallReport(rep));
});
