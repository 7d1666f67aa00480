/**
 * Session 22 audit of the management surfaces ($management, the HTTP API, tidemark-config):
 * each case failed on the code before its fix (docs/robustness.md 13).
 */
import { expect } from 'chai';
import { request as httpRequest } from 'node:http';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, send, openReceiver, r, sleep, type Conn } from '../support/client.js';
import { runTool } from '../support/tools.js';
import { amqpTypes, amqpMessage } from '../../lib/codec/amqp.js';
import { rawBytes } from '../../lib/core/protocol/raw-message.js';

interface Reply { statusCode: number; statusDescription: string; body: any; correlationId: any; bytes?: Buffer }

/** One $management request over `conn`; resolves with the reply (and its bytes as received). */
async function mgmt(conn: Conn, ap: Record<string, unknown>, body: unknown = {}, ids: Record<string, unknown> = { message_id: 'req-1' }): Promise<Reply> {
  const rcv = await openReceiver(conn, { dynamic: true });
  const replyTo = rcv.source.address;
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('no management reply')), 5000);
    rcv.on('message', (ctx: any) => {
      clearTimeout(t);
      const m = ctx.message;
      resolve({ statusCode: Number(m.application_properties.statusCode), statusDescription: String(m.application_properties.statusDescription), body: m.body, correlationId: m.correlation_id, bytes: rawBytes(m) });
      rcv.close();
    });
    rcv.add_credit(1);
    const s = conn.connection.open_sender('$management');
    s.once('sendable', () => s.send({ ...ids, reply_to: replyTo, application_properties: { type: 'queue', ...ap }, body }));
  });
}

/** The reply's correlation-id as encoded: its type name and value, read with rhea's reader (no unwrapping). */
function encodedCorrelationId(bytes: Buffer): { type: string; value: any } {
  const reader = new amqpTypes.Reader(bytes);
  while (reader.remaining() > 0) {
    const section = reader.read();
    if (section.descriptor?.value === 0x73) {
      const v = section.value[5];
      return { type: v.type.name, value: v.value };
    }
  }
  throw new Error('no properties section');
}

function get(url: string, method = 'GET', timeoutMs = 3000): Promise<{ status: number; headers: any; body: string; timedOut: boolean }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      const t = setTimeout(() => { res.destroy(); resolve({ status: res.statusCode!, headers: res.headers, body, timedOut: true }); }, timeoutMs);
      res.on('end', () => { clearTimeout(t); resolve({ status: res.statusCode!, headers: res.headers, body, timedOut: false }); });
    });
    req.setTimeout(timeoutMs, () => { req.destroy(); resolve({ status: 0, headers: {}, body: '', timedOut: true }); });
    req.on('error', (e) => { if ((e as any).code !== 'ECONNRESET') reject(e); });
    req.end();
  });
}

describe('session 22 audit: $management', function () {
  this.timeout(30000);
  let tb: TestBroker;
  before(async () => {
    tb = await startTestBroker({ auth: { anonymous: 'loopback', users: { alice: { password: 'a' }, bob: { password: 'b' } } } });
  });
  after(async () => { await tb?.stop(); });

  describe('the reply correlation-id is the request message-id with its AMQP type', function () {
    const ulongPast53 = Buffer.from('00300000000000a5', 'hex'); // 1.5 * 2^53 + 165: rhea decodes it to these 8 bytes
    const uuid = Buffer.from('0123456789abcdef0123456789abcdef', 'hex');
    const cases: Array<[string, unknown, string, (v: any) => void]> = [
      ['binary of 3 bytes', () => r.types.wrap_binary(Buffer.from('abc')), 'Vbin8', (v) => expect(Buffer.from(v).toString('hex')).to.equal('616263')],
      ['empty binary', () => r.types.wrap_binary(Buffer.alloc(0)), 'Vbin8', (v) => expect(Buffer.from(v).length).to.equal(0)],
      ['ulong past 2^53', () => r.types.wrap_ulong(ulongPast53), 'Ulong', (v) => expect(Buffer.from(v).toString('hex')).to.equal(ulongPast53.toString('hex'))],
      ['small ulong', () => r.types.wrap_ulong(7), 'SmallUlong', (v) => expect(v).to.equal(7)],
      ['uuid', () => r.types.wrap_uuid(uuid), 'Uuid', (v) => expect(Buffer.from(v).toString('hex')).to.equal(uuid.toString('hex'))],
      ['string', () => 'req-7', 'Str8', (v) => expect(v).to.equal('req-7')],
    ];
    for (const [what, id, type, check] of cases) {
      it(`${what} comes back as ${type}, same value`, async () => {
        const c = await connect(tb.url);
        try {
          const res = await mgmt(c, { operation: 'QUERY' }, {}, { message_id: (id as () => unknown)() });
          expect(res.statusCode).to.equal(200);
          const cid = encodedCorrelationId(res.bytes!);
          expect(cid.type).to.equal(type);
          check(cid.value);
        } finally { await c.close(); }
      });
    }

    it('without a message-id, the request correlation-id comes back, typed', async () => {
      const c = await connect(tb.url);
      try {
        const res = await mgmt(c, { operation: 'QUERY' }, {}, { correlation_id: r.types.wrap_binary(Buffer.from('xy')) });
        const cid = encodedCorrelationId(res.bytes!);
        expect([cid.type, Buffer.from(cid.value).toString()]).to.deep.equal(['Vbin8', 'xy']);
      } finally { await c.close(); }
    });

    it('never carries broker memory: 200 replies to empty binary ids while another client publishes', async () => {
      const victim = await connect(tb.url);
      const c = await connect(tb.url);
      try {
        const vs = victim.connection.open_sender('victimq');
        let n = 0;
        vs.on('sendable', () => { while (vs.sendable() && n < 2000) vs.send({ body: 'SECRET-PASSWORD-' + (n++) }); });
        const rcv = await openReceiver(c, { dynamic: true }, { credit_window: 500 });
        const ids: Buffer[] = [];
        const done = new Promise<void>((resolve) => rcv.on('message', (ctx: any) => {
          ids.push(encodedCorrelationId(rawBytes(ctx.message)!).value);
          if (ids.length === 200) resolve();
        }));
        const s = c.connection.open_sender('$management');
        s.once('sendable', () => {
          for (let i = 0; i < 200; i++) s.send({ message_id: r.types.wrap_binary(Buffer.alloc(0)), reply_to: rcv.source.address, application_properties: { operation: 'READ', type: 'queue', name: 'victimq' }, body: {} });
        });
        await done;
        expect(ids.filter((b) => Buffer.from(b).length !== 0).length, 'ids that are not the empty binary sent').to.equal(0);
      } finally { await c.close(); await victim.close(); }
    });
  });

  it("rhea's Writer pads a fixed-width Buffer shorter than its type with zeros, not with what its buffer held", () => {
    const w = new amqpTypes.Writer(Buffer.alloc(64, 0xee));
    w.write(amqpTypes.wrap_uuid(Buffer.from('abc')));
    w.write(amqpTypes.wrap_ulong(Buffer.from([1, 2])));
    const out: Buffer = w.toBuffer();
    expect(out.toString('hex')).to.equal('98' + '616263' + '00'.repeat(13) + '80' + '0102' + '00'.repeat(6));
    // and through message encoding, the path $management replies take
    const bytes: Buffer = amqpMessage.encode({ correlation_id: amqpTypes.wrap_uuid(Buffer.from('abc')) });
    expect(bytes.includes(Buffer.from('616263' + '00'.repeat(13), 'hex'))).to.equal(true);
  });

  describe('DELETE if_empty / if_unused', function () {
    async function deleteWith(name: string, body: unknown, fill = true): Promise<Reply> {
      if (fill) await send(tb.url, name, [{ body: 'one' }]);
      const c = await connect(tb.url);
      try { return await mgmt(c, { operation: 'DELETE', name }, body); } finally { await c.close(); }
    }

    for (const v of ['True', 'yes', 'TRUE', 1, true, 'on']) {
      it(`{if_empty: ${JSON.stringify(v)}} refuses a non-empty queue (409), as durable reads booleans`, async () => {
        const name = `del.ie.${String(v)}`;
        const res = await deleteWith(name, { if_empty: v });
        expect(res.statusCode, res.statusDescription).to.equal(409);
        expect(tb.broker.nodes.get(name)).to.not.equal(undefined);
      });
    }

    it('{if_unused: "yes"} refuses a queue with a consumer (409)', async () => {
      const c = await connect(tb.url);
      try {
        await openReceiver(c, 'del.iu', { credit_window: 0 });
        const res = await deleteWith('del.iu', { if_unused: 'yes' }, false);
        expect(res.statusCode, res.statusDescription).to.equal(409);
        expect(tb.broker.nodes.get('del.iu')).to.not.equal(undefined);
      } finally { await c.close(); }
    });

    it('a value that is not a boolean, a misspelt key or a body that is not a map is 400 naming it, and deletes nothing', async () => {
      for (const [body, named] of [[{ if_empty: 'maybe' }, 'if_empty'], [{ 'if-empty': true }, 'if-empty'], [{ ifEmpty: true }, 'ifEmpty'], [{ if_unused: [1] }, 'if_unused'], [['if_empty'], 'map']] as const) {
        const name = `del.bad.${named}.${Array.isArray(body) ? 'list' : 'map'}`;
        const res = await deleteWith(name, body);
        expect(res.statusCode, `${JSON.stringify(body)}: ${res.statusDescription}`).to.equal(400);
        expect(res.statusDescription).to.contain(named);
        expect(tb.broker.nodes.get(name), JSON.stringify(body)).to.not.equal(undefined);
      }
    });

    it('{if_empty: "false"}, {force: true} and an empty body delete (204)', async () => {
      for (const [i, body] of [{ if_empty: 'false' }, { force: true }, {}].entries()) {
        const res = await deleteWith(`del.ok.${i}`, body);
        expect(res.statusCode, res.statusDescription).to.equal(204);
        expect(tb.broker.nodes.get(`del.ok.${i}`)).to.equal(undefined);
      }
    });
  });

  it("another user's temporary queue is answered as one that does not exist (404): READ, PURGE, DELETE, SOW-DELETE", async () => {
    const alice = await connect(tb.url, { username: 'alice', password: 'a' });
    const bob = await connect(tb.url, { username: 'bob', password: 'b' });
    try {
      const rcv = await openReceiver(alice, { dynamic: true, dynamic_node_properties: { 'sow.key': '/id' } }, { credit_window: 0 });
      const tmp = rcv.source.address as string;
      await send(tb.url, tmp, [{ body: JSON.stringify({ id: 'a', secret: 'private to alice' }) }]);
      const absent = await mgmt(bob, { operation: 'READ', name: 'no.such.queue' });
      for (const [operation, body] of [['READ', {}], ['PURGE', {}], ['DELETE', {}], ['SOW-DELETE', { all: true }]] as const) {
        const res = await mgmt(bob, { operation, name: tmp }, body);
        expect([res.statusCode, res.statusDescription], operation).to.deep.equal([404, `no such queue: ${tmp}`]);
        expect(res.body ?? null, operation).to.equal(null);
      }
      expect(absent.statusCode).to.equal(404);
      expect(tb.broker.queueInfo(tb.broker.nodes.get(tmp)!).depth).to.equal(1);
      // its owner still reads it
      const own = await mgmt(alice, { operation: 'READ', name: tmp });
      expect([own.statusCode, own.body?.depth]).to.deep.equal([200, 1]);
    } finally { await alice.close(); await bob.close(); }
  });
});

describe('session 22 audit: HTTP API', function () {
  this.timeout(40000);
  let tb: TestBroker;
  let http: string;
  before(async () => {
    tb = await startTestBroker({
      http: { enabled: true, host: '127.0.0.1', port: 0 },
      limits: { maxLinksPerSession: 3 },
      acl: { default: 'allow', rules: [{ user: 'anonymous', queue: 'secret*', allow: ['create', 'publish'] }] },
    });
    http = tb.broker.httpUrl!;
    for (const [name, body] of [['plainq', {}], ['sowq', { 'sow.key': '/id', 'sow.history.window': '1h' }]] as const) {
      const c = await connect(tb.url);
      try { expect((await mgmt(c, { operation: 'CREATE', name }, body)).statusCode).to.equal(201); } finally { await c.close(); }
    }
    // anonymous may not read secret* (the ACL above): declared directly
    tb.broker.nodes.declare('secretq', { durable: false, arguments: { 'sow.key': '/id', 'sow.history.window': '1h' } });
  });
  after(async () => { await tb?.stop(); });

  it('"not a SOW queue" is 404 amqp:not-found on /history, as on /sow', async () => {
    const sow = await get(`${http}/api/queues/plainq/sow`);
    const hist = await get(`${http}/api/queues/plainq/history?key=k`);
    expect([sow.status, JSON.parse(sow.body).error]).to.deep.equal([404, 'amqp:not-found']);
    expect([hist.status, JSON.parse(hist.body).error]).to.deep.equal([404, 'amqp:not-found']);
    expect(JSON.parse(hist.body).description).to.match(/not a SOW queue/);
  });

  it('/events refused by the ACL answers 403 {error, description} as /sow does, with no stream', async () => {
    const sow = await get(`${http}/api/queues/secretq/sow`);
    expect(sow.status).to.equal(403);
    const ev = await get(`${http}/api/queues/secretq/events`, 'GET', 3000);
    expect(ev.timedOut, 'the refusal is a complete answer').to.equal(false);
    expect(ev.status).to.equal(403);
    expect(ev.body).to.not.match(/event: /);
    expect(JSON.parse(ev.body)).to.include({ error: 'amqp:unauthorized-access' });
    expect(JSON.parse(ev.body).description).to.match(/secretq/);
    expect(ev.headers['content-type']).to.match(/^application\/json/);
  });

  it('a refusal for lack of links (resource-limit-exceeded) is 503, not an undocumented 502; /events too', async () => {
    // three live tails take the console session's three links (limits.maxLinksPerSession: 3)
    const holders: any[] = [];
    for (let i = 0; i < 3; i++) holders.push(httpRequest(`${http}/api/queues/sowq/events`, (res) => res.resume()).end());
    await sleep(1000);
    try {
      const sow = await get(`${http}/api/queues/sowq/sow`);
      expect(sow.status, sow.body).to.equal(503);
      expect(JSON.parse(sow.body).error).to.equal('amqp:resource-limit-exceeded');
      const ev = await get(`${http}/api/queues/sowq/events`);
      expect([ev.status, JSON.parse(ev.body).error], ev.body).to.deep.equal([503, 'amqp:resource-limit-exceeded']);
    } finally { for (const h of holders) h.destroy(); await sleep(300); }
  });

  it('top_n=0 is 400 naming top_n (at least 1), as other parameter errors are', async () => {
    await send(tb.url, 'sowq', [{ body: JSON.stringify({ id: 'a' }), content_type: 'application/json' }]);
    const res = await get(`${http}/api/queues/sowq/sow?top_n=0`);
    expect(res.status).to.equal(400);
    expect(JSON.parse(res.body)).to.deep.equal({ error: 'bad-request', description: 'top_n: at least 1, got 0' });
    expect((await get(`${http}/api/queues/sowq/sow?top_n=1`)).status).to.equal(200);
  });

  it('HEAD /events answers with the stream headers only, and holds no link', async () => {
    const linksBefore = tb.broker.stats.links;
    const res = await get(`${http}/api/queues/plainq/events`, 'HEAD', 2000);
    expect(res.timedOut, 'HEAD got no complete answer').to.equal(false);
    expect(res.status).to.equal(200);
    expect(res.headers['content-type']).to.match(/^text\/event-stream/);
    expect(res.body).to.equal('');
    const head403 = await get(`${http}/api/queues/secretq/events`, 'HEAD', 2000);
    expect([head403.status, head403.body]).to.deep.equal([403, '']);
    await sleep(300);
    expect(tb.broker.stats.links).to.equal(linksBefore);
  });

  it('a tail the broker ends says why in its end event: condition and description', async () => {
    tb.broker.nodes.declare('gone.soon', { durable: false, arguments: {} });
    const body = await new Promise<string>((resolve, reject) => {
      const req = httpRequest(`${http}/api/queues/gone.soon/events`, (res) => {
        let text = '';
        res.on('data', (d) => {
          text += d;
          if (/event: ready/.test(text) && !/deleting/.test(text)) { text += '\n(deleting)\n'; void tb.broker.nodes.delete('gone.soon'); }
        });
        res.on('end', () => resolve(text));
      });
      req.on('error', reject);
      req.end();
    });
    const end = /event: end\ndata: (.*)\n/.exec(body);
    expect(end, body).to.not.equal(null);
    expect(JSON.parse(end![1])).to.deep.equal({ error: 'amqp:resource-deleted', description: 'queue gone.soon was deleted' });
  });
});

describe('session 22 audit: HTTP API, default limits', function () {
  this.timeout(40000);
  let tb: TestBroker;
  let http: string;
  before(async () => {
    tb = await startTestBroker({ http: { enabled: true, host: '127.0.0.1', port: 0 } });
    http = tb.broker.httpUrl!;
    await send(tb.url, 'plainq', [{ body: 'x' }]);
  });
  after(async () => { await tb?.stop(); });

  it('the too-many-streams 503 is {error, description} like every other error (the console showed "undefined")', async () => {
    const holders: any[] = [];
    for (let i = 0; i < 100; i++) holders.push(httpRequest(`${http}/api/queues/plainq/events`, (res) => res.resume()).end());
    await sleep(2500);
    try {
      const res = await get(`${http}/api/queues/plainq/events`);
      expect(res.status).to.equal(503);
      const b = JSON.parse(res.body);
      expect(b.error).to.equal('too-many-streams');
      expect(b.description).to.be.a('string').and.match(/100 live event streams/);
      expect(b).to.not.have.property('message');
    } finally { for (const h of holders) h.destroy(); await sleep(500); }
  });
});

describe('session 22 audit: tidemark-config', function () {
  this.timeout(30000);
  let tb: TestBroker;
  before(async () => { tb = await startTestBroker(); });
  after(async () => { await tb?.stop(); });

  it('--max-queue-size past 2^53 is one line naming the flag (a RangeError, or a silent rounding, before)', async () => {
    for (const v of ['9223372036854775807', '9007199254740993']) {
      const res = await runTool('tidemark-config', ['-b', tb.url, 'add', 'queue', 'big', '--max-queue-size', v]);
      expect(res.code).to.equal(1);
      expect(res.stderr).to.equal(`Error: --max-queue-size expects an integer from 0 to 9007199254740991, got '${v}'\n`);
    }
    expect(tb.broker.nodes.get('big')).to.equal(undefined);
    const ok = await runTool('tidemark-config', ['-b', tb.url, 'add', 'queue', 'big', '--max-queue-size', '9007199254740991']);
    expect(ok.code, ok.stderr).to.equal(0);
  });

  it('a bad --limit-policy is one line naming the flag and its values', async () => {
    const res = await runTool('tidemark-config', ['-b', tb.url, 'add', 'queue', 'z', '--limit-policy', 'drop']);
    expect(res.code).to.equal(1);
    expect(res.stderr).to.equal('Error: --limit-policy must be "reject" or "ring", got "drop"\n');
  });

  it('a missing NAME is one line naming it with the command usage (del queue, hash-password)', async () => {
    const del = await runTool('tidemark-config', ['-b', tb.url, 'del', 'queue']);
    expect([del.code, del.stderr]).to.deep.equal([1, 'Error: missing <name>: usage: tidemark-config del <type> <name>\n']);
    const hash = await runTool('tidemark-config', ['hash-password']);
    expect([hash.code, hash.stderr]).to.deep.equal([1, 'Error: missing <password>: usage: tidemark-config hash-password <password>\n']);
  });

  it('spout and drain share it: a missing ADDRESS and a bad --print choice are one line', async () => {
    const drain = await runTool('drain', ['-b', tb.url]);
    expect([drain.code, drain.stderr]).to.deep.equal([1, 'Error: missing ADDRESS: usage: drain [options] ADDRESS\n']);
    const spout = await runTool('spout', ['-b', tb.url]);
    expect([spout.code, spout.stderr]).to.deep.equal([1, 'Error: missing ADDRESS: usage: spout [options] ADDRESS\n']);
    const print = await runTool('drain', ['-b', tb.url, '-p', 'xml', 'q']);
    expect([print.code, print.stderr]).to.deep.equal([1, 'Error: --print must be "text" or "json", got "xml"\n']);
  });
});
