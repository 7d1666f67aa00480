/**
 * drain as a child process: flags against a real broker, and the Tidemark source filters,
 * markers, OOF and checkpoints against a scripted rhea peer that records the attach (the
 * wire contract of wire.md 4, independent of how far the broker's SOW features are).
 */
import { expect } from 'chai';
import { mkdtempSync, readFileSync, writeFileSync, existsSync, readdirSync } from 'node:fs';
import { tmpdir, hostname } from 'node:os';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import http from 'node:http';
import net from 'node:net';
import { useBroker, startTestBroker } from '../support/broker.js';
import { runTool, startTool, lines, jsonLines } from '../support/tools.js';
import { r, send, sleep } from '../support/client.js';

const T = { timeoutMs: 20000 };

/** A scripted AMQP peer: records each receiver attach, sends `messages`, answers drains, optionally detaches. */
interface FakePeer { url: string; attaches: any[]; linkNames: string[]; containerIds: string[]; close(): Promise<void> }
function fakePeer(script: { messages?: any[]; closeAfter?: boolean; error?: { condition: string; description: string } } = {}): Promise<FakePeer> {
  const container = r.create_container({ id: 'fake-peer' });
  const attaches: any[] = [];
  const linkNames: string[] = [];
  const containerIds: string[] = [];
  container.on('sender_open', (ctx: any) => {
    const s = ctx.sender;
    attaches.push(s.remote.attach.source);
    linkNames.push(s.name);
    containerIds.push(ctx.connection.remote.open.container_id);
    s.set_source(s.remote.attach.source);
    if (script.error) { s.close({ condition: script.error.condition, description: script.error.description }); return; }
    const queue = [...(script.messages ?? [])];
    let sent = 0;
    let settled = 0;
    // rhea counts credit down only when it writes a transfer: send one message per turn
    let scheduled = false;
    const pump = () => {
      if (scheduled) return;
      if (queue.length && s.sendable()) {
        s.send(queue.shift());
        sent++;
        scheduled = true;
        setTimeout(() => { scheduled = false; pump(); }, 1);
        return;
      }
      if (!queue.length && s.is_open()) {
        if (s._draining) s.set_drained(true);
        if (script.closeAfter && settled === sent) s.close();
      }
    };
    s.on('accepted', () => { settled++; pump(); });
    s.on('sendable', pump);
    s.on('sender_draining', pump);
    pump();
  });
  container.on('error', () => { /* ignore */ });
  container.on('disconnected', () => { /* ignore */ });
  return new Promise((resolve) => {
    const listener = container.listen({ port: 0, host: '127.0.0.1' });
    listener.on('listening', () => resolve({
      url: `amqp://127.0.0.1:${listener.address().port}`, attaches, linkNames, containerIds,
      close: () => new Promise<void>((res) => listener.close(() => res())),
    }));
  });
}

const descriptorOf = (v: any) => String(v?.descriptor?.value ?? v?.descriptor);
/** A filter value as plain data: rhea leaves unknown described values as typed objects (maps as [k, v, …] lists). */
function plain(v: any): any {
  if (v && typeof v === 'object' && v.type && typeof v.type === 'object' && 'value' in v) {
    const inner = v.value;
    if (Array.isArray(inner) && /^Map/.test(String(v.type.name))) {
      const out: Record<string, unknown> = {};
      for (let i = 0; i + 1 < inner.length; i += 2) out[String(plain(inner[i]))] = plain(inner[i + 1]);
      return out;
    }
    if (Buffer.isBuffer(inner) && inner.length === 8 && /long/i.test(String(v.type.name))) return inner.readBigInt64BE(0).toString();
    return plain(inner);
  }
  if (Array.isArray(v)) return v.map(plain);
  return v;
}
const valueOf = (v: any) => plain(v?.value);
/** A map-valued filter: rhea gives the decoded map as a flat [k, v, …] list. */
function mapOf(v: any): Record<string, any> {
  const list = plain(v?.value);
  if (!Array.isArray(list)) return list;
  const out: Record<string, any> = {};
  for (let i = 0; i + 1 < list.length; i += 2) out[String(list[i])] = list[i + 1];
  return out;
}
function filterByDescriptor(source: any, descriptor: string): any {
  for (const v of Object.values(source.filter ?? {})) if (descriptorOf(v) === descriptor) return v;
  return undefined;
}

describe('tools: drain against a broker', function () {
  this.timeout(30000);
  const b = useBroker();
  const drain = (...args: string[]) => runTool('drain', ['-b', b.get().url, ...args], T);
  const fill = (q: string, n: number, extra: Record<string, unknown> = {}) =>
    send(b.get().url, q, Array.from({ length: n }, (_, i) => ({ body: `m${i}`, application_properties: { i }, ...extra })));

  it('--help exits 0 and lists the flags', async function () {
    const res = await runTool('drain', ['--help'], T);
    expect(res.code).to.equal(0);
    for (const f of ['--count', '--timeout', '--forever', '--print-headers', '--print-content', '--print', '--sow', '--sow-and-subscribe', '--subscribe', '--filter', '--selector', '--bookmark', '--at', '--top-n', '--skip-n', '--order-by', '--oof', '--conflation', '--browse', '--checkpoint', '--durable-name']) {
      expect(res.stdout).to.include(f);
    }
  });

  it('reads what is there and exits (-t 0), consuming it', async function () {
    await fill('dr.all', 5);
    const t0 = Date.now();
    const res = await drain('dr.all');
    expect(res.code, res.stderr).to.equal(0);
    expect(lines(res.stdout)).to.deep.equal(['m0', 'm1', 'm2', 'm3', 'm4']);
    expect(Date.now() - t0).to.be.lessThan(4000); // the drain answered: no waiting for the fallback
    expect((await drain('dr.all')).stdout).to.equal('');
  });

  it('refuses before reading: a --checkpoint in a directory that does not exist, a broker URL with a bad % escape', async function () {
    await send(b.get().url, 'dr.cpdir', [{ body: 'kept' }]);
    const res = await drain('-t', '0', '--checkpoint', '/nonexistent-dir-tm/cp.json', 'dr.cpdir');
    expect(res.code).to.equal(1);
    expect(res.stderr).to.equal('Error: --checkpoint: the directory of /nonexistent-dir-tm/cp.json (/nonexistent-dir-tm) does not exist\n');
    expect(res.stdout).to.equal('');
    const url = await runTool('drain', ['-b', 'al%ce/pw@127.0.0.1:1', '-t', '0', 'q'], T);
    expect(url.code).to.equal(1);
    expect(url.stderr).to.equal("Error: broker URL: the user name has a '%' that is not a %XX escape (write a literal '%' as %25)\n");
    // a mistyped flag took the address as its value: the flag is named, not a missing address
    const typo = await drain('-t', '0', '--brwse', 'dr.cpdir');
    expect(typo.code).to.equal(1);
    expect(typo.stderr).to.equal('Error: Unknown argument: brwse (an unknown flag takes the word after it as its value: was that the address?)\n');
    // the same with a long flag before it: only the mistyped one is named (the known ones were
    // named too while the parser's options were looked up on the wrong object)
    const typoLong = await drain('--timeout', '0', '--count', '1', '--brwse', 'dr.cpdir');
    expect(typoLong.stderr).to.equal('Error: Unknown argument: brwse (an unknown flag takes the word after it as its value: was that the address?)\n');
    // a filter that starts with '-' is read by yargs as a flag: say how to give it
    const dash = await drain('-t', '0', '--filter', '-/x + 3 = 5', 'dr.cpdir');
    expect(dash.code).to.equal(1);
    expect(dash.stderr).to.equal(`Error: --filter got no value: "-/x + 3 = 5" starts with '-' and was read as a flag; write --filter='-/x + 3 = 5'\n`);
    await send(b.get().url, 'dr.dash', [{ body: '{"x":2}', content_type: 'application/json' }, { body: '{"x":1}', content_type: 'application/json' }]);
    const dashOk = await drain('-t', '0', '--filter=-/x + 3 = 1', 'dr.dash');
    expect(dashOk.stderr).to.equal('');
    expect(lines(dashOk.stdout)).to.deep.equal(['{"x":2}']);
    // -b twice: named, not a JavaScript TypeError
    const twice = await runTool('drain', ['-b', 'amqp://127.0.0.1:1', '-b', 'amqp://127.0.0.1:2', 'q'], T);
    expect(twice.code).to.equal(1);
    expect(twice.stderr).to.equal('Error: -b/--broker was given 2 times ("amqp://127.0.0.1:1", "amqp://127.0.0.1:2"): give it once\n');
    // TLS to a plain port: one line saying so (no OpenSSL dump, no SNI warning for an IP)
    const tls = await drain('-t', '0', '--connection-options', '{transport: ssl}', 'dr.cpdir');
    expect(tls.code).to.equal(1);
    expect(tls.stderr).to.match(/^Error: cannot connect to amqps:\/\/127\.0\.0\.1:\d+: the TLS handshake failed \(wrong version number\): is this a TLS port\? \(amqps:\/\/ and transport ssl need one\)\n$/);
    // an HTTP port (the metrics and console's, here a plain one): said so, not rhea's hex
    const web = http.createServer((_, res) => res.end('hello'));
    await new Promise<void>((r) => web.listen(0, '127.0.0.1', () => r()));
    try {
      const port = (web.address() as net.AddressInfo).port;
      const viaHttp = await runTool('drain', ['-b', `amqp://127.0.0.1:${port}`, '-t', '0', 'q'], T);
      expect(viaHttp.code).to.equal(1);
      expect(viaHttp.stderr).to.equal(`Error: cannot connect to amqp://127.0.0.1:${port}: it does not speak AMQP (it answered "HTTP"): an HTTP port, such as the broker's metrics and console; its AMQP port is the one printed as "Tidemark listening on amqp://…" (5672 by default)\n`);
    } finally { web.close(); }
    // nothing was consumed
    const rest = await drain('-t', '0', 'dr.cpdir');
    expect(rest.stdout).to.equal('kept\n');
  });

  it('an empty queue exits at once with nothing printed', async function () {
    const t0 = Date.now();
    const res = await drain('dr.empty');
    expect(res.code).to.equal(0);
    expect(res.stdout).to.equal('');
    expect(Date.now() - t0).to.be.lessThan(4000);
  });

  it('-c N stops after N and leaves the rest', async function () {
    await fill('dr.count', 5);
    const res = await drain('-c', '2', 'dr.count');
    expect(lines(res.stdout)).to.deep.equal(['m0', 'm1']);
    expect(lines((await drain('dr.count')).stdout)).to.deep.equal(['m2', 'm3', 'm4']);
  });

  it('--sow of more than 2048 records prints them all (the pre-settled group_begin is settled locally)', async function () {
    // rhea frees a session's incoming slots (2048) only from the oldest locally settled
    // delivery: an unsettled pre-settled marker used to stall the link after 2048 deliveries.
    const q = { address: 'dr.big-sow', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } };
    await send(b.get().url, q, Array.from({ length: 2500 }, (_, i) => ({ body: JSON.stringify({ id: `k${i}` }) })));
    const t0 = Date.now();
    const res = await drain('-p', 'json', '--sow', 'dr.big-sow');
    expect(res.code, res.stderr).to.equal(0);
    const cmds = jsonLines(res.stdout).map((m) => m.annotations['x-opt-tm-cmd']);
    expect(cmds.length).to.equal(2502);
    expect([cmds[0], cmds.at(-1)]).to.deep.equal(['group_begin', 'group_end']);
    expect(Date.now() - t0).to.be.lessThan(4000); // not the 5 s drain fallback after a stall
  });

  it('-t S waits up to S seconds for the next message', async function () {
    const d = startTool('drain', ['-b', b.get().url, '-t', '3', 'dr.wait'], T);
    await sleep(600);
    await fill('dr.wait', 2);
    const res = await d.done;
    expect(res.code, res.stderr).to.equal(0);
    expect(lines(res.stdout)).to.deep.equal(['m0', 'm1']);
  });

  it('-f keeps receiving until interrupted; -f -c N stops after N', async function () {
    const d = startTool('drain', ['-b', b.get().url, '-f', 'dr.forever'], T);
    await fill('dr.forever', 1);
    await d.waitFor('m0');
    await sleep(300);
    await fill('dr.forever', 2);
    await d.waitFor(/m0\nm0\nm1\n/);
    d.kill('SIGINT');
    const res = await d.done;
    expect(res.code).to.equal(0);
    const counted = startTool('drain', ['-b', b.get().url, '-f', '-c', '2', 'dr.forever2'], T);
    await fill('dr.forever2', 3);
    const res2 = await counted.done;
    expect(res2.code).to.equal(0);
    expect(lines(res2.stdout)).to.deep.equal(['m0', 'm1']);
  });

  it('--browse leaves the messages; --print-headers and -p json show the fields', async function () {
    await send(b.get().url, 'dr.browse', [{ body: { a: 1 }, subject: 's', message_id: 'id1', application_properties: { p: 'v' }, message_annotations: { 'x-opt-x': 1 } }]);
    const h = await drain('--browse', '--print-headers', 'dr.browse');
    expect(h.code).to.equal(0);
    expect(h.stdout).to.include('Subject: s');
    expect(h.stdout).to.include('Message-Id: id1');
    expect(h.stdout).to.include('Properties: {"p":"v"}');
    expect(h.stdout).to.include('"x-opt-x":1');
    expect(lines(h.stdout).pop()).to.equal('{"a":1}');
    const j = await drain('--browse', '-p', 'json', 'dr.browse');
    const [m] = jsonLines(j.stdout);
    expect(m.body).to.deep.equal({ a: 1 });
    expect(m.properties).to.include({ subject: 's', message_id: 'id1' });
    expect(m.application_properties).to.deep.equal({ p: 'v' });
    expect(m.annotations).to.have.property('x-opt-x', 1);
    const quiet = await drain('--no-print-content', 'dr.browse');
    expect(quiet.stdout).to.equal('');
    expect(await drain('dr.browse')).to.have.property('code', 0);
  });

  it('--selector selects by property; a bad address exits 1 with the parser message', async function () {
    await fill('dr.sel', 4);
    const res = await drain('--selector', 'i >= 2', 'dr.sel');
    expect(res.code, res.stderr).to.equal(0);
    expect(lines(res.stdout)).to.deep.equal(['m2', 'm3']);
    const bad = await drain('dr.sel; {mode: fetch}');
    expect(bad.code).to.equal(1);
    expect(bad.stderr).to.match(/^Error: .*mode/);
  });

  it('--durable-name detaches without ending the subscription: the next run resumes after the last accepted message, also after a broker restart', async function () {
    // QA: drain closed its link (detach closed=true), which ends a durable subscription, so
    // `tidemark-config subscriptions` showed nothing and a re-run started again from ev:0.
    const tb = await startTestBroker();
    try {
      const run = (...args: string[]) => runTool('drain', ['-b', tb.url, ...args], T);
      expect((await runTool('tidemark-config', ['-b', tb.url, 'add', 'queue', 'dr.ev', '--browse-only', '--durable'], T)).code).to.equal(0);
      const events = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => ({ body: `ev:${from + i}`, durable: true }));
      await send(tb.url, 'dr.ev', events(0, 10));
      const first = await run('--durable-name', 'audit', '-c', '4', 'dr.ev');
      expect(first.code, first.stderr).to.equal(0);
      expect(lines(first.stdout)).to.deep.equal(['ev:0', 'ev:1', 'ev:2', 'ev:3']);
      const subs = JSON.parse((await runTool('tidemark-config', ['-b', tb.url, 'subscriptions', '--json'], T)).stdout);
      expect(subs.map((x: any) => [x.container, x.link, x.queue, x.position])).to.deep.equal([[`drain@${hostname()}`, 'audit', 'dr.ev', 4]]);
      const second = await run('--durable-name', 'audit', '-t', '1', 'dr.ev');
      expect(second.code, second.stderr).to.equal(0);
      expect(lines(second.stdout)).to.deep.equal(['ev:4', 'ev:5', 'ev:6', 'ev:7', 'ev:8', 'ev:9']);
      await send(tb.url, 'dr.ev', events(10, 12));
      await tb.restart();
      const third = await run('--durable-name', 'audit', 'dr.ev');
      expect(third.code, third.stderr).to.equal(0);
      expect(lines(third.stdout)).to.deep.equal(['ev:10', 'ev:11']);
      // the documented way to end it: the container id that `subscriptions` shows
      const del = await runTool('tidemark-config', ['-b', tb.url, 'del', 'subscription', `drain@${hostname()}/audit`], T);
      expect(del.code, del.stderr).to.equal(0);
      expect(JSON.parse((await runTool('tidemark-config', ['-b', tb.url, 'subscriptions', '--json'], T)).stdout)).to.deep.equal([]);
    } finally { await tb.stop(); }
  });

  it('a reader that closes stdout (drain | head) ends drain quietly with exit 0, and the message it could not print stays on the queue', async function () {
    // QA: `drain … | head -2` ended with "Error: write EPIPE" and exit 1.
    const d = startTool('drain', ['-b', b.get().url, '-f', 'dr.pipe'], T);
    await fill('dr.pipe', 1);
    await d.waitFor('m0');
    d.proc.stdout!.destroy(); // the reader goes away, as head does after its lines
    await send(b.get().url, 'dr.pipe', [{ body: 'unprinted' }]);
    const res = await d.done;
    expect(res.timedOut).to.equal(false);
    expect(res.stderr).to.equal('');
    expect(res.code).to.equal(0);
    expect(lines((await drain('dr.pipe')).stdout)).to.deep.equal(['unprinted']);
  });

  it('text mode shows a SOW delete as -- delete key=K --, not as the deleted record', async function () {
    // QA: a delete event printed the deleted record's body, exactly like a publish.
    const q = { address: 'dr.del', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } };
    await send(b.get().url, q, [{ body: '{"id":5,"v":1}' }, { body: '{"id":6,"v":1}' }]);
    const del = await runTool('spout', ['-b', b.get().url, '--delete', '--key', '5', 'dr.del'], T);
    expect(del.code, del.stderr).to.equal(0);
    const res = await drain('--subscribe', '--bookmark', '0', 'dr.del');
    expect(res.code, res.stderr).to.equal(0);
    expect(lines(res.stdout)).to.deep.equal(['{"id":5,"v":1}', '{"id":6,"v":1}', '-- delete key=5 --', '-- completed --']);
    // -p json is unchanged: the event is an object whose annotations say what it is
    const json = jsonLines((await drain('-p', 'json', '--subscribe', '--bookmark', '0', 'dr.del')).stdout);
    expect(json[2].annotations).to.include({ 'x-opt-tm-cmd': 'delete', 'x-opt-tm-key': '5' });
  });

  it('a non-integer flag value is reported as typed', async function () {
    // QA: `drain --top-n abc` said "expects an integer >= 0, got 'NaN'".
    const res = await drain('--sow', '--top-n', 'abc', 'dr.any');
    expect(res.code).to.equal(1);
    expect(res.stderr).to.equal("Error: --top-n expects an integer >= 0, got 'abc'\n");
    const c = await drain('-c', '2x', 'dr.any');
    expect(c.stderr).to.equal("Error: --count expects an integer >= 0, got '2x'\n");
  });

  it('a link the broker refuses prints Error: <condition>: <description> and exits 1', async function () {
    await fill('dr.plain', 1);
    const res = await drain('--sow', 'dr.plain');
    expect(res.code).to.equal(1);
    expect(res.stderr).to.match(/^Error: amqp:[a-z-]+: .+/m);
  });
});

describe('tools: drain on the wire (scripted peer)', function () {
  this.timeout(30000);
  const tmp = mkdtempSync(path.join(tmpdir(), 'tidemark-drain-'));

  it('sends every Tidemark filter with its symbolic descriptor', async function () {
    const peer = await fakePeer();
    try {
      const res = await runTool('drain', ['-b', peer.url, '--sow-and-subscribe', '--filter', '/price > 10', '--selector', "colour = 'red'", '--at', '20240101T000000Z',
        '--top-n', '5', '--skip-n', '2', '--order-by', '/price DESC', '--oof', '--conflation', '500ms', '--browse', 'prices'], T);
      expect(res.code, res.stderr).to.equal(0);
      const src = peer.attaches[0];
      expect(src.address).to.equal('prices');
      expect(src.distribution_mode).to.equal('copy');
      const cmd = filterByDescriptor(src, 'tidemark:command:symbol');
      expect(cmd, JSON.stringify(src.filter)).to.exist;
      expect(String(valueOf(cmd))).to.equal('sow_and_subscribe');
      expect(valueOf(filterByDescriptor(src, 'tidemark:content-filter:string'))).to.equal('/price > 10');
      expect(valueOf(filterByDescriptor(src, 'apache.org:selector-filter:string'))).to.equal("colour = 'red'");
      expect(valueOf(filterByDescriptor(src, 'tidemark:bookmark:string'))).to.equal('20240101T000000Z');
      const opts = mapOf(filterByDescriptor(src, 'tidemark:options:map'));
      expect(opts).to.deep.include({ top_n: 5, skip_n: 2, order_by: '/price DESC', oof: true, conflation: '500ms' });
    } finally { await peer.close(); }
  });

  it('--sow and --subscribe send their commands; --durable-name makes a durable link with a stable container id', async function () {
    const peer = await fakePeer();
    try {
      expect((await runTool('drain', ['-b', peer.url, '--sow', 'q'], T)).code).to.equal(0);
      expect((await runTool('drain', ['-b', peer.url, '--subscribe', '--bookmark', '0', 'q'], T)).code).to.equal(0);
      expect((await runTool('drain', ['-b', peer.url, '--durable-name', 'sub1', 'q'], T)).code).to.equal(0);
      expect((await runTool('drain', ['-b', peer.url, '--durable-name', 'sub1', 'q'], T)).code).to.equal(0);
      expect(String(valueOf(filterByDescriptor(peer.attaches[0], 'tidemark:command:symbol')))).to.equal('sow');
      expect(String(valueOf(filterByDescriptor(peer.attaches[1], 'tidemark:command:symbol')))).to.equal('subscribe');
      expect(valueOf(filterByDescriptor(peer.attaches[1], 'tidemark:bookmark:string'))).to.equal('0');
      expect(peer.linkNames[2]).to.equal('sub1');
      expect(peer.attaches[2].durable).to.equal(2);
      expect(peer.attaches[2].expiry_policy).to.equal('never');
      expect(peer.containerIds[2]).to.equal(peer.containerIds[3]);
      expect(peer.containerIds[0]).to.not.equal(peer.containerIds[1]);
    } finally { await peer.close(); }
  });

  it('prints group markers and OOF distinctly; a sow link closed without error exits 0', async function () {
    const sym = (s: string) => r.types.wrap_symbol(s);
    const peer = await fakePeer({
      closeAfter: true,
      messages: [
        { body: null, message_annotations: { 'x-opt-tm-cmd': sym('group_begin') } },
        { body: '{"id":1}', message_annotations: { 'x-opt-tm-cmd': sym('sow'), 'x-opt-tm-key': '1' } },
        { body: '{"id":2}', message_annotations: { 'x-opt-tm-cmd': sym('sow'), 'x-opt-tm-key': '2' } },
        { body: null, message_annotations: { 'x-opt-tm-cmd': sym('group_end'), 'x-opt-tm-scn': 7 } },
        { body: '{"id":1}', message_annotations: { 'x-opt-tm-cmd': sym('oof'), 'x-opt-tm-oof-reason': sym('match'), 'x-opt-tm-key': '1' } },
        { body: null, message_annotations: { 'x-opt-tm-cmd': sym('completed') } },
      ],
    });
    try {
      const res = await runTool('drain', ['-b', peer.url, '-f', '--sow-and-subscribe', 'prices'], T);
      expect(res.code, res.stderr).to.equal(0);
      expect(lines(res.stdout)).to.deep.equal(['-- group_begin --', '{"id":1}', '{"id":2}', '-- group_end --', 'OOF(match) key=1', '-- completed --']);
      // -c counts data messages, not markers
      const counted = await runTool('drain', ['-b', peer.url, '-c', '2', '--sow', 'prices'], T);
      expect(lines(counted.stdout)).to.deep.equal(['-- group_begin --', '{"id":1}', '{"id":2}']);
    } finally { await peer.close(); }
  });

  it('--checkpoint sends a flexible checkpoint for a missing file and writes each x-opt-tm-checkpoint back atomically', async function () {
    const cp = (scn: number) => ({ consumption_mode: 'ONLINE_CONSUMPTION', windowScn: scn, prevScn: scn - 1, windowOffset: -1, tsNsecs: r.types.wrap_ulong(Buffer.from('17f0000000000001', 'hex')) });
    const peer = await fakePeer({
      messages: [1, 2, 3].map((n) => ({ body: `e${n}`, message_annotations: { 'x-opt-tm-checkpoint': cp(n) } })),
    });
    const file = path.join(tmp, 'cp.json');
    writeFileSync(path.join(tmp, 'unrelated'), '');
    // what a drain killed between writing its temporary file and renaming it leaves behind
    // (QA: cp2.json.tmp-22640 after a kill -9): removed when its process is gone
    const deadPid = spawnSync(process.execPath, ['-e', '']).pid!;
    writeFileSync(`${file}.tmp-${deadPid}`, '{}');
    try {
      const res = await runTool('drain', ['-b', peer.url, '--checkpoint', file, 'events'], T);
      expect(res.code, res.stderr).to.equal(0);
      expect(lines(res.stdout)).to.deep.equal(['e1', 'e2', 'e3']);
      const first = mapOf(filterByDescriptor(peer.attaches[0], 'tidemark:checkpoint:map'));
      expect(first).to.deep.equal({ consumption_mode: 'ONLINE_CONSUMPTION', windowScn: -1, prevScn: -1, windowOffset: -1 });
      expect(existsSync(file)).to.equal(true);
      const saved = JSON.parse(readFileSync(file, 'utf8'));
      expect(saved.events).to.deep.include({ consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 3, prevScn: 2, windowOffset: -1 });
      expect(saved.events.tsNsecs).to.equal(BigInt('0x17f0000000000001').toString());
      expect(readdirSync(tmp).filter((f) => f.includes('.tmp-'))).to.deep.equal([]);
      // re-run: resumes from the file
      const again = await runTool('drain', ['-b', peer.url, '--checkpoint', file, 'events'], T);
      expect(again.code, again.stderr).to.equal(0);
      const resumed = mapOf(filterByDescriptor(peer.attaches[1], 'tidemark:checkpoint:map'));
      expect(resumed).to.deep.include({ consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 3, prevScn: 2 });
      expect(resumed.tsNsecs).to.equal(BigInt('0x17f0000000000001').toString()); // a long, exactly
      // another queue's checkpoint in the same file is kept apart
      expect((await runTool('drain', ['-b', peer.url, '--checkpoint', file, 'other'], T)).code).to.equal(0);
      const both = JSON.parse(readFileSync(file, 'utf8'));
      expect(Object.keys(both).sort()).to.deep.equal(['events', 'other']);
    } finally { await peer.close(); }
  });

  it('--checkpoint sends snapshot_offset back as a string even when the SOW key looks like an integer, and the integer fields as longs', async function () {
    // QA: the file held "snapshot_offset": "11" and drain sent it back as a long, which the
    // broker refused (tidemark:checkpoint:map: snapshot_offset must be a string).
    const peer = await fakePeer();
    const file = path.join(tmp, 'cp-snap.json');
    writeFileSync(file, JSON.stringify({ prices: {
      consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: 59, prevScn: 59, windowOffset: -1, bootstrap_since_scn: 0, bootstrap_start_scn: 59,
      snapshot_offset: '11', tsNsecs: '1796086256855000064',
    } }));
    try {
      const res = await runTool('drain', ['-b', peer.url, '--checkpoint', file, 'prices'], T);
      expect(res.code, res.stderr).to.equal(0);
      const f = filterByDescriptor(peer.attaches[0], 'tidemark:checkpoint:map');
      // the raw decoded map, [k, v, …]: the type of each value as the broker sees it
      const raw: any[] = Array.isArray(f.value) ? f.value : f.value.value;
      const typeOf = (k: string) => String(raw[raw.findIndex((x: any) => plain(x) === k) + 1]?.type?.name);
      expect(typeOf('snapshot_offset')).to.match(/^Str/);
      expect(typeOf('consumption_mode')).to.match(/^Str/);
      for (const k of ['windowScn', 'prevScn', 'windowOffset', 'bootstrap_since_scn', 'bootstrap_start_scn', 'tsNsecs']) expect(typeOf(k), k).to.match(/^(Small)?Long$/);
      expect(mapOf(f)).to.deep.include({ snapshot_offset: '11', windowScn: 59, tsNsecs: '1796086256855000064' });
    } finally { await peer.close(); }
  });

  it('-p json prints a checkpoint tsNsecs beyond 2^53 as a decimal string, not as its 8 bytes', async function () {
    // QA: {"binary":"GOz67z3c5gA="} in drain -p json.
    const ts = Buffer.from('18ecfaef3ddce600', 'hex');
    const peer = await fakePeer({
      messages: [{ body: 'e1', message_annotations: { 'x-opt-tm-cmd': r.types.wrap_symbol('publish'), 'x-opt-tm-checkpoint': { consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 1, prevScn: 1, windowOffset: -1, tsNsecs: r.types.wrap_long(ts) } } }],
    });
    try {
      const res = await runTool('drain', ['-b', peer.url, '-p', 'json', '--checkpoint', path.join(tmp, 'cp-json.json'), 'events'], T);
      expect(res.code, res.stderr).to.equal(0);
      const [m] = jsonLines(res.stdout);
      expect(m.body).to.equal('e1');
      expect(m.annotations['x-opt-tm-checkpoint']).to.deep.equal({ consumption_mode: 'ONLINE_CONSUMPTION', windowScn: 1, prevScn: 1, windowOffset: -1, tsNsecs: ts.readBigInt64BE(0).toString() });
      expect(JSON.parse(readFileSync(path.join(tmp, 'cp-json.json'), 'utf8')).events.tsNsecs).to.equal(ts.readBigInt64BE(0).toString());
    } finally { await peer.close(); }
  });

  it('text mode marks a group_begin that resumes a snapshot (its checkpoint has snapshot_offset)', async function () {
    const sym = (s: string) => r.types.wrap_symbol(s);
    const snap = (key?: string) => ({ consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: 9, prevScn: 9, windowOffset: -1, bootstrap_since_scn: 0, bootstrap_start_scn: 9, ...(key ? { snapshot_offset: key } : {}) });
    const peer = await fakePeer({
      closeAfter: true,
      messages: [
        { body: null, message_annotations: { 'x-opt-tm-cmd': sym('group_begin'), 'x-opt-tm-checkpoint': snap('11') } },
        { body: '{"id":12}', message_annotations: { 'x-opt-tm-cmd': sym('sow'), 'x-opt-tm-key': '12', 'x-opt-tm-checkpoint': snap('12') } },
        { body: null, message_annotations: { 'x-opt-tm-cmd': sym('group_begin'), 'x-opt-tm-checkpoint': snap() } },
      ],
    });
    try {
      const res = await runTool('drain', ['-b', peer.url, '-f', 'prices'], T);
      expect(res.code, res.stderr).to.equal(0);
      expect(lines(res.stdout)).to.deep.equal(['-- group_begin (resumed after key 11) --', '{"id":12}', '-- group_begin --']);
    } finally { await peer.close(); }
  });

  it('a detach with an error prints Error: <condition>: <description> and exits 1', async function () {
    const peer = await fakePeer({ error: { condition: 'tidemark:scn-not-found', description: 'position 5 fell off the log' } });
    try {
      const res = await runTool('drain', ['-b', peer.url, '--checkpoint', path.join(tmp, 'x.json'), 'q'], T);
      expect(res.code).to.equal(1);
      expect(res.stderr).to.equal('Error: tidemark:scn-not-found: position 5 fell off the log\n');
    } finally { await peer.close(); }
  });

  it('an unreadable checkpoint file is an error', async function () {
    const file = path.join(tmp, 'broken.json');
    writeFileSync(file, '{not json');
    const res = await runTool('drain', ['-b', 'amqp://127.0.0.1:1', '--checkpoint', file, 'q'], T);
    expect(res.code).to.equal(1);
    expect(res.stderr).to.match(/^Error: --checkpoint: cannot read/);
  });
});
