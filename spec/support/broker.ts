/**
 * Test brokers: in-process (fast, with an injectable clock) or as a child process (for
 * kill -9). Each starts on 127.0.0.1 port 0 with a fresh temporary data directory; set-up
 * and tear-down are registered together.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startBroker, type Broker, type Clock } from '../../lib/index.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export function tempDir(prefix = 'tidemark-'): string {
  return mkdtempSync(path.join(tmpdir(), prefix));
}

export interface TestBroker {
  broker: Broker;
  url: string;
  port: number;
  dataDir: string;
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** Starts an in-process broker; `overrides` are config keys. */
export async function startTestBroker(overrides: Record<string, unknown> = {}, opts: { clock?: Clock; dataDir?: string } = {}): Promise<TestBroker> {
  const dataDir = opts.dataDir ?? tempDir();
  const cfg = { dataDir, listen: { host: '127.0.0.1', port: 0 }, logLevel: process.env.TIDEMARK_TEST_LOG ?? 'silent', http: { enabled: false }, ...overrides };
  let broker = await startBroker({ overrides: cfg, clock: opts.clock });
  const tb: TestBroker = {
    broker,
    url: broker.urls[0],
    port: Number(new URL(broker.urls[0]).port),
    dataDir,
    async restart() {
      await broker.stop();
      broker = await startBroker({ overrides: { ...cfg, listen: { host: '127.0.0.1', port: tb.port } }, clock: opts.clock });
      tb.broker = broker;
    },
    async stop() {
      await broker.stop();
      if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return tb;
}

/** Mocha hooks: a fresh broker per test file (`before`/`after`). */
export function useBroker(overrides: Record<string, unknown> = {}, opts: { clock?: Clock } = {}): { get(): TestBroker } {
  let tb: TestBroker | undefined;
  before(async () => { tb = await startTestBroker(overrides, opts); });
  after(async () => { await tb?.stop(); });
  return { get: () => { if (!tb) throw new Error('broker not started'); return tb; } };
}

export interface ChildBroker {
  proc: ChildProcess;
  url: string;
  port: number;
  output: () => string;
  kill(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts `bin/tidemark.js` as a child process and waits for its listening line. */
/** `logLevelFlag: false` leaves out the `--log-level warn` every other test wants; `env` adds to ours. */
export function spawnBroker(args: string[], opts: { timeoutMs?: number; logLevelFlag?: boolean; env?: Record<string, string> } = {}): Promise<ChildBroker> {
  return new Promise((resolve, reject) => {
    const flags = opts.logLevelFlag === false ? ['--no-http'] : ['--log-level', 'warn', '--no-http'];
    const proc = spawn(process.execPath, [path.join(ROOT, 'bin/tidemark.js'), ...flags, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...opts.env } });
    let out = '';
    let done = false;
    const timer = setTimeout(() => { if (!done) { done = true; proc.kill('SIGKILL'); reject(new Error('broker did not start: ' + out)); } }, opts.timeoutMs ?? 15000);
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = /amqp:\/\/([\d.]+):(\d+)/.exec(out);
      if (m && !done) {
        done = true;
        clearTimeout(timer);
        const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
        resolve({
          proc, url: `amqp://${m[1]}:${m[2]}`, port: Number(m[2]), output: () => out,
          kill: async (signal = 'SIGKILL') => { if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal); return exited; },
        });
      }
    };
    proc.stdout!.on('data', onData);
    proc.stderr!.on('data', (d: Buffer) => { out += d.toString(); });
    proc.once('exit', (code) => { if (!done) { done = true; clearTimeout(timer); reject(new Error(`broker exited ${code}: ${out}`)); } });
  });
}
