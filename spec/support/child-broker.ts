/** A broker as a child process, its RSS, and a control publisher timing how long another client waits (resource-exhaustion specs). */
import { writeFileSync, rmSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { spawnBroker, tempDir, type ChildBroker } from './broker.js';
import { connect, openSender, sendAll, sleep, type Conn } from './client.js';

export interface Child { cb: ChildBroker; url: string; dir: string; pid: number; stop(): Promise<void> }

/** A broker as a child process with `config` merged over the defaults. */
export async function child(config: Record<string, unknown> = {}, extraArgs: string[] = []): Promise<Child> {
  const dir = tempDir('dos-');
  const cfgFile = path.join(dir, 'cfg.json');
  writeFileSync(cfgFile, JSON.stringify(config));
  const cb = await spawnBroker(['--port', '0', '--data', path.join(dir, 'data'), '--config', cfgFile, ...extraArgs], { timeoutMs: 20000 });
  return {
    cb, url: cb.url, dir, pid: cb.proc.pid!,
    async stop() { try { await cb.kill('SIGKILL'); } catch { /* gone */ } rmSync(dir, { recursive: true, force: true }); },
  };
}

/** RSS of a pid in MB (linux). */
export function rssMB(pid: number): number {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(s)![1]) / 1024;
}

/**
 * A control publisher: sends one small message every `everyMs` and records how long each
 * took to be accepted. `stop()` gives the longest. Its queue is not durable, so a round trip
 * measures how long the broker's event loop made another client wait, not the disk: a CI
 * run saw a durable ping wait 1.3 s for an fsync behind LevelDB compacting 300k records just
 * loaded, with the event loop free.
 */
export async function pinger(url: string, everyMs = 50, opts: Record<string, unknown> = {}): Promise<{ stop(): Promise<number>; conn: Conn }> {
  const conn = await connect(url, opts);
  const s = await openSender(conn, 'ctl.ping; {create: always, node: {durable: False}}');
  let max = 0, running = true;
  const loop = (async () => {
    while (running) {
      const t0 = performance.now();
      await sendAll(s, [{ body: 'ping' }]);
      max = Math.max(max, performance.now() - t0);
      await sleep(everyMs);
    }
  })();
  return { conn, async stop() { running = false; await loop; await conn.close(); return max; } };
}
