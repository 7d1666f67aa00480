/**
 * The QPID-4241 test plan (acceptance.md part A) with the command line tools as child
 * processes: spout, drain and tidemark-config against a broker on an ephemeral port.
 * The tools run from dist/: build first (`npx tsc -p tsconfig.json`).
 */
import { expect } from 'chai';
import { useBroker, startTestBroker } from '../support/broker.js';
import { runTool, startTool, lines, jsonLines } from '../support/tools.js';
import { sleep } from '../support/client.js';

const T = { timeoutMs: 20000 };

describe('tools: the QPID-4241 test plan (acceptance A)', function () {
  this.timeout(60000);
  const b = useBroker();
  const tool = (name: string, ...args: string[]) => runTool(name, ['-b', b.get().url, ...args], T);
  const ok = async (name: string, ...args: string[]) => {
    const res = await tool(name, ...args);
    expect(res.code, `${name} ${args.join(' ')}: ${res.stderr}`).to.equal(0);
    return res;
  };
  const depth = async (q: string) => {
    const res = await ok('tidemark-config', 'queues', q, '--json');
    const info = JSON.parse(res.stdout).find((x: any) => x.name === q);
    return info?.depth as number;
  };
  const spoutIds = (out: string) => jsonLines(out).map((m) => m.application_properties['spout-id'] as string);

  /** `spout -c N <spoutAddress>` (which may declare q), then the drains. */
  async function browseOnlyPlan(q: string, spoutAddress: string) {
    const N = 7;
    await ok('spout', '-c', String(N), '-i', 'A1', spoutAddress);
    const expected = Array.from({ length: N }, (_, i) => `A1:${i}`);
    const first = await ok('drain', '-p', 'json', q);
    expect(spoutIds(first.stdout)).to.deep.equal(expected);
    const second = await ok('drain', '-p', 'json', q);
    expect(spoutIds(second.stdout)).to.deep.equal(expected);
    const third = await ok('drain', '-p', 'json', q);
    expect(spoutIds(third.stdout)).to.deep.equal(expected);
    // two concurrent receivers each get all N
    const d1 = startTool('drain', ['-b', b.get().url, '-p', 'json', '-t', '1', q], T);
    const d2 = startTool('drain', ['-b', b.get().url, '-p', 'json', '-t', '1', q], T);
    const [r1, r2] = await Promise.all([d1.done, d2.done]);
    expect(r1.code, r1.stderr).to.equal(0);
    expect(r2.code, r2.stderr).to.equal(0);
    expect(spoutIds(r1.stdout)).to.deep.equal(expected);
    expect(spoutIds(r2.stdout)).to.deep.equal(expected);
    expect(await depth(q)).to.equal(N);
  }

  it('A1: browse-only queue declared with tidemark-config: every drain reads all N', async function () {
    await ok('tidemark-config', 'add', 'queue', 'a1.config', '--browse-only');
    await browseOnlyPlan('a1.config', 'a1.config');
  });

  it('A1: browse-only queue declared by a spout address: every drain reads all N', async function () {
    const q = 'a1.address';
    await browseOnlyPlan(q, `${q}; {create: always, node: {x-declare: {arguments: {'qpid.browse-only': 1}}}}`);
    const res = await ok('tidemark-config', 'queues', q, '--json');
    const info = JSON.parse(res.stdout)[0];
    expect(info.arguments).to.have.property('qpid.browse-only');
    expect([true, 1, 'true', '1', 'True']).to.include(info.arguments['qpid.browse-only']);
  });

  it('A1: an address that re-declares an existing browse-only queue sends to it unchanged', async function () {
    const q = 'a1.address';
    await ok('spout', '-i', 'again', `${q}; {create: always, node: {x-declare: {arguments: {'qpid.browse-only': 1}}}}`);
    for (let i = 0; i < 2; i++) expect(spoutIds((await ok('drain', '-p', 'json', q)).stdout)).to.have.length(8);
  });

  it('A2: messages with --ttl disappear for readers and from the statistics', async function () {
    const q = 'a2.ttl';
    await ok('tidemark-config', 'add', 'queue', q, '--browse-only');
    // A TTL long enough for three tool runs on a loaded machine (1.5 s once expired before
    // the first read under load), then only what is left of it is waited.
    const ttl = 5000;
    const sent = Date.now();
    await ok('spout', '-c', '3', '--ttl', String(ttl), '--content', 'short', q);
    await ok('spout', '-c', '1', '--content', 'keep', q);
    expect(await depth(q)).to.equal(4);
    expect(lines((await ok('drain', q)).stdout)).to.deep.equal(['short', 'short', 'short', 'keep']);
    await sleep(Math.max(0, sent + ttl + 300 - Date.now()));
    expect(await depth(q)).to.equal(1);
    expect(lines((await ok('drain', q)).stdout)).to.deep.equal(['keep']);
  });

  it('A2: --ttl on a consuming queue: expired messages are never delivered', async function () {
    const q = 'a2.ttl.consume';
    await ok('spout', '-c', '2', '--ttl', '300', '--content', 'gone', q);
    await ok('spout', '--content', 'stay', q);
    await sleep(500);
    expect(await depth(q)).to.equal(1);
    expect(lines((await ok('drain', q)).stdout)).to.deep.equal(['stay']);
    expect(await depth(q)).to.equal(0);
  });

  it('A3: ring queue (--max-queue-count 5 --limit-policy ring): the newest 5 stay', async function () {
    const q = 'a3.ring';
    await ok('tidemark-config', 'add', 'queue', q, '--max-queue-count', '5', '--limit-policy', 'ring');
    await ok('spout', '-c', '8', '-i', 'r', q);
    expect(await depth(q)).to.equal(5);
    expect(spoutIds((await ok('drain', '-p', 'json', q)).stdout)).to.deep.equal(['r:3', 'r:4', 'r:5', 'r:6', 'r:7']);
  });

  it('A3: ring + browse-only: the newest 5 stay, for every reader', async function () {
    const q = 'a3.ring.browse';
    await ok('tidemark-config', 'add', 'queue', q, '--max-queue-count', '5', '--limit-policy', 'ring', '--browse-only');
    await ok('spout', '-c', '9', '-i', 'r', q);
    for (let i = 0; i < 2; i++) expect(spoutIds((await ok('drain', '-p', 'json', q)).stdout)).to.deep.equal(['r:4', 'r:5', 'r:6', 'r:7', 'r:8']);
  });

  it('A3: LVQ (--lvq-key k): one message per key, the last one', async function () {
    const q = 'a3.lvq';
    await ok('tidemark-config', 'add', 'queue', q, '--lvq-key', 'k', '--browse-only');
    for (let v = 1; v <= 3; v++) {
      await ok('spout', '-P', 'k=a', '--content', `a${v}`, q);
      await ok('spout', '-P', 'k=b', '--content', `b${v}`, q);
    }
    const got = lines((await ok('drain', q)).stdout).sort();
    expect(got).to.deep.equal(['a3', 'b3']);
    expect(await depth(q)).to.equal(2);
  });

  it('A3: reject policy: the 6th is rejected (spout exits 1 naming the condition), the first 5 stay', async function () {
    const q = 'a3.reject';
    await ok('tidemark-config', 'add', 'queue', q, '--max-queue-count', '5', '--limit-policy', 'reject');
    const res = await tool('spout', '-c', '6', '-i', 'j', q);
    expect(res.code).to.equal(1);
    expect(res.stderr).to.include('amqp:resource-limit-exceeded');
    expect(res.stderr).to.include('j:5');
    expect(res.stderr).to.match(/^Error: 1 of 6 messages not accepted$/m);
    expect(await depth(q)).to.equal(5);
    expect(spoutIds((await ok('drain', '-p', 'json', q)).stdout)).to.deep.equal(['j:0', 'j:1', 'j:2', 'j:3', 'j:4']);
  });

  it('A3: a standard queue is consumed once', async function () {
    const q = 'a3.standard';
    await ok('spout', '-c', '5', '-i', 's', q);
    expect(spoutIds((await ok('drain', '-p', 'json', q)).stdout)).to.deep.equal(['s:0', 's:1', 's:2', 's:3', 's:4']);
    expect((await ok('drain', q)).stdout).to.equal('');
    expect(await depth(q)).to.equal(0);
  });

  it('A4: two concurrent drains on a standard queue share the messages, none twice', async function () {
    const q = 'a4.compete';
    await ok('tidemark-config', 'add', 'queue', q);
    const d1 = startTool('drain', ['-b', b.get().url, '-p', 'json', '-t', '2', q], T);
    const d2 = startTool('drain', ['-b', b.get().url, '-p', 'json', '-t', '2', q], T);
    await sleep(500);
    await ok('spout', '-c', '40', '-i', 'c', q);
    const [r1, r2] = await Promise.all([d1.done, d2.done]);
    const all = [...spoutIds(r1.stdout), ...spoutIds(r2.stdout)];
    expect(all.sort()).to.deep.equal(Array.from({ length: 40 }, (_, i) => `c:${i}`).sort());
  });
});

describe('tools: durable queue across a broker restart (acceptance A5)', function () {
  this.timeout(60000);
  it('messages sent with spout -d to a durable queue survive a restart, in order', async function () {
    const tb = await startTestBroker();
    try {
      const run = (name: string, ...args: string[]) => runTool(name, ['-b', tb.url, ...args], T);
      expect((await run('tidemark-config', 'add', 'queue', 'a5.durable', '--durable', '--browse-only')).code).to.equal(0);
      expect((await run('spout', '-d', '-c', '3', '-i', 'd', 'a5.durable')).code).to.equal(0);
      await tb.restart();
      const res = await run('drain', '-p', 'json', 'a5.durable');
      expect(res.code, res.stderr).to.equal(0);
      expect(jsonLines(res.stdout).map((m) => m.application_properties['spout-id'])).to.deep.equal(['d:0', 'd:1', 'd:2']);
      const q = JSON.parse((await run('tidemark-config', 'queues', '--json')).stdout).find((x: any) => x.name === 'a5.durable');
      expect(q).to.include({ durable: true, depth: 3 });
      expect(q.arguments['qpid.browse-only']).to.equal(true);
    } finally { await tb.stop(); }
  });
});
