/**
 * spout as a child process: flags, message fields, errors (tools.md).
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { runTool } from '../support/tools.js';
import { receive, connect, openReceiver, collect } from '../support/client.js';

const T = { timeoutMs: 20000 };

describe('tools: spout', function () {
  this.timeout(30000);
  const b = useBroker();
  const spout = (...args: string[]) => runTool('spout', ['-b', b.get().url, ...args], T);
  const take = (q: string, count: number) => receive(b.get().url, q, { count, idleMs: 1000 });

  it('--help exits 0 and lists the flags', async function () {
    const res = await runTool('spout', ['--help'], T);
    expect(res.code).to.equal(0);
    for (const f of ['--count', '--timeout', '--durable', '--id', '--reply-to', '--property', '--map', '--content', '--content-stdin', '--ttl', '--print', '--delete', '--delta', '--key', '--json', '--broker', '--connection-options']) {
      expect(res.stdout).to.include(f);
    }
  });

  it('sends -c N messages with spout-id <id>:<n>, the content, the subject of the address, -P properties (integers as integers)', async function () {
    const res = await spout('-c', '3', '-i', 'sp', '--content', 'hello', '-P', 'n=42', '-P', 's=abc', '-P', 'neg=-7', 'sp.basic/topic.x');
    expect(res.code, res.stderr).to.equal(0);
    const got = await take('sp.basic', 3);
    expect(got.map((g) => g.message.application_properties['spout-id'])).to.deep.equal(['sp:0', 'sp:1', 'sp:2']);
    for (const g of got) {
      expect(g.message.body).to.equal('hello');
      expect(g.message.subject).to.equal('topic.x');
      expect(g.message.application_properties).to.include({ n: 42, s: 'abc', neg: -7 });
    }
  });

  it('--delete without --key or a body says how to name the key (no broker round trip)', async function () {
    const res = await runTool('spout', ['-b', 'amqp://127.0.0.1:1', '--delete', 'px'], T);
    expect(res.code).to.equal(1);
    expect(res.stderr).to.equal('Error: --delete needs the key of the record: --key K, or a body holding it (--json --content \'{"id": ...}\')\n');
  });

  it('an address with node: {durable: False} declares a non-durable queue; without it the queue is durable', async function () {
    for (const [addr, name, durable] of [['sp.nd; {create: always, node: {durable: False}}', 'sp.nd', false], ['sp.nd2; {create: always, node: {type: queue, durable: false}}', 'sp.nd2', false], ['sp.d; {create: always}', 'sp.d', true]] as const) {
      const res = await spout('--content', 'x', addr);
      expect(res.code, res.stderr).to.equal(0);
      expect(b.get().broker.nodes.get(name)?.def.durable, addr).to.equal(durable);
    }
  });

  it('-M builds a map body, -d marks durable, --ttl sets the TTL, --reply-to the reply address', async function () {
    const res = await spout('-M', 'a=1', '-M', 'b=two', '-d', '--ttl', '60000', '--reply-to', 'answers', 'sp.map');
    expect(res.code, res.stderr).to.equal(0);
    const [g] = await take('sp.map', 1);
    expect(g.message.body).to.deep.equal({ a: 1, b: 'two' });
    expect(g.message.durable).to.equal(true);
    expect(g.message.ttl).to.be.a('number').within(1, 60000);
    expect(g.message.reply_to).to.equal('answers');
  });

  it('--content-stdin sends one message per line', async function () {
    const res = await runTool('spout', ['-b', b.get().url, '--content-stdin', 'sp.stdin'], { ...T, input: 'one\ntwo\nthree\n' });
    expect(res.code, res.stderr).to.equal(0);
    const got = await take('sp.stdin', 3);
    expect(got.map((g) => g.message.body)).to.deep.equal(['one', 'two', 'three']);
  });

  it('--json validates the content and sends it as a string with content-type application/json', async function () {
    const res = await spout('--json', '--content', '{"id": 1, "price": 5}', 'sp.json');
    expect(res.code, res.stderr).to.equal(0);
    const [g] = await take('sp.json', 1);
    expect(g.message.body).to.equal('{"id": 1, "price": 5}');
    expect(g.message.content_type).to.equal('application/json');
    const bad = await spout('--json', '--content', '{id: 1}', 'sp.json');
    expect(bad.code).to.equal(1);
    expect(bad.stderr).to.match(/^Error: --json: content is not valid JSON/);
  });

  it('--delete/--delta set x-opt-tm-op, --key sets x-opt-tm-key', async function () {
    expect((await spout('--delete', '--key', 'k1', 'sp.ops')).code).to.equal(0);
    expect((await spout('--delta', '--json', '--content', '{"id":2}', 'sp.ops')).code).to.equal(0);
    const got = await take('sp.ops', 2);
    expect(got[0].message.message_annotations).to.include({ 'x-opt-tm-op': 'delete', 'x-opt-tm-key': 'k1' });
    expect(got[1].message.message_annotations).to.include({ 'x-opt-tm-op': 'delta' });
    const both = await spout('--delete', '--delta', 'sp.ops');
    expect(both.code).to.equal(1);
    expect(both.stderr).to.match(/^Error: .*mutually exclusive/);
  });

  it('--print prints the body of each message sent, as drain prints it, whatever the body', async function () {
    const res = await spout('-c', '2', '--content', 'shown', '--print', 'sp.print');
    expect(res.code).to.equal(0);
    expect(res.stdout).to.equal('shown\nshown\n');
    // QA: --json and -M printed whole message objects while --help promised one format
    const json = await spout('--json', '--content', '{"id": 1}', '--print', 'sp.print');
    expect(json.code, json.stderr).to.equal(0);
    expect(json.stdout).to.equal('{"id": 1}\n');
    const map = await spout('-M', 'a=1', '-M', 'b=two', '--print', 'sp.print');
    expect(map.code, map.stderr).to.equal(0);
    expect(map.stdout).to.equal('{"a":1,"b":"two"}\n');
    const drained = await runTool('drain', ['-b', b.get().url, 'sp.print'], T);
    expect(drained.stdout).to.equal(res.stdout + json.stdout + map.stdout);
    const help = await runTool('spout', ['--help'], T);
    expect(help.stdout).to.not.include('drain -p json');
  });

  it('-c 0 with -t S sends until the time is up, every message settled', async function () {
    const c = await connect(b.get().url);
    try {
      const rcv = await openReceiver(c, { address: 'sp.timed' });
      const pending = collect(rcv, { idleMs: 1500, credit: 500 });
      const res = await spout('-c', '0', '-t', '0.5', '-i', 't', 'sp.timed');
      expect(res.code, res.stderr).to.equal(0);
      const got = await pending;
      expect(got.length).to.be.greaterThan(1);
      expect(got.map((g) => g.message.application_properties['spout-id'])).to.deep.equal(got.map((_, i) => `t:${i}`));
    } finally { await c.close(); }
  });

  it('a bad address exits 1 with the parser message', async function () {
    const res = await spout('q; {create: always');
    expect(res.code).to.equal(1);
    expect(res.stderr).to.match(/^Error: Unmatched '\{' \(opened at position 3\)/);
    const refused = await spout('q; {delete: always}');
    expect(refused.code).to.equal(1);
    expect(refused.stderr).to.include('Error: Delete policies are not supported over AMQP 1.0');
  });

  it('a refused attach exits 1 with the condition and description', async function () {
    const res = await spout("sp.bad; {create: always, node: {x-declare: {arguments: {'sow.history.window': 7d}}}}");
    expect(res.code).to.equal(1);
    expect(res.stderr).to.match(/^Error: amqp:invalid-field: .*sow\.history/m);
  });

  it('an unreachable broker exits 1 without hanging', async function () {
    const res = await runTool('spout', ['-b', 'amqp://127.0.0.1:1', 'q'], T);
    expect(res.code).to.equal(1);
    expect(res.stderr).to.match(/^Error: .*127\.0\.0\.1:1/);
  });

  it('missing ADDRESS and unknown flags are errors', async function () {
    const none = await runTool('spout', [], T);
    expect(none.code).to.equal(1);
    expect(none.stderr).to.match(/^Error: /);
    const unknown = await spout('q', '--bogus');
    expect(unknown.code).to.equal(1);
    expect(unknown.stderr).to.match(/^Error: Unknown argument: bogus/);
    // a dashed flag is named once (yargs added its camelCase form)
    const dashed = await spout('q', '--content-typo', 'x');
    expect(dashed.code).to.equal(1);
    expect(dashed.stderr).to.equal('Error: Unknown argument: content-typo\n');
    const config = await runTool('tidemark-config', ['add', 'queue', 'x', '--max-count', '5', '-b', 'amqp://127.0.0.1:1'], T);
    expect(config.code).to.equal(1);
    expect(config.stderr).to.equal('Error: Unknown argument: max-count\n');
  });
});
