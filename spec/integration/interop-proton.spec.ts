import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { runProton, protonAvailable } from '../support/proton.js';
import { send, receive } from '../support/client.js';

// Acceptance F: Python Qpid Proton clients against Tidemark, unchanged (interop).
describe('interop: Python Qpid Proton', function () {
  this.timeout(60000);
  const b = useBroker();
  before(function () { if (!protonAvailable()) throw new Error('python3-qpid-proton is missing: apt-get install -y python3-qpid-proton'); });
  const addr = (q: string) => `${b.get().url}/${q}`;

  it('simple_send.py then simple_recv.py move 20 messages through a queue', async function () {
    const s = await runProton('simple_send.py', ['-a', addr('px.simple'), '-m', '20']);
    expect(s.code, s.stderr).to.equal(0);
    const r = await runProton('simple_recv.py', ['-a', addr('px.simple'), '-m', '20']);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stdout.trim().split('\n').filter((l) => l.includes('sequence'))).to.have.length(20);
    expect(await receive(b.get().url, 'px.simple', { idleMs: 300 })).to.have.length(0);
  });

  it('queue_browser.py browses without consuming', async function () {
    await send(b.get().url, 'px.browse', [{ body: 'one' }, { body: 'two' }]);
    const r = await runProton('queue_browser.py', ['-a', addr('px.browse')]);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stdout).to.contain('one');
    expect(r.stdout).to.contain('two');
    expect(await receive(b.get().url, 'px.browse', { count: 2 })).to.have.length(2);
  });

  it('helloworld.py sends and receives on one connection (sender and receiver share a link name)', async function () {
    const r = await runProton('helloworld.py', ['-a', addr('px.hello')]);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stdout).to.contain('Hello World!');
  });

  it('client.py / server.py request-response through a dynamic reply queue', async function () {
    const server = runProton('server.py', ['-a', addr('px.requests'), '-m', '4']);
    await new Promise((res) => setTimeout(res, 700));
    const c = await runProton('client.py', ['-a', addr('px.requests')]);
    const s = await server;
    expect(c.code, c.stderr).to.equal(0);
    expect(s.code, s.stderr).to.equal(0);
    expect(c.stdout).to.contain('TWAS BRILLIG');
  });

  it('selected_recv.py with colour_send.py gets only the green messages (JMS selector)', async function () {
    const s = await runProton('colour_send.py', ['-a', addr('px.colours'), '-m', '10']);
    expect(s.code, s.stderr).to.equal(0);
    const r = await runProton('selected_recv.py', ['-a', addr('px.colours'), '-m', '5']);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stdout.trim().split('\n').filter((l) => l.length > 0).length).to.be.at.least(5);
    const rest = await receive(b.get().url, 'px.colours', { idleMs: 300 });
    expect(rest.every((m) => m.message.application_properties.colour === 'red')).to.equal(true);
    expect(rest).to.have.length(5);
  });
});

describe('interop: Proton on a browse-only queue (QPID-4241)', function () {
  this.timeout(60000);
  const b = useBroker();
  it('a move receiver is answered with copy and removes nothing: every run reads all N', async function () {
    const url = b.get().url;
    await send(url, { address: 'px.bo', capabilities: ['create-on-demand'], dynamic_node_properties: { 'qpid.browse-only': 1 } }, Array.from({ length: 6 }, (_, i) => ({ body: `m${i}` })));
    for (let run = 0; run < 2; run++) {
      const r = await runProton('simple_recv.py', ['-a', `${url}/px.bo`, '-m', '6']);
      expect(r.code, r.stderr).to.equal(0);
      expect(r.stdout.trim().split('\n').filter((l) => /m\d/.test(l))).to.have.length(6);
    }
    expect(b.get().broker.queueInfo(b.get().broker.nodes.get('px.bo')!).depth).to.equal(6);
    // the attach reply says copy
    const { connect, openReceiver } = await import('../support/client.js');
    const c = await connect(url);
    try {
      const rcv = await openReceiver(c, { address: 'px.bo', distribution_mode: 'move' });
      expect(String(rcv.remote.attach.source.distribution_mode)).to.equal('copy');
    } finally { await c.close(); }
  });
});

describe('interop: Proton sow_and_subscribe under fire (acceptance B2)', function () {
  this.timeout(60000);
  const b = useBroker();
  it('snapshot + live equals the final state; live SCNs above group_end, none twice', async function () {
    const url = b.get().url;
    const K = 20;
    const q = { address: 'px.sow', capabilities: ['create-on-demand'], dynamic_node_properties: { 'sow.key': '/id' } };
    await send(url, q, Array.from({ length: K }, (_, i) => ({ body: JSON.stringify({ id: `k${i}`, n: 0 }) })));
    const { connect, openSender, sendAll } = await import('../support/client.js');
    const c = await connect(url);
    const s = await openSender(c, { address: 'px.sow' });
    let stop = false;
    const counters = new Array(K).fill(0);
    const publisher = (async () => {
      for (let round = 0; round < 100 && !stop; round++) {
        await sendAll(s, Array.from({ length: K }, (_, i) => ({ body: JSON.stringify({ id: `k${i}`, n: ++counters[i] }) })));
      }
    })();
    await new Promise((res) => setTimeout(res, 150));
    const sub = runProton('sow_subscribe.py', ['-a', `${url}/px.sow`, '-t', '4']);
    await new Promise((res) => setTimeout(res, 800));
    stop = true;
    await publisher;
    await c.close();
    const r = await sub;
    expect(r.code, r.stderr).to.equal(0);
    const msgs = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
    const end = msgs.findIndex((m) => m.cmd === 'group_end');
    expect(end).to.be.greaterThan(0);
    expect(msgs[0].cmd).to.equal('group_begin');
    const S = msgs[end].scn;
    const live = msgs.slice(end + 1).filter((m) => m.cmd === 'publish').map((m) => m.scn);
    expect(live.every((x: number) => x > S)).to.equal(true);
    expect(new Set(live).size).to.equal(live.length);
    const state = new Map<string, number>();
    for (const m of msgs) if (m.cmd === 'sow' || m.cmd === 'publish') state.set(m.key, JSON.parse(m.body).n);
    expect(Object.fromEntries(state)).to.deep.equal(Object.fromEntries(counters.map((n, i) => [`k${i}`, n])));
  });
});
