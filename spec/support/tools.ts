/**
 * Runs the command line tools (bin/<name>.js, which load dist/ — build first) as child
 * processes, bounded by a time-out, and collects exit code, stdout and stderr.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { ROOT } from './broker.js';

export interface ToolResult { code: number | null; stdout: string; stderr: string; signal: NodeJS.Signals | null; timedOut: boolean }

export interface ToolOptions { timeoutMs?: number; input?: string }

export interface RunningTool {
  proc: ChildProcess;
  /** resolves when the process exits (or is killed at the time-out) */
  done: Promise<ToolResult>;
  stdout(): string;
  /** resolves once stdout contains `text` (or rejects after `ms`) */
  waitFor(text: string | RegExp, ms?: number): Promise<void>;
  kill(signal?: NodeJS.Signals): void;
}

export function startTool(name: string, args: string[], opts: ToolOptions = {}): RunningTool {
  const proc = spawn(process.execPath, [path.join(ROOT, 'bin', `${name}.js`), ...args], { stdio: ['pipe', 'pipe', 'pipe'], cwd: ROOT });
  let stdout = '';
  let stderr = '';
  let timedOut = false;
  const listeners = new Set<() => void>();
  proc.stdout!.on('data', (d: Buffer) => { stdout += d.toString(); for (const l of listeners) l(); });
  proc.stderr!.on('data', (d: Buffer) => { stderr += d.toString(); });
  const timer = setTimeout(() => { timedOut = true; proc.kill('SIGKILL'); }, opts.timeoutMs ?? 20000);
  const done = new Promise<ToolResult>((resolve) => {
    proc.on('close', (code, signal) => { clearTimeout(timer); resolve({ code, stdout, stderr, signal, timedOut }); });
  });
  proc.stdin!.on('error', () => { /* the tool may exit before reading */ });
  if (opts.input !== undefined) proc.stdin!.end(opts.input);
  else proc.stdin!.end();
  return {
    proc, done,
    stdout: () => stdout,
    waitFor: (text, ms = 10000) => new Promise<void>((resolve, reject) => {
      const test = () => (typeof text === 'string' ? stdout.includes(text) : text.test(stdout));
      if (test()) { resolve(); return; }
      const t = setTimeout(() => { listeners.delete(l); reject(new Error(`timed out waiting for ${text} in output: ${stdout} ${stderr}`)); }, ms);
      const l = () => { if (test()) { clearTimeout(t); listeners.delete(l); resolve(); } };
      listeners.add(l);
      proc.once('close', () => { if (listeners.has(l)) { clearTimeout(t); listeners.delete(l); test() ? resolve() : reject(new Error(`exited before ${text}: ${stdout} ${stderr}`)); } });
    }),
    kill: (signal = 'SIGTERM') => { if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal); },
  };
}

/** Runs a tool to completion: `runTool('spout', ['-b', url, '-c', '3', 'q'])`. */
export function runTool(name: string, args: string[], opts: ToolOptions = {}): Promise<ToolResult> {
  return startTool(name, args, opts).done;
}

/** Non-empty stdout lines. */
export function lines(out: string): string[] {
  return out.split('\n').filter((l) => l.length > 0);
}

/** stdout of `drain -p json` as objects. */
export function jsonLines(out: string): any[] {
  return lines(out).map((l) => JSON.parse(l));
}
