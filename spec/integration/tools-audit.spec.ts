/**
 * The tools audit (docs/robustness.md 14, "Tools"), through the built tools (bin/*.js, which
 * load dist/: build first): flags given twice, two drains sharing one checkpoint file, spout
 * stopping at a bad --content-stdin line, drain -p json with the text-mode switches, and what
 * spout and drain say when the broker closes the connection on shutdown. spout's bounded
 * outcome record and the lock itself are in spec/unit/tools/tools-audit.spec.ts.
 */
import { expect } from 'chai';
import { readFileSync, rmSync, existsSync } from 'node:fs';
import path from 'node:path';
import { useBroker, spawnBroker, tempDir } from '../support/broker.js';
import { runTool, startTool, lines } from '../support/tools.js';

const T = { timeoutMs: 30000 };

describe('tools audit', function () {
  this.timeout(60000);
  const b = useBroker();
  const url = () => b.get().url;

  it('a single-value flag given twice is one usage line and exit 1, before connecting (spout, drain, tidemark-config, tidemark-bench)', async function () {
    const dead = 'amqp://127.0.0.1:1';
    for (const [tool, args, want] of [
      ['spout', ['--content', 'a', '--content', 'b', 'q'], '--content was given 2 times ("a", "b"): give it once'],
      ['spout', ['-i', 'a', '-i', 'b', 'q'], '-i/--id was given 2 times ("a", "b"): give it once'],
      ['spout', ['-P', 'a=1', '-P', 'b=2', '-M', 'x=1', '-M', 'y=2', '--ttl', '1', '--ttl', '2', 'q'], '--ttl was given 2 times ("1", "2"): give it once'],
      ['drain', ['--checkpoint', 'a.json', '--checkpoint', 'b.json', 'q'], '--checkpoint was given 2 times ("a.json", "b.json"): give it once'],
      ['drain', ['--filter', '/p > 1', '--filter', '/p < 4', 'q'], '--filter was given 2 times ("/p > 1", "/p < 4"): give it once'],
      ['drain', ['--at', '0', '--bookmark', 'now', 'q'], '--bookmark was given 2 times ("0", "now"): give it once'],
      ['drain', ['-p', 'json', '-p', 'text', 'q'], '-p/--print was given 2 times ("json", "text"): give it once'],
      ['tidemark-config', ['add', 'queue', 'q', '--argument', 'a=1', '--argument', 'b=2', '--lvq-key', 'a', '--lvq-key', 'b'], '--lvq-key was given 2 times ("a", "b"): give it once'],
      ['tidemark-config', ['sow-delete', 'q', '--filter', 'a', '--filter', 'b'], '--filter was given 2 times ("a", "b"): give it once'],
      ['tidemark-bench', ['-n', '1', '-n', '2'], '-n/--count was given 2 times ("1", "2"): give it once'],
    ] as const) {
      const res = await runTool(tool, ['-b', dead, ...args], T);
      expect(res.code, `${tool} ${args.join(' ')}: ${res.stderr}`).to.equal(1);
      expect(res.stderr, `${tool} ${args.join(' ')}`).to.equal(`Error: ${want}\n`);
    }
  });

  it('two drains at once on one --checkpoint file keep both queues\' positions; re-runs print nothing', async function () {
    const dir = tempDir('tm-audit-');
    try {
      const cp = path.join(dir, 'shared.json');
      expect((await runTool('spout', ['-b', url(), '-c', '5', '--content', 'a', 'au.qa'], T)).code).to.equal(0);
      expect((await runTool('spout', ['-b', url(), '-c', '5', '--content', 'b', 'au.qb'], T)).code).to.equal(0);
      const da = startTool('drain', ['-b', url(), '-f', '--checkpoint', cp, 'au.qa'], T);
      await da.waitFor(/(a\n){5}/);
      const db = startTool('drain', ['-b', url(), '-f', '--checkpoint', cp, 'au.qb'], T);
      await db.waitFor(/(b\n){5}/);
      // drain A goes on writing after B started (A read the file before B's entry existed)
      expect((await runTool('spout', ['-b', url(), '-c', '3', '--content', 'a2', 'au.qa'], T)).code).to.equal(0);
      await da.waitFor(/(a2\n){3}/);
      da.kill('SIGINT'); db.kill('SIGINT');
      const [ra, rb] = await Promise.all([da.done, db.done]);
      expect(ra.code, ra.stderr).to.equal(0);
      expect(rb.code, rb.stderr).to.equal(0);
      const file = JSON.parse(readFileSync(cp, 'utf8'));
      expect(Object.keys(file).sort()).to.deep.equal(['au.qa', 'au.qb']);
      expect(existsSync(`${cp}.lock`), 'no lock left').to.equal(false);
      for (const q of ['au.qa', 'au.qb']) {
        const again = await runTool('drain', ['-b', url(), '--checkpoint', cp, q], T);
        expect(again.code, again.stderr).to.equal(0);
        expect(again.stdout, `${q} again`).to.equal('');
      }
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });

  it('spout --json --content-stdin stopping at a bad line first waits for the outcomes of the lines sent', async function () {
    const q = 'au.json';
    expect((await runTool('tidemark-config', ['-b', url(), 'add', 'queue', q, '--max-queue-count', '1', '--limit-policy', 'reject'], T)).code).to.equal(0);
    const res = await runTool('spout', ['-b', url(), '-i', 'js', '--json', '--content-stdin', q], { ...T, input: '{"a":1}\n{"a":2}\nnot json\n{"a":4}\n' });
    expect(res.code).to.equal(1);
    const err = lines(res.stderr);
    expect(err[0]).to.match(/^message js:1 rejected: amqp:resource-limit-exceeded/);
    expect(err[1]).to.match(/^Error: --json: line 3 of stdin \(message 2\) is not valid JSON: .* \(the 2 before it were sent, 1 of them not accepted\)$/);
    expect(err).to.have.length(2);
  });

  it('drain -p json refuses --print-headers and --no-print-content (it prints the whole message)', async function () {
    for (const flag of ['--print-headers', '--no-print-content']) {
      const res = await runTool('drain', ['-b', 'amqp://127.0.0.1:1', '-p', 'json', flag, 'q'], T);
      expect(res.code).to.equal(1);
      expect(res.stderr).to.equal(`Error: ${flag} is for -p text: -p json prints the whole message (body, properties, annotations, header)\n`);
    }
  });

  it('a broker shutting down: drain and spout name its close condition; spout says how many were left unsettled', async function () {
    const dir = tempDir('tm-audit-');
    const cb = await spawnBroker(['--port', '0', '--no-http', '--data', path.join(dir, 'd')]);
    try {
      const d = startTool('drain', ['-b', cb.url, '-f', 'au.down'], T);
      const s = startTool('spout', ['-b', cb.url, '-c', '0', '-t', '20', 'au.down2'], T);
      await new Promise((r) => setTimeout(r, 1500));
      await cb.kill('SIGTERM');
      const [rd, rs] = await Promise.all([d.done, s.done]);
      expect(rd.code).to.equal(1);
      expect(rd.stderr).to.equal('Error: the broker closed the connection: amqp:connection:forced: the broker is shutting down\n');
      expect(rs.code).to.equal(1);
      const last = lines(rs.stderr).at(-1)!;
      expect(last).to.match(/^Error: the broker closed the connection: amqp:connection:forced: the broker is shutting down( \(\d+ of \d+ messages sent were left unsettled\))?$/);
      expect(lines(rs.stderr).length, 'at most 1000 outcomes listed, then a count').to.be.at.most(1002);
    } finally { await cb.kill('SIGKILL'); rmSync(dir, { recursive: true, force: true }); }
  });
});
