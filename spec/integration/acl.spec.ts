/**
 * Per-user queue ACLs (lib/ext/acl, docs/security.md): create, publish, consume, browse and
 * manage on queue-name patterns, users, `*` and `@group`; the first matching rule decides;
 * browse-only by ACL (QPID-4241's other approach); denials are amqp:unauthorized-access
 * (null terminus + detach, rejected relay message, management 403).
 */
import { expect } from 'chai';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connect, openSender, sendAll, openReceiver, collect, isNullTerminus, type Conn } from '../support/client.js';

const ALL = ['create', 'publish', 'consume', 'browse', 'manage'];
const users = Object.fromEntries(['admin', 'writer', 'reader', 'consumer', 'opsy', 'eve', 'peek'].map((u) => [u, { password: `${u}-pw` }]));
const acl = {
  default: 'deny',
  groups: { ops: ['opsy'] },
  rules: [
    { user: 'admin', queue: '*', allow: ALL },
    { user: 'writer', queue: 'orders.*', allow: ['create', 'publish'] },
    { user: 'reader', queue: 'orders.*', allow: ['browse'] },
    { user: 'consumer', queue: 'orders.?', allow: ['consume'] },
    { user: '@ops', queue: 'orders.*', allow: ['manage', 'browse'] },
    // first match decides: eve is denied on public.secret even though the next rule allows everyone
    { user: 'eve', queue: 'public.secret', allow: [] },
    { user: '*', queue: 'public.*', allow: ['create', 'publish', 'consume'] },
    { user: 'peek', queue: '*', allow: ['browse', 'publish'] },
  ],
};

describe('ACL (per-user queue rights)', function () {
  let tb: TestBroker;
  const conns: Conn[] = [];
  const as = async (user: string) => { const c = await connect(tb.url, { username: user, password: `${user}-pw` }); conns.push(c); return c; };
  before(async () => { tb = await startTestBroker({ auth: { anonymous: false, users }, acl }); });
  after(async () => { for (const c of conns) await c.close(); await tb?.stop(); });

  async function publish(user: string, address: string, bodies: unknown[], caps = true): Promise<string[]> {
    const c = await as(user);
    const s = await openSender(c, caps ? { address, capabilities: ['queue', 'create-on-demand'] } : { address });
    return (await sendAll(s, bodies.map((body) => ({ body })))).map((o) => o.state);
  }
  async function refusal(p: Promise<unknown>): Promise<{ condition?: string; nullTerminus: boolean }> {
    try { await p; } catch (e: any) {
      const link = e.link;
      const t = link?.remote?.attach?.source !== undefined && link.is_receiver?.() ? link.remote.attach.source : link?.remote?.attach?.target;
      return { condition: e.condition, nullTerminus: isNullTerminus(t) };
    }
    throw new Error('attach was not refused');
  }

  it('create + publish: the writer creates orders.* on demand and publishes; elsewhere it is refused', async function () {
    expect(await publish('writer', 'orders.new', [1, 2, 3])).to.deep.equal(['accepted', 'accepted', 'accepted']);
    const c = await as('writer');
    const r = await refusal(openSender(c, { address: 'private.q', capabilities: ['queue', 'create-on-demand'] }));
    expect(r).to.deep.equal({ condition: 'amqp:unauthorized-access', nullTerminus: true });
    expect(tb.broker.nodes.get('private.q'), 'a refused attach creates nothing').to.equal(undefined);
  });

  it('create is its own right: publish without create cannot make a queue', async function () {
    const c = await as('reader');
    const r = await refusal(openReceiver(c, { address: 'orders.fresh', capabilities: ['queue', 'create-on-demand'] }));
    expect(r.condition).to.equal('amqp:unauthorized-access');
    expect(tb.broker.nodes.get('orders.fresh')).to.equal(undefined);
  });

  it('consume: refused to a user without consume or browse; allowed by a ? pattern, which removes messages', async function () {
    const w = await as('writer');
    expect((await refusal(openReceiver(w, { address: 'orders.new' }))).condition).to.equal('amqp:unauthorized-access');
    expect(await publish('writer', 'orders.a', ['x', 'y'])).to.deep.equal(['accepted', 'accepted']);
    const c = await as('consumer');
    const rcv = await openReceiver(c, { address: 'orders.a' });
    expect(String(rcv.remote.attach.source.distribution_mode ?? 'move')).to.equal('move');
    expect((await collect(rcv, { count: 2 })).map((m) => m.message.body)).to.deep.equal(['x', 'y']);
    await new Promise((res) => setTimeout(res, 100));
    expect(tb.broker.nodes.get('orders.a')!.structure.stats().depth).to.equal(0);
    // `?` is one character: orders.ab does not match the consumer's rule
    expect(await publish('writer', 'orders.ab', ['z'])).to.deep.equal(['accepted']);
    expect((await refusal(openReceiver(c, { address: 'orders.ab' }))).condition).to.equal('amqp:unauthorized-access');
  });

  it('browse-only by ACL: a reader attaching with move is answered with copy and removes nothing', async function () {
    expect(await publish('writer', 'orders.events', ['e1', 'e2', 'e3'])).to.deep.equal(['accepted', 'accepted', 'accepted']);
    for (let round = 0; round < 2; round++) {
      const c = await as('reader');
      const rcv = await openReceiver(c, { address: 'orders.events' }); // default distribution mode: move
      expect(String(rcv.remote.attach.source.distribution_mode)).to.equal('copy');
      const got = await collect(rcv, { count: 3 }); // accepts each one
      expect(got.map((m) => m.message.body)).to.deep.equal(['e1', 'e2', 'e3']);
    }
    await new Promise((res) => setTimeout(res, 100));
    expect(tb.broker.nodes.get('orders.events')!.structure.stats().depth).to.equal(3);
    // an explicit copy is fine too, and the reader may not publish
    const c = await as('reader');
    const rcv = await openReceiver(c, { address: 'orders.events', distribution_mode: 'copy' });
    expect((await collect(rcv, { count: 3 })).length).to.equal(3);
    expect((await refusal(openSender(c, { address: 'orders.events' }))).condition).to.equal('amqp:unauthorized-access');
  });

  it('a temporary queue is read only by its creator\'s links; others (browse on "*") are refused, and may send to it', async function () {
    const owner = await as('admin');
    const mine = await openReceiver(owner, { dynamic: true });
    const tmp = String(mine.remote.attach.source.address);
    expect(tmp).to.match(/^tmp\./);
    const s = await openSender(owner, { address: tmp });
    expect((await sendAll(s, [{ body: 'r1' }, { body: 'r2' }])).map((o) => o.state)).to.deep.equal(['accepted', 'accepted']);
    const peek = await as('peek');
    const denied = await refusal(openReceiver(peek, { address: tmp }));
    expect(denied).to.deep.equal({ condition: 'amqp:unauthorized-access', nullTerminus: true });
    const ps = await openSender(peek, { address: tmp });
    expect((await sendAll(ps, [{ body: 'reply' }]))[0].state).to.equal('accepted');
    expect((await collect(mine, { count: 3 })).map((m) => m.message.body)).to.deep.equal(['r1', 'r2', 'reply']);
  });

  it('a user no rule names may send a reply to another user\'s temporary queue (attach or relay), and its owner reads it by name (session 21 audit)', async function () {
    const owner = await as('reader'); // rules name reader for orders.* only
    const mine = await openReceiver(owner, { dynamic: true });
    const tmp = String(mine.remote.attach.source.address);
    const w = await as('writer'); // rules name writer for orders.* only
    const ws = await openSender(w, { address: tmp });
    expect((await sendAll(ws, [{ body: 'reply 1' }]))[0].state).to.equal('accepted');
    const relay = await openSender(w, { address: null });
    expect((await sendAll(relay, [{ to: tmp, body: 'reply 2' }]))[0].state).to.equal('accepted');
    expect((await collect(mine, { count: 2 })).map((m) => m.message.body)).to.deep.equal(['reply 1', 'reply 2']);
    const again = await openReceiver(owner, { address: tmp }); // the owner's second link, by name
    expect(again.remote.attach.source.address).to.equal(tmp);
    const denied = await refusal(openReceiver(w, { address: tmp }));
    expect(denied.condition).to.equal('amqp:unauthorized-access');
  });

  it('"*" rules, and the first matching rule decides (no fall-through)', async function () {
    expect(await publish('eve', 'public.board', ['hi'])).to.deep.equal(['accepted']);
    const e = await as('eve');
    const rcv = await openReceiver(e, { address: 'public.board' });
    expect((await collect(rcv, { count: 1 })).map((m) => m.message.body)).to.deep.equal(['hi']);
    expect((await refusal(openSender(e, { address: 'public.secret', capabilities: ['queue', 'create-on-demand'] }))).condition).to.equal('amqp:unauthorized-access');
    expect(await publish('writer', 'public.secret', ['ok'])).to.deep.equal(['accepted']);
  });

  it('anonymous relay: each message is checked, a denied one is rejected with unauthorized-access', async function () {
    const c = await as('writer');
    const s = await openSender(c, { address: null });
    const out = await sendAll(s, [{ to: 'orders.relay', body: 1 }, { to: 'private.relay', body: 2 }, { to: 'orders.relay', body: 3 }]);
    expect(out.map((o) => o.state)).to.deep.equal(['accepted', 'rejected', 'accepted']);
    expect(out[1].condition).to.equal('amqp:unauthorized-access');
    expect(out[1].description).to.match(/writer.*private\.relay/);
    expect(tb.broker.nodes.get('private.relay')).to.equal(undefined);
  });

  describe('$management', function () {
    async function mgmt(user: string, operation: string, name?: string, body: unknown = {}): Promise<{ status: number; description: string; body: any }> {
      const c = await as(user);
      const rcv = await openReceiver(c, { dynamic: true });
      const replyTo = rcv.remote.attach.source.address;
      const s = await openSender(c, { address: '$management' });
      const reply = collect(rcv, { count: 1, idleMs: 3000 });
      await sendAll(s, [{ message_id: `${operation}-${Math.random()}`, reply_to: replyTo, application_properties: { operation, type: 'queue', ...(name ? { name } : {}) }, body }]);
      const [m] = await reply;
      return { status: m.message.application_properties.statusCode, description: m.message.application_properties.statusDescription, body: m.message.body };
    }

    it('DELETE, PURGE and CREATE need manage (403 otherwise); a @group grants it', async function () {
      await publish('writer', 'orders.m', [1, 2]);
      const denied = await mgmt('writer', 'PURGE', 'orders.m');
      expect(denied.status).to.equal(403);
      expect(denied.description).to.match(/unauthorized-access.*manage/);
      expect((await mgmt('reader', 'DELETE', 'orders.m', { force: true })).status).to.equal(403);
      expect((await mgmt('writer', 'CREATE', 'orders.z')).status).to.equal(403);
      const purged = await mgmt('opsy', 'PURGE', 'orders.m');
      expect(purged.status).to.equal(200);
      expect(purged.body).to.deep.equal({ count: 2 });
      expect((await mgmt('opsy', 'CREATE', 'orders.z')).status, 'CREATE needs create as well as manage').to.equal(403);
      expect((await mgmt('admin', 'CREATE', 'orders.z')).status).to.equal(201);
      expect((await mgmt('opsy', 'DELETE', 'orders.z')).status).to.equal(204);
    });

    it('READ needs browse or manage; QUERY lists only what the user may see', async function () {
      expect((await mgmt('reader', 'READ', 'orders.events')).status).to.equal(200);
      expect((await mgmt('writer', 'READ', 'orders.events')).status).to.equal(403);
      expect(await publish('admin', 'admin.only', ['secret'])).to.deep.equal(['accepted']);
      const q = await mgmt('reader', 'QUERY');
      const names: string[] = q.body.map((x: any) => x.name);
      // orders.* by the browse rule, public.* because consume (everyone's) implies browse
      expect(names).to.include.members(['orders.events', 'public.board']);
      expect(names).to.not.include('admin.only');
      const all: string[] = (await mgmt('admin', 'QUERY')).body.map((x: any) => x.name);
      expect(all).to.include.members(['admin.only', 'orders.events', 'public.board']);
    });
  });
});

describe('ACL: identities and configuration', function () {
  it('an ANONYMOUS connection is user "anonymous", whatever trace name it sends', async function () {
    const tb = await startTestBroker({
      auth: { anonymous: true, users: {} },
      acl: { default: 'deny', rules: [{ user: 'admin', queue: '*', allow: ALL }, { user: 'anonymous', queue: 'anon.*', allow: ['create', 'publish'] }] },
    });
    try {
      const c = await connect(tb.url, { username: 'admin' }); // ANONYMOUS with trace text "admin"
      try {
        let cond: string | undefined;
        try { await openSender(c, { address: 'admin.q', capabilities: ['queue', 'create-on-demand'] }); } catch (e: any) { cond = e.condition; }
        expect(cond).to.equal('amqp:unauthorized-access');
        const s = await openSender(c, { address: 'anon.q', capabilities: ['queue', 'create-on-demand'] });
        expect((await sendAll(s, [{ body: 1 }])).map((o) => o.state)).to.deep.equal(['accepted']);
      } finally { await c.close(); }
    } finally { await tb.stop(); }
  });

  it('the default config has no rules and allows everything', async function () {
    const tb = await startTestBroker();
    try {
      expect(tb.broker.config.acl).to.deep.equal({ rules: [], default: 'allow' });
      expect(tb.broker.config.extensions).to.include('acl');
      expect(tb.broker.extensions.authorize('anonymous', 'manage', 'anything')).to.equal(true);
    } finally { await tb.stop(); }
  });

  it('bad ACL config is refused naming the key; rules without the acl extension refuse to start', async function () {
    const fails = async (o: Record<string, unknown>) => { try { await startTestBroker(o); } catch (e) { return (e as Error).message; } throw new Error('started'); };
    expect(await fails({ acl: { rules: [{ user: 'a', queue: '*', allow: ['eat'] }], default: 'allow' } })).to.match(/config\.acl\.rules\[0\]\.allow: unknown action "eat"/);
    expect(await fails({ acl: { rules: [], default: 'maybe' } })).to.match(/config\.acl\.default/);
    expect(await fails({ acl: { rules: [{ user: '@nobody', queue: '*', allow: [] }], default: 'allow' } })).to.match(/config\.acl\.rules\[0\]\.user: unknown group @nobody/);
    expect(await fails({ acl: { rules: [], default: 'deny' }, extensions: ['management'] })).to.match(/config\.acl: .*"acl"/);
  });
});
