/**
 * tidemark-config as a child process (qpid-config's verbs over $management), and the shared
 * parsing of -b/--broker and --connection-options.
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { runTool, lines } from '../support/tools.js';
import { send, r } from '../support/client.js';
import { parseBrokerUrl, parseConnectionOptions } from '../../tools/common/connection.js';
import { verifyPassword } from '../../lib/core/auth.js';

const T = { timeoutMs: 20000 };

describe('tools: tidemark-config', function () {
  this.timeout(30000);
  const b = useBroker();
  const cfg = (...args: string[]) => runTool('tidemark-config', ['-b', b.get().url, ...args], T);
  const queue = async (name: string) => JSON.parse((await cfg('queues', name, '--json')).stdout).find((q: any) => q.name === name);

  it('--help exits 0 and lists the commands; no command is an error', async function () {
    const res = await runTool('tidemark-config', ['--help'], T);
    expect(res.code).to.equal(0);
    for (const c of ['queues', 'add', 'del', 'purge', 'sow-delete', 'hash-password']) expect(res.stdout).to.include(c);
    const addHelp = await runTool('tidemark-config', ['add', '--help'], T);
    for (const f of ['--durable', '--max-queue-size', '--max-queue-count', '--limit-policy', '--lvq-key', '--browse-only', '--sow-key', '--history-window', '--history-granularity', '--log-retention', '--argument']) expect(addHelp.stdout).to.include(f);
    const none = await runTool('tidemark-config', [], T);
    expect(none.code).to.equal(1);
    expect(none.stderr).to.match(/^Error: /);
  });

  it('add queue maps every flag to its queue argument; --argument sends integers as integers', async function () {
    const res = await cfg('add', 'queue', 'cf.args', '--durable', '--max-queue-size', '100000', '--max-queue-count', '50', '--limit-policy', 'ring', '--browse-only', '--argument', 'log.max_count=1000', '--argument', 'x-custom=abc');
    expect(res.code, res.stderr).to.equal(0);
    const q = await queue('cf.args');
    expect(q.durable).to.equal(true);
    expect(q.arguments).to.include({ 'qpid.max_size': 100000, 'qpid.max_count': 50, 'qpid.policy_type': 'ring', 'log.max_count': 1000 });
    expect(q.arguments['qpid.browse-only']).to.equal(true);
    expect((await cfg('add', 'queue', 'cf.lvq', '--lvq-key', 'k')).code).to.equal(0);
    expect((await queue('cf.lvq')).arguments).to.include({ 'qpid.last_value_queue_key': 'k' });
    expect((await queue('cf.lvq')).durable).to.equal(false);
  });

  it('add queue refuses an existing queue, a bad duration, and types other than queue', async function () {
    await cfg('add', 'queue', 'cf.dup');
    const dup = await cfg('add', 'queue', 'cf.dup');
    expect(dup.code).to.equal(1);
    expect(dup.stderr).to.equal('Error: queue cf.dup exists\n');
    const bad = await cfg('add', 'queue', 'cf.dur', '--sow-key', '/id', '--history-window', '7 days');
    expect(bad.code).to.equal(1);
    expect(bad.stderr).to.match(/^Error: --history-window: /);
    const ex = await cfg('add', 'exchange', 'x');
    expect(ex.code).to.equal(1);
    expect(ex.stderr).to.match(/^Error: unknown object type 'exchange'/);
  });

  it('queues prints an aligned table with the statistics; FILTER narrows it; --json is machine output', async function () {
    await cfg('add', 'queue', 'cf.table.one', '--max-queue-count', '9');
    await send(b.get().url, 'cf.table.one', [{ body: 'a' }, { body: 'b' }]);
    await cfg('add', 'queue', 'cf.table.two');
    const res = await cfg('queues', 'cf.table');
    expect(res.code, res.stderr).to.equal(0);
    const [head, rule, ...rows] = lines(res.stdout);
    expect(head).to.match(/^queue\s+dur\s+depth\s+bytes\s+scn\s+sow\s+cons\s+arguments$/);
    expect(rule).to.match(/^=+(\s+=+)+$/);
    expect(rows).to.have.length(2);
    expect(rows[0]).to.match(/^cf\.table\.one\s+N\s+2\s+\d+\s+1\.\.2\s+0\s+0\s+qpid\.max_count=9$/);
    expect(rows[1]).to.match(/^cf\.table\.two\s+N\s+0\s+0\s+-\s+0\s+0$/);
    // columns line up
    expect(rows[0].indexOf(' N ')).to.equal(rows[1].indexOf(' N '));
    const json = JSON.parse((await cfg('queues', 'cf.table.one', '--json')).stdout);
    expect(json).to.have.length(1);
    expect(json[0]).to.include({ name: 'cf.table.one', depth: 2, scn_head: 2, consumers: 0 });
  });

  it('purge queue empties it and reports the count', async function () {
    await send(b.get().url, 'cf.purge', [{ body: 1 }, { body: 2 }, { body: 3 }]);
    const res = await cfg('purge', 'queue', 'cf.purge');
    expect(res.code, res.stderr).to.equal(0);
    expect(res.stdout).to.equal('purged 3 message(s) from cf.purge\n');
    expect((await queue('cf.purge')).depth).to.equal(0);
    const unknown = await cfg('purge', 'queue', 'cf.nope');
    expect(unknown.code).to.equal(1);
    expect(unknown.stderr).to.equal('Error: no such queue: cf.nope\n');
  });

  it('del queue refuses a non-empty queue without --force, deletes with it; an unknown queue is an error', async function () {
    await send(b.get().url, 'cf.del', [{ body: 1 }]);
    const refused = await cfg('del', 'queue', 'cf.del');
    expect(refused.code).to.equal(1);
    // the broker's description, and the tool's own flag to get past it (QA: "…; use force")
    expect(refused.stderr).to.equal('Error: queue cf.del is not empty or in use (depth 1, consumers 0); add --force to delete it anyway\n');
    const forced = await cfg('del', 'queue', 'cf.del', '--force');
    expect(forced.code, forced.stderr).to.equal(0);
    expect(await queue('cf.del')).to.equal(undefined);
    await cfg('add', 'queue', 'cf.del.empty');
    expect((await cfg('del', 'queue', 'cf.del.empty')).code).to.equal(0);
    const unknown = await cfg('del', 'queue', 'cf.never');
    expect(unknown.code).to.equal(1);
    expect(unknown.stderr).to.equal('Error: no such queue: cf.never\n');
  });

  it('queues shows durations as durations and - for an oldest SCN of 0; --json keeps the raw numbers', async function () {
    // QA: sow.history.window=604800000, and scn 0..3 for an emptied queue
    expect((await cfg('add', 'queue', 'cf.dur.ok', '--sow-key', '/id', '--history-window', '7d', '--history-granularity', '1m', '--log-retention', '500ms')).code).to.equal(0);
    const row = lines((await cfg('queues', 'cf.dur.ok')).stdout)[2];
    expect(row).to.match(/ sow\.key=\/id sow\.history\.window=7d sow\.history\.granularity=1m log\.retention=500ms$/);
    expect((await queue('cf.dur.ok')).arguments).to.include({ 'sow.history.window': 604800000, 'sow.history.granularity': 60000, 'log.retention': 500 });
    await send(b.get().url, 'cf.emptied', [{ body: 1 }, { body: 2 }, { body: 3 }]);
    expect(lines((await runTool('drain', ['-b', b.get().url, 'cf.emptied'], T)).stdout)).to.have.length(3);
    const q = await queue('cf.emptied');
    expect([q.depth, q.scn_oldest, q.scn_head]).to.deep.equal([0, 0, 3]);
    expect(lines((await cfg('queues', 'cf.emptied')).stdout)[2]).to.match(/^cf\.emptied\s+Y\s+0\s+0\s+-\.\.3\s+0\s+0$/);
  });

  it('an empty queue name and non-integer flag values are refused by the tool, naming what was typed', async function () {
    // QA: "CREATE needs application property name", and "got 'NaN'"
    for (const verb of [['add', 'queue', ''], ['del', 'queue', ''], ['purge', 'queue', ''], ['sow-delete', '', '--filter', '/a = 1']]) {
      const res = await cfg(...verb);
      expect(res.code, verb.join(' ')).to.equal(1);
      expect(res.stderr, verb.join(' ')).to.equal('Error: a queue name must not be empty\n');
    }
    const bad = await cfg('add', 'queue', 'cf.y5', '--max-queue-count', 'abc');
    expect(bad.code).to.equal(1);
    expect(bad.stderr).to.equal("Error: --max-queue-count expects an integer >= 0, got 'abc'\n");
    expect(await queue('cf.y5')).to.equal(undefined);
  });

  it('sow-delete needs --filter and reports what the broker answers', async function () {
    const missing = await cfg('sow-delete', 'cf.sow');
    expect(missing.code).to.equal(1);
    expect(missing.stderr).to.match(/^Error: Missing required argument: filter/);
    const res = await cfg('sow-delete', 'cf.none', '--filter', '/price > 10');
    expect(res.code).to.equal(1);
    expect(res.stderr).to.match(/^Error: .+/); // unknown queue or operation: a non-2xx answer
  });

  it('hash-password prints a hash that verifies', async function () {
    const res = await runTool('tidemark-config', ['hash-password', 's3cret'], T);
    expect(res.code).to.equal(0);
    const hash = res.stdout.trim();
    expect(hash).to.not.include('s3cret');
    expect(verifyPassword({ scrypt: hash }, 's3cret')).to.equal(true);
    expect(verifyPassword({ scrypt: hash }, 'other')).to.equal(false);
  });

  it('an unreachable broker and bad connection options fail with Error: and exit 1', async function () {
    const down = await runTool('tidemark-config', ['-b', 'amqp://127.0.0.1:1', 'queues'], T);
    expect(down.code).to.equal(1);
    expect(down.stderr).to.match(/^Error: .*127\.0\.0\.1:1/);
    const badOpt = await cfg('--connection-options', '{bogus: 1}', 'queues');
    expect(badOpt.code).to.equal(1);
    expect(badOpt.stderr).to.match(/^Error: --connection-options: unknown option 'bogus'/);
    const ok = await cfg('--connection-options', '{protocol: amqp1.0, container_id: cfg-test, reconnect: true}', 'queues', '--json');
    expect(ok.code, ok.stderr).to.equal(0);
  });
});

/** A scripted $management: records each request (operation, name, body) and answers with `answer`. */
function fakeManagement(answer: (req: { operation: string; name: string; body: any }) => { statusCode: number; statusDescription: string }): Promise<{ url: string; requests: Array<{ operation: string; name: string; body: any }>; close(): Promise<void> }> {
  const container = r.create_container({ id: 'fake-management' });
  const requests: Array<{ operation: string; name: string; body: any }> = [];
  const replyLinks = new Map<string, any>();
  let n = 0;
  container.on('sender_open', (ctx: any) => {
    // the tool's dynamic reply receiver: give it an address
    const address = `reply-${++n}`;
    ctx.sender.set_source({ address });
    replyLinks.set(address, ctx.sender);
  });
  container.on('receiver_open', (ctx: any) => { ctx.receiver.set_target(ctx.receiver.remote.attach.target); });
  container.on('message', (ctx: any) => {
    const m = ctx.message;
    const req = { operation: String(m.application_properties?.operation), name: String(m.application_properties?.name), body: m.body };
    requests.push(req);
    replyLinks.get(m.reply_to)?.send({ correlation_id: m.message_id, application_properties: answer(req), body: null });
  });
  container.on('error', () => { /* ignore */ });
  container.on('disconnected', () => { /* ignore */ });
  return new Promise((resolve) => {
    const listener = container.listen({ port: 0, host: '127.0.0.1' });
    listener.on('listening', () => resolve({
      url: `amqp://127.0.0.1:${listener.address().port}`, requests,
      close: () => new Promise<void>((res) => listener.close(() => res())),
    }));
  });
}

describe('tools: tidemark-config del queue on the wire (scripted $management)', function () {
  this.timeout(30000);

  it('asks for {if_empty, if_unused} without --force and {force} with it; a 409 gets the --force hint', async function () {
    // The broker's DELETE becomes unconditional unless the body asks if_empty / if_unused;
    // the tool keeps refusing a queue with messages or consumers unless --force is given.
    const peer = await fakeManagement((req) => (req.body?.force === true
      ? { statusCode: 204, statusDescription: 'No Content' }
      : { statusCode: 409, statusDescription: `queue ${req.name} is not empty or in use (depth 2, consumers 1)` }));
    try {
      const refused = await runTool('tidemark-config', ['-b', peer.url, 'del', 'queue', 'x6'], T);
      expect(refused.code).to.equal(1);
      expect(refused.stderr).to.equal('Error: queue x6 is not empty or in use (depth 2, consumers 1); add --force to delete it anyway\n');
      const forced = await runTool('tidemark-config', ['-b', peer.url, 'del', 'queue', 'x6', '--force'], T);
      expect(forced.code, forced.stderr).to.equal(0);
      expect(peer.requests.map((q) => [q.operation, q.name, q.body])).to.deep.equal([
        ['DELETE', 'x6', { if_empty: true, if_unused: true }],
        ['DELETE', 'x6', { force: true }],
      ]);
    } finally { await peer.close(); }
  });
});

describe('tools: broker URL and connection options', function () {
  it('parses URLs and the Qpid user/pass@host:port form', function () {
    expect(parseBrokerUrl('amqp://127.0.0.1:5672')).to.deep.equal({ scheme: 'amqp', host: '127.0.0.1', port: 5672, username: undefined, password: undefined });
    expect(parseBrokerUrl('guest/secret@example.org:1234')).to.include({ host: 'example.org', port: 1234, username: 'guest', password: 'secret' });
    expect(parseBrokerUrl('amqps://u:p%40ss@h')).to.include({ scheme: 'amqps', host: 'h', port: 5671, username: 'u', password: 'p@ss' });
    expect(parseBrokerUrl('localhost')).to.include({ host: 'localhost', port: 5672 });
    expect(parseBrokerUrl('[::1]:5673')).to.include({ host: '::1', port: 5673 });
    expect(() => parseBrokerUrl('http://x')).to.throw(/unsupported scheme/);
    expect(() => parseBrokerUrl('h:port')).to.throw(/bad port/);
  });

  it('parses --connection-options as a Qpid map', function () {
    expect(parseConnectionOptions("{username: bob, password: 'pw', sasl_mechanisms: PLAIN, container_id: c1, idle_timeout: 30, protocol: amqp1.0}"))
      .to.deep.equal({ username: 'bob', password: 'pw', sasl_mechanisms: 'PLAIN', container_id: 'c1', idle_timeout: 30 });
    expect(() => parseConnectionOptions('{protocol: amqp0-10}')).to.throw(/only amqp1\.0/);
    expect(() => parseConnectionOptions('{sasl_mechanisms: GSSAPI}')).to.throw(/not supported/);
    expect(() => parseConnectionOptions('{a: ')).to.throw(/--connection-options/);
  });
});
