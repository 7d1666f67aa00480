/**
 * Runs the Python Qpid Proton interop scripts in spec/interop/proton/ (see their
 * docstrings; every script takes -a amqp://host:port/node and -t seconds).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PYTHON = '/usr/bin/python3';
export const PROTON_SCRIPTS = join(dirname(fileURLToPath(import.meta.url)), '..', 'interop', 'proton');

export interface ProtonResult {
  code: number;
  stdout: string;
  stderr: string;
}

let available: boolean | undefined;

/** True when /usr/bin/python3 can import proton (checked once per process). */
export function protonAvailable(): boolean {
  if (available === undefined) {
    const r = spawnSync(PYTHON, ['-c', 'import proton, proton.reactor, proton.handlers'], { stdio: 'ignore', timeout: 10_000 });
    available = r.status === 0;
  }
  return available;
}

/**
 * Run spec/interop/proton/<script> with args. Resolves with the exit code and output; never
 * rejects for a non-zero exit. The process is killed (SIGKILL) after timeoutMs (default
 * 20 s, above the scripts' own -t default of 10 s); it then resolves with code 124 and a
 * note on stderr. Rejects only if python cannot be started.
 */
export function runProton(script: string, args: string[], opts?: { timeoutMs?: number }): Promise<ProtonResult> {
  const path = join(PROTON_SCRIPTS, script);
  if (!existsSync(path)) return Promise.reject(new Error(`no such Proton script: ${path}`));
  const timeoutMs = opts?.timeoutMs ?? 20_000;
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, [path, ...args], {
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', PYTHONUNBUFFERED: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (timedOut) {
        resolve({ code: 124, stdout, stderr: `${stderr}runProton: ${script} killed after ${timeoutMs} ms\n` });
      } else {
        resolve({ code: code ?? (signal ? 128 : 1), stdout, stderr });
      }
    });
  });
}
