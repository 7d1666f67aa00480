/**
 * Protocol edges a hostile-input audit found (docs/robustness.md 1b): valid frames that break
 * a rule, or legal frames rhea handled badly. Each case fails on the code before the fix
 * (lib/core/protocol/rhea-guards.ts, server.ts, sink.ts). After every case a control client
 * on its own connection must still round-trip, and a fresh connection must publish and
 * consume within a generous bound: the broker and every other client carry on.
 */
import net from 'node:net';
import { spawn } from 'node:child_process';
import { expect } from 'chai';
import { useBroker, type TestBroker } from '../support/broker.js';
import { connect, openSender, openReceiver, sendAll, collect, sleep, type Conn } from '../support/client.js';
import * as F from '../support/amqp-frames.js';
import { RawClient, t, Code } from '../support/amqp-frames.js';
import { protonAvailable, PYTHON } from '../support/proton.js';
import { tmFilters } from '../support/sow-client.js';

const LIMITS = {
  maxFrameSize: 65536, maxMessageSize: 16384, maxConnections: 1000, maxSessionsPerConnection: 16,
  maxLinksPerSession: 16, maxUnsettledPerLink: 1000, idleTimeoutMs: 60000, senderCredit: 10,
};

// ---- frames --------------------------------------------------------------------------------

/** A transfer with every field that matters here [AMQP 2.7.5]; continuation frames pass id: null. */
function transfer(o: { handle?: number; id?: number | null; settled?: boolean; more?: boolean; aborted?: boolean; payload?: Buffer; channel?: number }): Buffer {
  const first = o.id !== null && o.id !== undefined;
  return F.amqp(Code.transfer, [
    t.uint(o.handle ?? 0), first ? t.uint(o.id!) : null, first ? t.bin(Buffer.from(String(o.id))) : null, first ? t.uint(0) : null,
    o.settled === undefined ? null : t.bool(o.settled), o.more === undefined ? null : t.bool(o.more), null, null, null,
    o.aborted === undefined ? null : t.bool(o.aborted),
  ], o.channel ?? 0, o.payload ?? Buffer.alloc(0));
}
const message = (body: string) => F.amqpValueMessage(body);
/** role true: we are the receiver (settling the broker's deliveries); false: the sender. */
const disposition = (role: boolean, first: number, last: number) => F.amqp(Code.disposition, [t.bool(role), t.uint(first), t.uint(last), t.bool(true), t.described(Code.accepted, [])]);
const senderAttach = (name: string, address: string, handle = 0, channel = 0) => F.attach({ name: t.str(name), handle: t.uint(handle), role: t.bool(false), source: F.source(), target: F.target({ address: t.str(address) }), channel });
const receiverAttach = (name: string, address: string, handle = 0, o: { settled?: boolean } = {}) =>
  F.attach({ name: t.str(name), handle: t.uint(handle), role: t.bool(true), source: F.source({ address: t.str(address) }), target: F.target(), sndSettleMode: o.settled ? t.ubyte(1) : undefined });

/** The frames a raw client got, for failure messages (runs of one name collapsed). */
function names(c: RawClient): string[] {
  const out: string[] = [];
  for (const f of c.frames) {
    const n = f.name + (f.error ? `{${f.error.condition}}` : '');
    const lastRun = out[out.length - 1];
    const m = lastRun ? /^(.*) x(\d+)$/.exec(lastRun) : null;
    if (lastRun === n) out[out.length - 1] = `${n} x2`;
    else if (m && m[1] === n) out[out.length - 1] = `${n} x${Number(m[2]) + 1}`;
    else out.push(n);
  }
  return out;
}
const count = (c: RawClient, name: string) => c.frames.filter((f) => f.name === name).length;
/** Dispositions from the broker: [first, last, outcome descriptor]. */
const dispositions = (c: RawClient) => c.frames.filter((f) => f.name === 'disposition').map((f) => [f.fields[1], f.fields[2] ?? f.fields[1], (f.fields[4] as any)?.descriptor] as [number, number, number]);
/** True when the broker settled delivery `id` with accepted (0x24). */
const accepted = (c: RawClient, id: number) => dispositions(c).some(([a, b, d]) => d === 0x24 && ((id - a) >>> 0) <= ((b - a) >>> 0));

async function expectFrame(c: RawClient, name: string, condition?: string, ms = 3000): Promise<F.ParsedFrame> {
  const ok = await c.waitFor((x) => !!x.find(name) || !!x.find('close'), ms);
  expect(ok, `expected ${name}; got ${JSON.stringify(names(c))}`).to.equal(true);
  const f = c.find(name) ?? c.find('close')!;
  expect(f.name, `got ${JSON.stringify(names(c))}: ${f.error?.description}`).to.equal(name);
  if (condition) expect(f.error?.condition, String(f.error?.description)).to.equal(condition);
  return f;
}

/** Hand-encoded list32 values nested `depth` deep around uint 1 (rhea's own encoder would recurse). */
function nestedLists(depth: number): Buffer {
  const b = Buffer.alloc(9 * depth + 5);
  for (let i = 0; i < depth; i++) { const at = 9 * i; b[at] = 0xd0; b.writeUInt32BE(9 * (depth - i - 1) + 5 + 4, at + 1); b.writeUInt32BE(1, at + 5); }
  b[9 * depth] = 0x70; b.writeUInt32BE(1, 9 * depth + 1);
  return b;
}

/** Publishes with a fresh connection and reads it back: the broker serves other clients. */
async function publishAndConsume(url: string, ms = 10000): Promise<void> {
  const q = 'edges.health.' + Math.random().toString(36).slice(2);
  const work = (async () => {
    const c = await connect(url);
    try {
      const s = await openSender(c, { address: q });
      const [o] = await sendAll(s, [{ body: 'ping' }]);
      expect(o.state).to.equal('accepted');
      const r = await openReceiver(c, { address: q });
      const got = await collect(r, { count: 1, idleMs: 3000 });
      expect(got.map((m) => m.message.body)).to.deep.equal(['ping']);
    } finally { await c.close(); }
  })();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, rej) => { timer = setTimeout(() => rej(new Error(`no publish + consume within ${ms} ms: the broker is not serving`)), ms); });
  try { await Promise.race([work, late]); } finally { clearTimeout(timer); }
}

async function drain(url: string, address: string, idleMs = 800): Promise<unknown[]> {
  const c = await connect(url);
  try {
    const r = await openReceiver(c, { address });
    return (await collect(r, { idleMs, credit: 1000 })).map((m) => m.message.body);
  } finally { await c.close(); }
}

async function publish(url: string, address: string, bodies: unknown[]): Promise<void> {
  const c = await connect(url);
  try {
    const s = await openSender(c, { address });
    for (let i = 0; i < bodies.length; i += 500) {
      const outcomes = await sendAll(s, bodies.slice(i, i + 500).map((body) => ({ body })));
      expect(outcomes.every((o) => o.state === 'accepted')).to.equal(true);
    }
  } finally { await c.close(); }
}

/** A raw connection: header, open, begin, then a sender link on `address` with its credit. */
async function rawSender(tb: TestBroker, address: string, opened: RawClient[], name = 'edge-sender'): Promise<RawClient> {
  const c = await RawClient.connect(tb.port); opened.push(c);
  await c.handshake();
  c.write(senderAttach(name, address));
  expect(await c.waitFor((x) => !!x.find('flow'), 3000), 'credit').to.equal(true);
  return c;
}

/** A raw connection with a receiver link on `address` (handle 0), attached, given `credit` from delivery-count 0. */
async function rawReceiver(tb: TestBroker, address: string, opened: RawClient[], name: string, credit: number): Promise<RawClient> {
  const c = await RawClient.connect(tb.port); opened.push(c);
  await c.handshake();
  c.write(receiverAttach(name, address));
  await expectFrame(c, 'attach');
  c.write(F.flow({ handle: t.uint(0), linkCredit: t.uint(credit), deliveryCount: t.uint(0), nextIncomingId: t.uint(0) }));
  return c;
}

// ---- the cases -------------------------------------------------------------------------------

describe('protocol edges (hostile-input audit, docs/robustness.md 1b)', function () {
  this.timeout(60000);
  const b = useBroker({ limits: LIMITS });
  let control: Conn;
  let controlSender: any;
  let controlReceiver: any;
  const controlErrors: string[] = [];
  let seq = 0;
  const opened: RawClient[] = [];

  before(async function () {
    control = await connect(b.get().url);
    for (const ev of ['connection_error', 'disconnected', 'connection_close', 'session_error', 'sender_error', 'receiver_error', 'sender_close', 'receiver_close']) {
      control.connection.on(ev, () => controlErrors.push(ev));
    }
    controlSender = await openSender(control, { address: 'edges.control' });
    controlReceiver = await openReceiver(control, { address: 'edges.control' });
  });
  after(async () => { await control?.close(); });

  afterEach(async function () {
    for (const c of opened.splice(0)) c.destroy();
    const bodies = Array.from({ length: 3 }, () => `ctl-${seq++}`);
    const got = collect(controlReceiver, { count: 3, idleMs: 5000 });
    const outcomes = await sendAll(controlSender, bodies.map((body) => ({ body })));
    expect(outcomes.map((o) => o.state)).to.deep.equal(['accepted', 'accepted', 'accepted']);
    expect((await got).map((m) => m.message.body)).to.deep.equal(bodies);
    expect(controlErrors, 'control connection saw an error').to.deep.equal([]);
    await publishAndConsume(b.get().url);
  });

  describe('1. dispositions over huge ranges visit only the deliveries that exist', function () {
    it('role=receiver first=0 last=0xffffffff settles the outstanding deliveries and the broker keeps serving', async function () {
      const tb = b.get();
      await publish(tb.url, 'edges.disp', ['a', 'b', 'c']);
      const c = await rawReceiver(tb, 'edges.disp', opened, 'disp', 10);
      expect(await c.waitFor((x) => count(x, 'transfer') >= 3, 3000), 'the 3 messages').to.equal(true);
      c.write(disposition(true, 0, 0xffffffff));
      // rhea looped 2^32 times: the event loop was blocked 12-35 s.
      await publishAndConsume(tb.url, 3000);
      c.write(F.detach(0, true));
      await c.waitFor((x) => count(x, 'detach') >= 1, 3000);
      expect(await drain(tb.url, 'edges.disp'), 'all three were accepted by the range').to.deep.equal([]);
      expect(c.find('close')).to.equal(undefined);
    });

    it('role=sender first=5 last=0xfffffff0 (incoming deliveries) does not block the broker', async function () {
      const tb = b.get();
      const c = await rawSender(tb, 'edges.disp2', opened);
      c.write(transfer({ id: 0, payload: message('kept') }));
      expect(await c.waitFor((x) => accepted(x, 0), 3000)).to.equal(true);
      c.write(disposition(false, 5, 0xfffffff0));
      await publishAndConsume(tb.url, 3000);
      c.write(transfer({ id: 1, payload: message('after') }));
      expect(await c.waitFor((x) => accepted(x, 1), 3000), 'the link still works').to.equal(true);
      expect(await drain(tb.url, 'edges.disp2')).to.deep.equal(['kept', 'after']);
    });
  });

  describe('2. aborted transfers are discarded [AMQP 2.6.14]', function () {
    for (const settled of [false, true]) {
      it(`a complete message with more=true, then aborted=true${settled ? ' (pre-settled)' : ''}: not stored, no disposition, the next message is`, async function () {
        const tb = b.get();
        const q = `edges.abort.${settled}`;
        const c = await rawSender(tb, q, opened);
        c.write(transfer({ id: 0, settled, more: true, payload: message('ABORTED-MUST-NOT-BE-STORED') }));
        c.write(transfer({ id: null, settled, aborted: true }));
        c.write(transfer({ id: 1, payload: message('after-abort') }));
        expect(await c.waitFor((x) => accepted(x, 1), 3000), `next message settled; got ${JSON.stringify(dispositions(c))}`).to.equal(true);
        expect(accepted(c, 0), 'no outcome for the aborted delivery').to.equal(false);
        expect(c.find('detach') ?? c.find('end') ?? c.find('close')).to.equal(undefined);
        expect(await drain(tb.url, q)).to.deep.equal(['after-abort']);
      });
    }

    it('30 aborted deliveries (first-frame and mid-stream) keep credit and delivery-count right: the 31st is stored', async function () {
      const tb = b.get();
      const c = await rawSender(tb, 'edges.abort.many', opened);
      // senderCredit is 10: without the aborted ones counted and topped up, credit runs out.
      for (let id = 0; id < 30; id++) {
        if (id % 2 === 0) c.write(transfer({ id, aborted: true, payload: message('x') }));
        else c.write(transfer({ id, more: true, payload: Buffer.alloc(3000, 0x41) }), transfer({ id: null, aborted: true }));
        // (credit is topped up as deliveries end: wait for it as a client would)
        if (id % 4 === 3) await sleep(20);
      }
      c.write(transfer({ id: 30, payload: message('the-31st') }));
      expect(await c.waitFor((x) => accepted(x, 30), 5000), `got ${JSON.stringify(names(c))}`).to.equal(true);
      expect(c.find('detach'), 'no link error').to.equal(undefined);
      const flows = c.frames.filter((f) => f.name === 'flow');
      const last = flows[flows.length - 1];
      expect(Number(last.fields[5]) + Number(last.fields[6]), 'the credit window counts the aborted deliveries').to.be.at.least(31);
      expect(await drain(tb.url, 'edges.abort.many')).to.deep.equal(['the-31st']);
    });

    it('Python Proton: delivery.abort() after streaming 2000 bytes, then a normal message', async function () {
      if (!protonAvailable()) this.skip();
      const tb = b.get();
      const script = [
        'import sys, json', 'from proton import Message', 'from proton.handlers import MessagingHandler', 'from proton.reactor import Container',
        'port = sys.argv[1]', 'out = {"accepted": [], "error": None}',
        'class Abort(MessagingHandler):',
        '    def __init__(self):', '        super().__init__(auto_settle=False)', '        self.done = False',
        '    def on_start(self, e):',
        '        self.conn = e.container.connect("127.0.0.1:%s" % port)', '        self.snd = e.container.create_sender(self.conn, "edges.proton.abort")',
        '    def on_sendable(self, e):',
        '        if self.done: return',
        '        self.done = True',
        '        data = Message(body="ABORTED-BY-PROTON " + "x" * 3000).encode()',
        '        self.dlv = self.snd.delivery("t1")', '        self.snd.stream(data[:1500])', '        self.snd.stream(data[1500:2000])',
        '        self.step = 0', '        e.container.schedule(0.3, self)',
        '    def on_timer_task(self, e):',
        '        self.step += 1',
        '        if self.step == 1:', '            self.dlv.abort()', '            self.snd.send(Message(body="normal-after-abort"))', '            e.container.schedule(5, self)',
        '        else:', '            self.conn.close()',
        '    def on_accepted(self, e):', '        out["accepted"].append(str(e.delivery.tag))', '        self.conn.close()',
        '    def on_transport_error(self, e):', '        out["error"] = str(e.transport.condition)',
        '    def on_connection_error(self, e):', '        out["error"] = str(e.connection.remote_condition)',
        'Container(Abort()).run()', 'print(json.dumps(out))',
      ].join('\n');
      const r = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        const p = spawn(PYTHON, ['-c', script, String(tb.port)], { stdio: ['ignore', 'pipe', 'pipe'] });
        let stdout = ''; let stderr = '';
        p.stdout.on('data', (d) => { stdout += d; }); p.stderr.on('data', (d) => { stderr += d; });
        const timer = setTimeout(() => p.kill('SIGKILL'), 20000);
        p.on('close', (code) => { clearTimeout(timer); resolve({ code, stdout, stderr }); });
      });
      expect(r.code, r.stderr).to.equal(0);
      const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
      expect(out.error, 'the connection was not closed with an error').to.equal(null);
      expect(out.accepted).to.have.length(1);
      expect(await drain(tb.url, 'edges.proton.abort')).to.deep.equal(['normal-after-abort']);
    });
  });

  describe('3. a multi-frame delivery is refused as soon as it passes max-message-size', function () {
    it('frames with more=true past 16 KiB: detach amqp:link:message-size-exceeded naming the limit; the session goes on', async function () {
      const tb = b.get();
      const c = await rawSender(tb, 'edges.big', opened);
      const chunk = Buffer.alloc(8000, 0x41);
      const frames = [transfer({ id: 0, more: true, payload: Buffer.concat([Buffer.from([0x00, 0x53, 0x75, 0xb0, 0x7f, 0xff, 0xff, 0xff]), chunk]) })];
      for (let i = 0; i < 200; i++) frames.push(transfer({ id: null, more: true, payload: chunk })); // 1.6 MB that never ends
      c.write(...frames);
      const d = await expectFrame(c, 'detach', 'amqp:link:message-size-exceeded');
      expect(String(d.error?.description)).to.include(String(LIMITS.maxMessageSize));
      c.write(F.detach(0, true));
      // The session's delivery ids stay in step: a new link sends delivery 1.
      const flows = count(c, 'flow');
      c.write(senderAttach('edge-sender-2', 'edges.big', 1));
      expect(await c.waitFor((x) => count(x, 'flow') > flows, 3000), 'credit for the new link').to.equal(true);
      c.write(transfer({ handle: 1, id: 1, payload: message('small') }));
      expect(await c.waitFor((x) => accepted(x, 1), 3000), `got ${JSON.stringify(names(c))}`).to.equal(true);
      expect(c.find('end') ?? c.find('close')).to.equal(undefined);
      expect(await drain(tb.url, 'edges.big')).to.deep.equal(['small']);
    });

    it('a complete message over the limit in two frames is still rejected with amqp:resource-limit-exceeded', async function () {
      const tb = b.get();
      const c = await rawSender(tb, 'edges.big2', opened);
      const body = F.amqpValueMessage('y'.repeat(20000));
      c.write(transfer({ id: 0, more: true, payload: body.subarray(0, 10000) }), transfer({ id: null, more: false, payload: body.subarray(10000) }));
      expect(await c.waitFor((x) => count(x, 'disposition') >= 1, 3000)).to.equal(true);
      const f = c.find('disposition')!;
      expect((f.fields[4] as any)?.descriptor, 'rejected').to.equal(0x25);
      expect(JSON.stringify(f.fields[4])).to.include('amqp:resource-limit-exceeded');
      expect(c.find('detach')).to.equal(undefined);
    });
  });

  describe('4. a transfer on a link where the client is the receiver', function () {
    it('detaches that link with amqp:not-allowed and a plain explanation; the session goes on', async function () {
      const tb = b.get();
      const c = await RawClient.connect(tb.port); opened.push(c);
      await c.handshake();
      c.write(receiverAttach('rx', 'edges.rx'));
      await expectFrame(c, 'attach');
      c.write(transfer({ id: 0, payload: message('wrong-direction') }));
      const d = await expectFrame(c, 'detach', 'amqp:not-allowed');
      expect(String(d.error?.description)).to.match(/receiver/);
      c.write(F.detach(0, true));
      const flows = count(c, 'flow');
      c.write(senderAttach('tx', 'edges.rx', 1));
      expect(await c.waitFor((x) => count(x, 'flow') > flows, 3000), 'credit for the new link').to.equal(true);
      c.write(transfer({ handle: 1, id: 1, payload: message('right-direction') }));
      expect(await c.waitFor((x) => accepted(x, 1), 3000), `got ${JSON.stringify(names(c))}`).to.equal(true);
      expect(await drain(tb.url, 'edges.rx')).to.deep.equal(['right-direction']);
    });
  });

  describe('5. rules broken with valid frames end the right endpoint', function () {
    it('transfers beyond the session incoming window: end amqp:session:window-violation; the connection stays', async function () {
      const tb = b.get();
      const c = await rawSender(tb, 'edges.window', opened);
      const frames = [transfer({ id: 0, more: true, payload: Buffer.from([0x00, 0x53, 0x77, 0xa1]) })];
      for (let i = 0; i < 2100; i++) frames.push(transfer({ id: null, more: true })); // one frame each; the window is 2048
      c.write(...frames);
      await expectFrame(c, 'end', 'amqp:session:window-violation');
      c.write(F.end(0), F.begin(1), senderAttach('after-window', 'edges.window', 0, 1));
      await c.waitFor((x) => count(x, 'flow') >= 2, 3000);
      c.write(transfer({ id: 0, channel: 1, payload: message('next-session') }));
      expect(await c.waitFor((x) => accepted(x, 0) && x.frames.some((f) => f.name === 'disposition' && f.channel === 1), 3000), `got ${JSON.stringify(names(c))}`).to.equal(true);
      expect(c.find('close')).to.equal(undefined);
    });

    it('a new delivery without link credit: detach amqp:link:transfer-limit-exceeded (no console noise)', async function () {
      const tb = b.get();
      const c = await rawSender(tb, 'edges.greedy', opened);
      // credit 10, topped up while at most 4 windows wait for storage: 100 at once overrun it.
      c.write(...Array.from({ length: 100 }, (_, id) => transfer({ id, settled: true, payload: message('g' + id) })));
      await expectFrame(c, 'detach', 'amqp:link:transfer-limit-exceeded');
      expect(c.find('end') ?? c.find('close')).to.equal(undefined);
    });

    it('a transfer after the client detached the link: end amqp:session:unattached-handle', async function () {
      const tb = b.get();
      const c = await rawSender(tb, 'edges.late', opened);
      c.write(F.detach(0, true), transfer({ id: 0, payload: message('too-late') }));
      await expectFrame(c, 'end', 'amqp:session:unattached-handle');
      expect(c.find('close')).to.equal(undefined);
      expect(await drain(tb.url, 'edges.late')).to.deep.equal([]);
    });

    it('a second attach with a name in use (same role): only that attach is refused, with amqp:invalid-field', async function () {
      const tb = b.get();
      const c = await RawClient.connect(tb.port); opened.push(c);
      await c.handshake();
      c.write(senderAttach('same', 'edges.n1', 0), senderAttach('same', 'edges.n2', 1));
      const d = await expectFrame(c, 'detach', 'amqp:invalid-field');
      expect(String(d.error?.description)).to.include('same');
      const replies = c.frames.filter((f) => f.name === 'attach');
      expect(replies, 'both attaches answered').to.have.length(2);
      expect(replies[1].fields[6], 'the refused attach has a null target').to.equal(null);
      c.write(transfer({ id: 0, payload: message('first-link-works') }));
      expect(await c.waitFor((x) => accepted(x, 0), 3000), `got ${JSON.stringify(names(c))}`).to.equal(true);
      expect(c.find('end') ?? c.find('close')).to.equal(undefined);
      expect(await drain(tb.url, 'edges.n1')).to.deep.equal(['first-link-works']);
    });

    it('a second attach on a handle in use: end amqp:session:handle-in-use', async function () {
      const tb = b.get();
      const c = await RawClient.connect(tb.port); opened.push(c);
      await c.handshake();
      c.write(senderAttach('h1', 'edges.h', 0), senderAttach('h2', 'edges.h', 0));
      await expectFrame(c, 'end', 'amqp:session:handle-in-use');
      expect(c.find('close')).to.equal(undefined);
    });

    it('delivery ids wrap at 2^32 (0xfffffffe, 0xffffffff, 0, 1): all four stored once and settled', async function () {
      const tb = b.get();
      const c = await rawSender(tb, 'edges.wrap', opened);
      const ids = [0xfffffffe, 0xffffffff, 0, 1];
      c.write(...ids.map((id, i) => transfer({ id, payload: message('w' + i) })));
      expect(await c.waitFor((x) => ids.every((id) => accepted(x, id)), 3000), `got ${JSON.stringify(dispositions(c))} ${JSON.stringify(names(c))}`).to.equal(true);
      expect(await drain(tb.url, 'edges.wrap')).to.deep.equal(['w0', 'w1', 'w2', 'w3']);
    });

    it('transfer ids wrap at 2^32 (begin next-outgoing-id 0xfffffffb) within the window', async function () {
      const tb = b.get();
      const c = await RawClient.connect(tb.port); opened.push(c);
      c.write(F.AMQP_HEADER, F.open(), F.begin(0, { nextOutgoingId: t.uint(0xfffffffb) }), senderAttach('tw', 'edges.tw'));
      expect(await c.waitFor((x) => !!x.find('flow'), 3000)).to.equal(true);
      c.write(...Array.from({ length: 10 }, (_, id) => transfer({ id, payload: message('t' + id) })));
      expect(await c.waitFor((x) => Array.from({ length: 10 }, (_, id) => id).every((id) => accepted(x, id)), 3000), `got ${JSON.stringify(names(c))}`).to.equal(true);
      expect(await drain(tb.url, 'edges.tw')).to.have.length(10);
    });

  });

  describe('6. values nested too deeply', function () {
    it('an attach with node properties of 3000 nested lists: close amqp:decode-error "nested too deeply", no internal error', async function () {
      const tb = b.get();
      const c = await RawClient.connect(tb.port); opened.push(c);
      await c.handshake();
      // attach (hand-encoded: rhea's encoder recurses) with target {address, capabilities create-on-demand, dynamic-node-properties {qpid.max_count: [[[...]]]}}
      const u8 = (...x: number[]) => Buffer.from(x);
      const u32 = (n: number) => { const x = Buffer.alloc(4); x.writeUInt32BE(n); return x; };
      const list32 = (items: Buffer[]) => { const body = Buffer.concat(items); return Buffer.concat([u8(0xd0), u32(body.length + 4), u32(items.length), body]); };
      const map32 = (items: Buffer[]) => { const body = Buffer.concat(items); return Buffer.concat([u8(0xd1), u32(body.length + 4), u32(items.length), body]); };
      const str = (s: string) => Buffer.concat([u8(0xa1, s.length), Buffer.from(s)]);
      const sym = (s: string) => Buffer.concat([u8(0xa3, s.length), Buffer.from(s)]);
      const NULL = u8(0x40);
      const target = Buffer.concat([u8(0x00, 0x53, 0x29), list32([str('edges.deep'), NULL, NULL, NULL, NULL, map32([sym('qpid.max_count'), nestedLists(3000)]), sym('create-on-demand')])]);
      const attach = Buffer.concat([u8(0x00, 0x53, 0x12), list32([str('deep'), u8(0x70, 0, 0, 0, 0), u8(0x42), NULL, NULL, Buffer.concat([u8(0x00, 0x53, 0x28), list32([NULL])]), target, NULL, NULL, u8(0x70, 0, 0, 0, 0)])]);
      c.write(F.frame(attach));
      const f = await expectFrame(c, 'close', 'amqp:decode-error');
      expect(String(f.error?.description)).to.include('nested too deeply');
    });

    it('a message body nested 200 deep is still accepted (the limit is 256)', async function () {
      const tb = b.get();
      const c = await rawSender(tb, 'edges.nested', opened);
      c.write(transfer({ id: 0, payload: Buffer.concat([Buffer.from([0x00, 0x53, 0x77]), nestedLists(200)]) }));
      expect(await c.waitFor((x) => accepted(x, 0), 3000), `got ${JSON.stringify(names(c))}`).to.equal(true);
    });
  });

  describe('8. a flow and a disposition read together', function () {
    it('a release that arrives with the credit for the next message (Proton writes the flow first) is redelivered first', async function () {
      const tb = b.get();
      await publish(tb.url, 'edges.fifo', ['m0', 'm1']);
      const c = await rawReceiver(tb, 'edges.fifo', opened, 'fifo', 1);
      expect(await c.waitFor((x) => count(x, 'transfer') >= 1, 3000)).to.equal(true);
      const released = F.amqp(Code.disposition, [t.bool(true), t.uint(0), t.uint(0), t.bool(true), t.described(0x26, [])]);
      c.write(F.flow({ handle: t.uint(0), linkCredit: t.uint(1), deliveryCount: t.uint(1), nextIncomingId: t.uint(1) }), released);
      expect(await c.waitFor((x) => count(x, 'transfer') >= 2, 3000)).to.equal(true);
      const second = c.frames.filter((f) => f.name === 'transfer')[1];
      expect(second.payload?.includes(Buffer.from('m0')), 'the released m0 comes back before m1').to.equal(true);
    });
  });

  describe('9. a flow with echo=true is answered with our flow state [AMQP 2.7.4]', function () {
    // flow fields: 4 handle, 5 delivery-count, 6 link-credit, 8 drain, 9 echo
    const flows = (c: RawClient) => c.frames.filter((f) => f.name === 'flow');
    it('on a link where the broker sends: its delivery-count and the credit left, drain not set', async function () {
      const tb = b.get();
      await publish(tb.url, 'edges.echo', ['e0', 'e1', 'e2']);
      const c = await rawReceiver(tb, 'edges.echo', opened, 'echo-r', 2);
      expect(await c.waitFor((x) => count(x, 'transfer') >= 2, 3000)).to.equal(true);
      await sleep(200);
      expect(flows(c).filter((f) => f.fields[4] === 0), 'no link flow before the echo').to.deep.equal([]);
      // credit 3 from delivery-count 2: one message left to send, so one credit stays unused
      c.write(F.flow({ handle: t.uint(0), linkCredit: t.uint(3), deliveryCount: t.uint(2), nextIncomingId: t.uint(2), echo: t.bool(true) }));
      expect(await c.waitFor((x) => count(x, 'transfer') >= 3 && x.frames.some((f) => f.name === 'flow' && f.fields[4] === 0), 3000), `got ${JSON.stringify(names(c))}`).to.equal(true);
      const answer = flows(c).find((f) => f.fields[4] === 0)!;
      expect(answer.fields[5], 'delivery-count').to.be.oneOf([2, 3]);
      expect((answer.fields[5] as number) + (answer.fields[6] as number), 'delivery-count + link-credit').to.equal(5);
      expect(answer.fields[8] ?? false, 'drain').to.equal(false);
      expect(answer.fields[9] ?? false, 'echo (never asked back)').to.equal(false);
    });
    it('on a link where the broker receives: the credit it granted', async function () {
      const tb = b.get();
      const c = await rawSender(tb, 'edges.echo2', opened, 'echo-s');
      const granted = flows(c).find((f) => f.fields[4] === 0)!;
      const before = flows(c).length;
      c.write(F.flow({ handle: t.uint(0), deliveryCount: t.uint(0), linkCredit: t.uint(0), nextIncomingId: t.uint(0), echo: t.bool(true) }));
      expect(await c.waitFor((x) => x.frames.filter((f) => f.name === 'flow').length > before, 3000), `got ${JSON.stringify(names(c))}`).to.equal(true);
      const answer = flows(c)[before];
      expect(answer.fields[4], 'handle').to.equal(0);
      expect([answer.fields[5] ?? 0, answer.fields[6]], '[delivery-count, link-credit]').to.deep.equal([granted.fields[5] ?? 0, granted.fields[6]]);
    });
    it('without a handle: the session\'s flow state', async function () {
      const tb = b.get();
      const c = await RawClient.connect(tb.port); opened.push(c);
      await c.handshake();
      c.write(F.flow({ nextIncomingId: t.uint(0), echo: t.bool(true) }));
      expect(await c.waitFor((x) => !!x.find('flow'), 3000), `got ${JSON.stringify(names(c))}`).to.equal(true);
      const answer = c.find('flow')!;
      expect(answer.fields[4] ?? null, 'no handle').to.equal(null);
      expect(answer.fields[1], 'incoming-window').to.be.a('number');
    });
  });

  describe('10. a drain that finds no credit left is answered with drain set [AMQP 2.6.7]', function () {
    const linkFlows = (c: RawClient) => c.frames.filter((f) => f.name === 'flow' && f.fields[4] === 0);
    for (const kind of ['plain', 'sow'] as const) for (const crossing of [false, true]) {
      it(`${kind} queue, ${crossing ? 'the drain crossing the transfers that used its credit' : 'drain with credit 0'}: one flow, drain=true, delivery-count unchanged`, async function () {
        const tb = b.get();
        const q = `edges.drain0.${kind}.${crossing}`;
        const pc = await connect(tb.url);
        try {
          const s = await openSender(pc, kind === 'sow' ? { address: q, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } } : { address: q });
          const msg = (i: number) => ({ body: JSON.stringify({ id: `k${i}` }), content_type: 'application/json' });
          await sendAll(s, [msg(0)]);
          const c = await rawReceiver(tb, q, opened, 'd0', 2);
          await sleep(100);
          await sendAll(s, [msg(1), msg(2), msg(3)]);
          expect(await c.waitFor((x) => count(x, 'transfer') >= 2, 3000), `got ${JSON.stringify(names(c))}`).to.equal(true);
          c.write(F.flow({ handle: t.uint(0), linkCredit: t.uint(crossing ? 2 : 0), deliveryCount: t.uint(crossing ? 0 : 2), nextIncomingId: t.uint(2), drain: t.bool(true) }));
          expect(await c.waitFor((x) => linkFlows(x).length > 0, 3000), `no answer to the drain; got ${JSON.stringify(names(c))}`).to.equal(true);
          await sleep(200);
          const answers = linkFlows(c);
          expect(answers.map((f) => [f.fields[5], f.fields[6], f.fields[8]]), '[delivery-count, link-credit, drain]').to.deep.equal([[2, 0, true]]);
          expect(count(c, 'transfer'), 'nothing sent past the credit').to.equal(2);
        } finally { await pc.close(); }
      });
    }
  });

  describe('11. a drain whose credit the deliveries use up is answered (rhea receiver_drained)', function () {
    for (const [kind, command] of [['plain', undefined], ['sow', undefined], ['sow', 'sow'], ['sow', 'sow_and_subscribe'], ['sow', 'subscribe']] as const) {
      it(`${kind} queue${command ? `, command ${command}` : ''}: credit 2 and drain with more waiting: 2 messages, then the drain's answer`, async function () {
        const tb = b.get();
        const q = `edges.drainfull.${kind}.${command ?? 'none'}`;
        const c = await connect(tb.url);
        try {
          const s = await openSender(c, kind === 'sow' ? { address: q, capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } } : { address: q });
          await sendAll(s, Array.from({ length: 5 }, (_, i) => ({ body: JSON.stringify({ id: `k${i}` }), content_type: 'application/json' })));
          const src: any = { address: q };
          if (command) src.filter = tmFilters(command === 'subscribe' ? { command, bookmark: '0' } : { command });
          const rcv = await openReceiver(c, src);
          let data = 0;
          rcv.on('message', (ctx: any) => { const cmd = ctx.message.message_annotations?.['x-opt-tm-cmd']; if (cmd !== 'group_begin' && cmd !== 'group_end' && cmd !== 'completed') data++; });
          const drained = new Promise<boolean>((res) => { rcv.once('receiver_drained', () => res(true)); setTimeout(() => res(false), 3000); });
          rcv.add_credit(2);
          rcv.drain_credit();
          expect(await drained, 'receiver_drained').to.equal(true);
          expect(rcv.credit, 'credit left').to.equal(0);
          // with markers first (group_begin), fewer than 2 data messages fit in the credit
          expect(data).to.be.at.most(2);
        } finally { await c.close(); }
      });
    }
  });

  describe('7. heartbeats: the peer\'s idle-time-out', function () {
    it('1 ms is refused at open with amqp:not-allowed, naming the 200 ms minimum, and draws no heartbeat storm', async function () {
      const c = await RawClient.connect(b.get().port); opened.push(c);
      c.write(F.AMQP_HEADER, F.open({ idleTimeOut: t.uint(1) }));
      const f = await expectFrame(c, 'close', 'amqp:not-allowed');
      expect(String(f.error?.description)).to.include('200 ms');
      await sleep(300);
      expect(count(c, 'empty'), 'heartbeats sent').to.be.below(5);
    });

    it('0xffffffff (beyond a timer) sends no heartbeat storm and keeps the connection', async function () {
      const c = await RawClient.connect(b.get().port); opened.push(c);
      c.write(F.AMQP_HEADER, F.open({ idleTimeOut: t.uint(0xffffffff) }));
      await expectFrame(c, 'open');
      await sleep(300);
      expect(count(c, 'empty'), 'heartbeats in 300 ms').to.be.below(5);
      expect(c.find('close')).to.equal(undefined);
    });

    it('200 ms (the minimum) is accepted', async function () {
      const c = await RawClient.connect(b.get().port); opened.push(c);
      c.write(F.AMQP_HEADER, F.open({ idleTimeOut: t.uint(200) }));
      await expectFrame(c, 'open');
      for (let i = 0; i < 3; i++) { await sleep(100); c.write(F.heartbeat()); }
      expect(c.find('close')).to.equal(undefined);
      expect(count(c, 'empty'), 'heartbeats at most every 100 ms').to.be.at.most(5);
    });
  });

  it('links refused at attach whose detach the client never answers are not counted once its socket goes (session 21 audit)', async function () {
    const tb = b.get();
    const before = tb.broker.stats.links;
    const c = await RawClient.connect(tb.port); opened.push(c);
    await c.handshake();
    // 17 receivers on one session (maxLinksPerSession 16: the last is refused), and one on a reserved name
    for (let h = 0; h < 17; h++) c.write(receiverAttach(`many-${h}`, 'edges.many', h));
    c.write(receiverAttach('reserved', '$nosuch', 17));
    expect(await c.waitFor((x) => x.frames.filter((f) => f.name === 'detach').length >= 2, 3000), 'two refusals').to.equal(true);
    expect(tb.broker.stats.links - before).to.equal(18);
    c.destroy(); // no detach answered
    for (let i = 0; i < 100 && tb.broker.stats.links !== before; i++) await sleep(20);
    expect(tb.broker.stats.links, 'the links gauge back where it was').to.equal(before);
  });
});

describe('protocol edges: flow control with the default credit (docs/robustness.md 1b)', function () {
  this.timeout(120000);
  const LIMIT = 256 * 1024;
  const b = useBroker({ limits: { maxPendingBytesPerConnection: LIMIT } });

  it('a rhea client publishing 3000 pre-settled messages on one session is not stalled by the window', async function () {
    const tb = b.get();
    const conn = await connect(tb.url);
    try {
      const s = await openSender(conn, { address: 'edges.presettled' }, { snd_settle_mode: 1 });
      let sent = 0;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 10000);
        const pump = () => { while (sent < 3000 && s.sendable()) s.send({ body: sent++ }); if (sent >= 3000) { clearTimeout(timer); resolve(); } };
        s.on('sendable', pump);
        pump();
      });
      expect(sent, 'rhea never got the window back after 2048 pre-settled transfers').to.equal(3000);
      // Wait until the last one left the client's session.
      for (let i = 0; i < 1000 && s.session.outgoing.next_pending_delivery < s.session.outgoing.next_delivery_id; i++) await sleep(20);
      expect(s.session.outgoing.next_delivery_id - s.session.outgoing.next_pending_delivery, 'transfers the client could not write').to.equal(0);
    } finally { await conn.close(); }
    expect((await drain(tb.url, 'edges.presettled', 1500)).length).to.equal(3000);
    await publishAndConsume(tb.url);
  });

  it('item 8: a consumer that stops reading: the broker holds at most about maxPendingBytesPerConnection for it, and sends the rest once it reads again', async function () {
    const tb = b.get();
    const N = 6000;
    const pad = 'x'.repeat(4000);
    await publish(tb.url, 'edges.nonreading', Array.from({ length: N }, (_, i) => `${i} ${pad}`));
    // Watch what the broker's side of the connection holds unwritten.
    const proto = net.Socket.prototype as any;
    const write = proto.write;
    let held = 0;
    proto.write = function (this: net.Socket, ...args: unknown[]) {
      const r = write.apply(this, args);
      if (this.localPort === tb.port) held = Math.max(held, this.writableLength);
      return r;
    };
    const c = await RawClient.connect(tb.port);
    try {
      c.write(F.AMQP_HEADER, F.open({ maxFrameSize: t.uint(1 << 20) }), F.begin(0, { incomingWindow: t.uint(0x7fffffff) }));
      await c.waitFor((x) => !!x.find('begin'), 3000);
      c.write(receiverAttach('nonreading', 'edges.nonreading', 0, { settled: true }));
      await expectFrame(c, 'attach');
      c.socket.pause(); // stop reading
      c.write(F.flow({ handle: t.uint(0), linkCredit: t.uint(0xffffffff), deliveryCount: t.uint(0), incomingWindow: t.uint(0x7fffffff), nextIncomingId: t.uint(0) }));
      // Until the broker stops writing (bounded).
      let last = -1;
      for (let i = 0; i < 50 && held !== last; i++) { last = held; await sleep(200); }
      expect(held, `the broker buffered ${held} bytes for a client that does not read`).to.be.at.most(LIMIT + 128 * 1024);
      // Other clients are served meanwhile.
      await publishAndConsume(tb.url);
      c.socket.resume();
      expect(await c.waitFor((x) => count(x, 'transfer') >= N, 60000), `got ${count(c, 'transfer')} of ${N}`).to.equal(true);
    } finally {
      proto.write = write;
      c.destroy();
    }
    await publishAndConsume(tb.url);
  });
});
