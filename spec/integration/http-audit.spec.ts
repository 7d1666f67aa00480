/**
 * Review of the HTTP API and console (docs/robustness.md section 14, "HTTP API and console").
 * Each block reproduces one finding against a real in-process broker with its HTTP listener;
 * the console's are driven in Debian's Chromium (as console.spec.ts).
 *   1. /events: a client that stops reading no longer makes the broker buffer without bound
 *   2. the console's AMQP connection dropping ends open tails and fails queries at once
 *   3. /sow and /history pages are bounded by bytes as well as by count
 *   4. console: switching page while one loads does not mix pages; a malformed hash is shown
 *   5. queues named "." and ".." are reachable (API and console)
 *   6. auth.anonymous "loopback": content only to HTTP clients on loopback
 *   7. AMQP listener on one non-loopback address: the console still reads content
 */
import { expect } from 'chai';
import { existsSync } from 'node:fs';
import http, { ServerResponse } from 'node:http';
import net from 'node:net';
import { networkInterfaces } from 'node:os';
import { chromium, type Browser } from 'playwright-core';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { send, connect, openSender, sendAll, sleep } from '../support/client.js';
import { TAIL_BYTES } from '../../lib/ext/http/self-client.js';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const HTTP = { enabled: true, host: '127.0.0.1', port: 0 };
const sowQueue = (address: string, props: Record<string, unknown> = {}) => ({ address, capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'sow.key': '/id', ...props } });
const accepted = (outs: Array<{ state: string }>) => expect(outs.map((o) => o.state)).to.deep.equal(outs.map(() => 'accepted'));

/** A non-loopback IPv4 address of this machine, if it has one. */
function localIPv4(): string | undefined {
  return Object.values(networkInterfaces()).flat().find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
}

/** A GET with the path sent as is (fetch and browsers resolve "." segments first); optional local address. */
function rawGet(base: string, path: string, opts: { host?: string; localAddress?: string } = {}): Promise<{ status: number; body: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: opts.host ?? u.hostname, port: Number(u.port), path, method: 'GET', localAddress: opts.localAddress, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Sends large messages in batches of 10. */
async function sendBig(url: string, target: any, bodies: string[]): Promise<void> {
  const c = await connect(url);
  try {
    const s = await openSender(c, target);
    for (let i = 0; i < bodies.length; i += 10) accepted(await sendAll(s, bodies.slice(i, i + 10).map((body) => ({ body }))));
  } finally { await c.close(); }
}

/** Opens /events on a raw socket that does not read until `resume`; collects what it reads then. */
async function stalledStream(httpUrl: string, queue: string): Promise<{ socket: net.Socket; text: () => string; closed: Promise<void> }> {
  const u = new URL(httpUrl);
  const socket = net.connect({ port: Number(u.port), host: u.hostname });
  socket.on('error', () => { /* destroyed by the server */ });
  await new Promise((r) => socket.once('connect', r));
  let text = '';
  const closed = new Promise<void>((r) => socket.once('close', () => r()));
  socket.write(`GET /api/queues/${queue}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
  socket.on('data', (d) => { text += d.toString('latin1'); });
  socket.pause();
  return { socket, text: () => text, closed };
}

/** Bytes queued, not yet handed to the socket, in the HTTP responses written while `fn` runs. */
async function watchResponses<T>(fn: (queued: () => number) => Promise<T>): Promise<T> {
  const live = new Set<ServerResponse>();
  const orig = ServerResponse.prototype.write;
  (ServerResponse.prototype as any).write = function (this: ServerResponse, ...a: any[]) { live.add(this); return (orig as any).apply(this, a); };
  try {
    return await fn(() => [...live].filter((r) => !r.destroyed).reduce((n, r) => n + r.writableLength, 0));
  } finally { ServerResponse.prototype.write = orig; }
}

describe('HTTP API and console review (docs/robustness.md 14)', function () {
  this.timeout(120_000);

  describe('1. /events flow control', function () {
    let tb: TestBroker;
    before(async () => { tb = await startTestBroker({ http: HTTP }); accepted(await send(tb.url, sowQueue('feed'), [{ body: JSON.stringify({ id: 'k0' }) }])); });
    after(async () => { await tb?.stop(); });

    it('a client that stops reading holds a bounded window, not every event', async function () {
      const pad = 'x'.repeat(8000);
      await watchResponses(async (queued) => {
        const s = await stalledStream(tb.broker.httpUrl!, 'feed');
        try {
          await sleep(300);
          for (let round = 0; round < 3; round++) {
            accepted(await send(tb.url, 'feed', Array.from({ length: 1000 }, (_, i) => ({ body: JSON.stringify({ id: 'k' + (i % 50), pad }) }))));
          }
          await sleep(500);
          const mb = queued() / 1048576;
          // Before: every event, ~24 MB for 3000 x 8 KB. After: about TAIL_CREDIT events.
          expect(mb, `${mb.toFixed(1)} MB queued for a stalled /events client`).to.be.below(2);
        } finally { s.socket.destroy(); }
      });
    });

    it('a reading client still gets every event (credit is granted again on drain)', async function () {
      const ac = new AbortController();
      const res = await fetch(tb.broker.httpUrl + '/api/queues/feed/events', { signal: ac.signal });
      expect(res.status).to.equal(200);
      const reader = res.body!.getReader();
      const dec = new TextDecoder();
      let text = '';
      const N = 2000;
      const pad = 'y'.repeat(8000);
      let n = 0;
      const count = () => n;
      // Counted chunk by chunk (a regex over the whole text each time was quadratic).
      const reading = (async () => {
        let carry = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return;
          const chunk = carry + dec.decode(value, { stream: true });
          const parts = chunk.split('"cmd":"publish"');
          n += parts.length - 1;
          carry = parts.at(-1)!.slice(-20);
          if (chunk.includes('event: end')) text += chunk;
          if (n >= N) return;
        }
      })();
      try {
        await sleep(200);
        for (let i = 0; i < N; i += 500) accepted(await send(tb.url, 'feed', Array.from({ length: 500 }, (_, j) => ({ body: JSON.stringify({ id: 'r' + (i + j), pad }) }))));
        await Promise.race([reading, sleep(30_000)]);
        expect(count()).to.equal(N);
        expect(text).not.to.contain('event: end');
      } finally { ac.abort(); await reading.catch(() => {}); }
    });

    it('a client that falls behind large events is held at about TAIL_BYTES, not ended, and gets every event when it reads again (session 24)', async function () {
      // Credit by count alone let 50 events of 1 MB through to a reader that paused: past the
      // 16 MiB cap, a client a little slower than the publisher was ended as not reading.
      const big = 'w'.repeat(1_000_000);
      await watchResponses(async (queued) => {
        const s = await stalledStream(tb.broker.httpUrl!, 'feed');
        try {
          await sleep(300);
          await sendBig(tb.url, 'feed', Array.from({ length: 45 }, (_, i) => JSON.stringify({ id: 'p' + i, big })));
          await sleep(1000);
          const mb = queued() / 1048576;
          expect(mb, `${mb.toFixed(1)} MB queued for a paused /events client`).to.be.below(TAIL_BYTES / 1048576 + 2.5);
          s.socket.resume();
          const deadline = Date.now() + 30_000;
          const count = () => (s.text().match(/"key":"p\d+"/g) ?? []).length;
          while (count() < 45 && Date.now() < deadline) await sleep(100);
          expect(count(), 'events read once the client reads again').to.equal(45);
          expect(s.text()).not.to.contain('event: end');
        } finally { s.socket.destroy(); }
      });
    });

    it('a stalled client is still ended past MAX_STREAM_BUFFER when credit granted for small events brings large ones ("client not reading")', async function () {
      const big = 'z'.repeat(2_000_000);
      const s = await stalledStream(tb.broker.httpUrl!, 'feed');
      try {
        await sleep(300);
        // Small events first: the tail's credit grows to TAIL_CREDIT.
        accepted(await send(tb.url, 'feed', Array.from({ length: 200 }, (_, i) => ({ body: JSON.stringify({ id: 's' + i }) }))));
        await sleep(300);
        await sendBig(tb.url, 'feed', Array.from({ length: 30 }, (_, i) => JSON.stringify({ id: 'b' + i, big })));
        await sleep(1000);
        s.socket.resume();
        const closed = await Promise.race([s.closed.then(() => true), sleep(15_000).then(() => false)]);
        const end = /event: end\ndata: (.*)\n/.exec(s.text());
        expect(closed, 'the stream was closed').to.equal(true);
        expect(end, 'an end event').to.not.equal(null);
        const data = JSON.parse(end![1]);
        expect(data.error).to.equal('unavailable');
        expect(data.description).to.match(/client not reading/);
      } finally { s.socket.destroy(); }
      // Not counted against the 100 streams any more: a new one opens.
      const ac = new AbortController();
      const again = await fetch(tb.broker.httpUrl + '/api/queues/feed/events', { signal: ac.signal });
      expect(again.status).to.equal(200);
      ac.abort();
    });
  });

  describe('2. the console connection dropping', function () {
    let tb: TestBroker;
    // A small max-frame-size: an attach with a long filter makes the broker close the console's connection.
    before(async () => { tb = await startTestBroker({ http: HTTP, limits: { maxFrameSize: 512 } }); accepted(await send(tb.url, sowQueue('feed'), [{ body: JSON.stringify({ id: 'k0' }) }])); });
    after(async () => { await tb?.stop(); });

    it('ends open tails with an end event and fails the pending query at once, naming the disconnect', async function () {
      const http = tb.broker.httpUrl!;
      const ac = new AbortController();
      const ev = await fetch(http + '/api/queues/feed/events', { signal: ac.signal });
      expect(ev.status).to.equal(200);
      const reader = ev.body!.getReader();
      let text = '';
      let eof = false;
      const reading = (async () => { try { for (;;) { const { value, done } = await reader.read(); if (done) { eof = true; return; } text += new TextDecoder().decode(value); } } catch { /* aborted */ } })();
      try {
        await sleep(300);
        const t = performance.now();
        const big = await fetch(http + '/api/queues/feed/sow?filter=' + encodeURIComponent(`/id = '${'a'.repeat(800)}'`));
        const ms = performance.now() - t;
        const body = await big.json();
        expect(big.status).to.equal(503);
        expect(body.description).to.match(/connection to the broker was lost/);
        expect(ms, 'answered at once, not after the 15 s time-out').to.be.below(5000);
        await Promise.race([reading, sleep(3000)]);
        expect(text).to.match(/event: end\ndata: \{"error":"unavailable","description":"the console's AMQP connection to the broker was lost/);
        expect(eof, 'the stream was closed').to.equal(true);
        // The next request opens a new connection.
        const again = await fetch(http + '/api/queues/feed/sow');
        expect(again.status).to.equal(200);
        expect((await again.json()).records).to.have.length(1);
      } finally { ac.abort(); await reading; }
    });
  });

  describe('3. byte-bounded pages', function () {
    let tb: TestBroker;
    const big = 'p'.repeat(1_000_000);
    before(async () => {
      tb = await startTestBroker({ http: HTTP });
      await sendBig(tb.url, sowQueue('big'), Array.from({ length: 12 }, (_, i) => JSON.stringify({ id: 'k' + String(i).padStart(2, '0'), big })));
      await sendBig(tb.url, sowQueue('hist', { 'sow.history.window': '1h' }), Array.from({ length: 12 }, (_, i) => JSON.stringify({ id: 'one', v: i, big })));
    });
    after(async () => { await tb?.stop(); });

    it('/sow stops a page at 8 MiB of records (truncated, more) and the next page continues after it', async function () {
      const r = await fetch(tb.broker.httpUrl + '/api/queues/big/sow?top_n=1000');
      expect(r.status).to.equal(200);
      const text = await r.text();
      const p = JSON.parse(text);
      expect(text.length).to.be.below(8.5 * 1048576);
      expect(p.truncated).to.equal(true);
      expect(p.more).to.equal(true);
      expect(p.records.length).to.be.within(1, 11);
      const r2 = await (await fetch(tb.broker.httpUrl + `/api/queues/big/sow?top_n=1000&skip_n=${p.records.length}`)).json();
      expect(r2.truncated).to.equal(false);
      expect(r2.more).to.equal(false);
      expect([...p.records, ...r2.records].map((x: any) => x.key)).to.deep.equal(Array.from({ length: 12 }, (_, i) => 'k' + String(i).padStart(2, '0')));
    });

    it('/history keeps the newest versions within 8 MiB (truncated)', async function () {
      const r = await fetch(tb.broker.httpUrl + '/api/queues/hist/history?key=one&limit=10000');
      expect(r.status).to.equal(200);
      const text = await r.text();
      const h = JSON.parse(text);
      expect(text.length).to.be.below(8.5 * 1048576);
      expect(h.truncated).to.equal(true);
      expect(h.versions.length).to.be.within(1, 11);
      expect(h.versions.at(-1).body.v).to.equal(11);
      const vs = h.versions.map((v: any) => v.body.v);
      expect(vs).to.deep.equal([...vs].sort((a: number, b: number) => a - b));
    });
  });

  describe('4-5. console navigation, malformed hash, and the queues "." and ".."', function () {
    let tb: TestBroker;
    let browser: Browser;
    before(async function () {
      if (!existsSync(CHROMIUM)) throw new Error(`Chromium not found at ${CHROMIUM}: apt-get install -y chromium, or set CHROMIUM_PATH`);
      tb = await startTestBroker({ http: HTTP });
      accepted(await send(tb.url, sowQueue('prices'), [{ body: JSON.stringify({ id: 'IBM', px: 1 }) }]));
      accepted(await send(tb.url, 'orders', [{ body: 'o1' }]));
      for (const n of ['.', '..']) accepted(await send(tb.url, sowQueue(n), [{ body: JSON.stringify({ id: 'in' + n, n }) }]));
      browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking'] });
    });
    after(async () => { await browser?.close(); await tb?.stop(); });

    it('4. a page left while it loads adds nothing to the next one', async function () {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      try {
        // A slow broker: the one-queue request of "prices" takes 700 ms.
        await page.route(/\/api\/queues\/prices$/, async (route) => { await sleep(700); await route.continue(); });
        await page.goto(tb.broker.httpUrl + '/#/');
        await page.waitForSelector('#queues');
        await page.evaluate(() => { location.hash = '#/queue/prices'; });
        await page.waitForTimeout(100);
        await page.evaluate(() => { location.hash = '#/queue/orders'; });
        await page.waitForTimeout(2000);
        expect(await page.locator('#app h1').allInnerTexts()).to.deep.equal(['Queues / orders']);
        expect(await page.locator('#app h2').allInnerTexts()).to.deep.equal(['Statistics', 'Live events']);
        expect(await page.locator('#tail-status').count()).to.equal(1);
        expect(errors).to.deep.equal([]);
      } finally { await page.close(); }
    });

    it('4. a malformed hash shows an error instead of throwing', async function () {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      try {
        await page.goto(tb.broker.httpUrl + '/#/');
        await page.waitForSelector('#queues');
        await page.evaluate(() => { location.hash = '#/queue/%E0%A4%A'; });
        await page.waitForSelector('#route-error', { timeout: 5000 });
        expect(await page.locator('#route-error').innerText()).to.match(/Malformed queue name/);
        expect(errors).to.deep.equal([]);
      } finally { await page.close(); }
    });

    it('5. the API reaches "." and ".." by the raw path and by ?name=', async function () {
      const base = tb.broker.httpUrl!;
      const one = await rawGet(base, '/api/queues/.');
      expect(one.status).to.equal(200);
      expect(JSON.parse(one.body).name).to.equal('.');
      for (const [path, key] of [['/api/queues/./sow', 'in.'], ['/api/queues/../sow', 'in..'], ['/api/queues/%2E%2E/sow', 'in..'], ['/api/queue/sow?name=.', 'in.'], ['/api/queue/sow?name=..', 'in..']]) {
        const r = await rawGet(base, path);
        expect(r.status, path + ' ' + r.body).to.equal(200);
        expect(JSON.parse(r.body).records.map((x: any) => x.key), path).to.deep.equal([key]);
      }
      const hist = await rawGet(base, '/api/queue/history?name=..&key=in..');
      expect(hist.status, hist.body).to.equal(200);
      expect((await rawGet(base, '/api/queues/%E0%A4%A')).status).to.equal(400);
      expect((await rawGet(base, '/api/queue/sow')).status).to.equal(400);
      // An absolute-form target (RFC 7230 5.3.2, as proxies send) is the same request (a review
      // of this fix found the raw path made it 404).
      const host = new URL(base).host;
      const abs = await rawGet(base, `http://${host}/api/queues/./sow`);
      expect(abs.status, abs.body).to.equal(200);
      expect(JSON.parse(abs.body).records.map((x: any) => x.key)).to.deep.equal(['in.']);
      expect((await rawGet(base, `http://${host}/api/queues`)).status).to.equal(200);
    });

    it('5. the console page of "." works', async function () {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      try {
        await page.goto(tb.broker.httpUrl + '/#/queue/.');
        await page.waitForFunction(() => document.getElementById('sow-status')?.dataset.done === '1', null, { timeout: 10_000 });
        expect(await page.locator('#app h1').allInnerTexts()).to.deep.equal(['Queues / .']);
        expect(await page.locator('[data-stat="kind"]').innerText()).to.equal('sow');
        expect(await page.locator('#sow-records tbody td[data-col="key"]').allInnerTexts()).to.deep.equal(['in.']);
        await page.waitForFunction(() => /Following \./.test(document.getElementById('tail-status')?.textContent ?? ''), null, { timeout: 10_000 });
        expect(errors).to.deep.equal([]);
      } finally { await page.close(); }
    });
  });

  describe('6. auth.anonymous "loopback": content only to loopback HTTP clients', function () {
    const ip = localIPv4();
    let tb: TestBroker;
    before(async function () {
      if (!ip) { this.skip(); return; } // needs a non-loopback IPv4 address on this machine to connect from
      tb = await startTestBroker({ http: { enabled: true, host: '0.0.0.0', port: 0 }, auth: { anonymous: 'loopback', users: {} } });
      accepted(await send(tb.url, sowQueue('feed', { 'sow.history.window': '1h' }), [{ body: JSON.stringify({ id: 'k0' }) }]));
    });
    after(async () => { await tb?.stop(); });

    it(`answers 403 to a request from ${ip ?? '(no non-loopback IPv4: skipped)'} for sow, history and events; statistics still served`, async function () {
      const base = tb.broker.httpUrl!;
      for (const path of ['/api/queues/feed/sow', '/api/queues/feed/history?key=k0', '/api/queues/feed/events']) {
        const r = await rawGet(base, path, { host: ip, localAddress: ip });
        expect(r.status, path + ' ' + r.body).to.equal(403);
        expect(JSON.parse(r.body).description).to.match(/only to clients on loopback/);
      }
      expect((await rawGet(base, '/api/queues/feed', { host: ip, localAddress: ip })).status).to.equal(200);
      const local = await rawGet(base, '/api/queues/feed/sow', { host: '127.0.0.1' });
      expect(local.status).to.equal(200);
      expect(JSON.parse(local.body).records).to.have.length(1);
    });
  });

  describe('7. AMQP listener on one non-loopback address', function () {
    const ip = localIPv4();
    let tb: TestBroker;
    before(async function () {
      if (!ip) { this.skip(); return; } // needs a non-loopback IPv4 address to bind to
      tb = await startTestBroker({ listen: { host: ip, port: 0 }, http: HTTP, auth: { anonymous: 'loopback', users: { pub: { password: 'pub-secret' } } } });
      // From that address ANONYMOUS is refused: the test publishes as a configured user.
      const c = await connect(tb.url, { username: 'pub', password: 'pub-secret' });
      try { accepted(await sendAll(await openSender(c, sowQueue('feed', { 'sow.history.window': '1h' })), [{ body: JSON.stringify({ id: 'k0', v: 1 }) }])); } finally { await c.close(); }
    });
    after(async () => { await tb?.stop(); });

    it('the console still reads content (its internal login), and the login is no one else\'s', async function () {
      const base = tb.broker.httpUrl!;
      const r = await rawGet(base, '/api/queues/feed/sow');
      expect(r.status, r.body).to.equal(200); // was 503: "could not connect … ANONYMOUS"
      expect(JSON.parse(r.body).records.map((x: any) => x.body)).to.deep.equal([{ id: 'k0', v: 1 }]);
      const ac = new AbortController();
      const ev = await fetch(base + '/api/queues/feed/events', { signal: ac.signal });
      expect(ev.status).to.equal(200);
      ac.abort();
      // A guessed password for the console's user name is refused.
      let refused = false;
      try { const c = await connect(tb.url, { username: 'anonymous', password: 'guess' }); await c.close(); } catch { refused = true; }
      expect(refused, 'PLAIN anonymous/guess refused').to.equal(true);
    });
  });
});
