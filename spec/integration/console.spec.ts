/**
 * The web console in a real browser: Debian's Chromium (/usr/bin/chromium) driven by
 * playwright-core against a broker with known data (a SOW queue with history, written at
 * fixed instants of a manual clock, and a plain queue). Checks the numbers shown, the SOW
 * browser (filter, paging), a historical query from the point-in-time picker, a key's
 * timeline, and the live tail; saves screenshots under spec/artifacts/.
 * Without Chromium the suite fails with the install command (it never passes silently).
 */
import { expect } from 'chai';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startTestBroker, ROOT, type TestBroker } from '../support/broker.js';
import { send, connect, openReceiver, collect } from '../support/client.js';
import { ManualClock } from '../../lib/index.js';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const ARTIFACTS = path.join(ROOT, 'spec/artifacts');
const T0 = Date.UTC(2026, 0, 1, 9, 0, 0);
const MIN = 60_000;

const sowQueue = { address: 'prices', capabilities: ['create-on-demand', 'queue'], dynamic_node_properties: { 'sow.key': '/id', 'sow.history.window': '1h' } };
const rec = (o: Record<string, unknown>) => ({ body: JSON.stringify(o) });

/**
 * prices (SOW, 1h history):
 *   09:00 IBM 100 (SCN 1), MSFT 200 (2), AAPL 150 (3)
 *   09:10 IBM 101 (4), MSFT 210 (5)
 *   09:20 delete AAPL (6)
 *   09:30 IBM 102 (7)
 *   now 09:40 -> current: IBM 102, MSFT 210; 7 history versions (AAPL's tombstone included)
 * orders (plain): 5 messages, 2 consumed and accepted -> depth 3, acknowledged 2.
 */
async function loadKnownData(tb: TestBroker, clock: ManualClock): Promise<void> {
  const ok = (outs: Array<{ state: string }>) => expect(outs.map((o) => o.state)).to.deep.equal(outs.map(() => 'accepted'));
  clock.set(T0);
  ok(await send(tb.url, sowQueue, [rec({ id: 'IBM', px: 100 }), rec({ id: 'MSFT', px: 200 }), rec({ id: 'AAPL', px: 150 })]));
  clock.set(T0 + 10 * MIN);
  ok(await send(tb.url, 'prices', [rec({ id: 'IBM', px: 101 }), rec({ id: 'MSFT', px: 210 })]));
  clock.set(T0 + 20 * MIN);
  ok(await send(tb.url, 'prices', [{ message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id: 'AAPL' }) }]));
  clock.set(T0 + 30 * MIN);
  ok(await send(tb.url, 'prices', [rec({ id: 'IBM', px: 102 })]));
  ok(await send(tb.url, 'orders', [1, 2, 3, 4, 5].map((n) => ({ body: `order ${n}` }))));
  const c = await connect(tb.url);
  try { expect(await collect(await openReceiver(c, 'orders'), { count: 2, credit: 2 })).to.have.length(2); } finally { await c.close(); }
  clock.set(T0 + 40 * MIN);
}

async function cellText(page: Page, queue: string, col: string): Promise<string> {
  return (await page.locator(`#queues tr[data-queue="${queue}"] td[data-col="${col}"]`).innerText()).trim();
}
async function sowKeys(page: Page): Promise<string[]> {
  return (await page.locator('#sow-records tbody td[data-col="key"]').allInnerTexts()).map((t) => t.trim());
}
async function sowBodies(page: Page): Promise<unknown[]> {
  return (await page.locator('#sow-records tbody td[data-col="body"]').allInnerTexts()).map((t) => JSON.parse(t));
}
/** Runs `action` and waits until the SOW browser finished the query it started; returns the status line. */
async function query(page: Page, action: () => Promise<void>): Promise<string> {
  const before = Number((await page.getAttribute('#sow-status', 'data-done')) ?? 0);
  await action();
  await page.waitForFunction((n) => Number(document.getElementById('sow-status')?.dataset.done ?? 0) > n, before);
  const status = (await page.locator('#sow-status').innerText()).trim();
  expect(await page.locator('#sow-status.error').count(), status).to.equal(0);
  return status;
}

describe('web console in Chromium (issue 10)', function () {
  this.timeout(90_000);
  let tb: TestBroker;
  let browser: Browser;
  let page: Page;
  const clock = new ManualClock(T0);

  before(async function () {
    if (!existsSync(CHROMIUM)) {
      throw new Error(`Chromium not found at ${CHROMIUM}: install it with "apt-get install -y chromium" (.ci/run does this), or set CHROMIUM_PATH`);
    }
    tb = await startTestBroker({ http: { enabled: true, host: '127.0.0.1', port: 0 } }, { clock });
    await loadKnownData(tb, clock);
    browser = await chromium.launch({
      executablePath: CHROMIUM, headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
    page.on('pageerror', (err) => { throw err; });
    mkdirSync(ARTIFACTS, { recursive: true });
  });
  after(async function () {
    await browser?.close();
    await tb?.stop();
  });

  it('shows the queues table with arguments and the known statistics', async function () {
    await page.goto(tb.broker.httpUrl + '/#/');
    await page.locator('#queues tr[data-queue="prices"]').waitFor();
    expect(await cellText(page, 'prices', 'kind')).to.equal('sow');
    expect(await cellText(page, 'prices', 'arguments')).to.contain('sow.key=/id').and.contain('sow.history.window=3600000');
    expect(await cellText(page, 'prices', 'depth')).to.equal('2');
    expect(await cellText(page, 'prices', 'sow_records')).to.equal('2');
    expect(await cellText(page, 'prices', 'history_versions')).to.equal('7');
    expect(await cellText(page, 'prices', 'scn')).to.equal('1–7');
    expect(await cellText(page, 'prices', 'published')).to.equal('7');
    expect(await cellText(page, 'orders', 'kind')).to.equal('list');
    expect(await cellText(page, 'orders', 'depth')).to.equal('3');
    expect(await cellText(page, 'orders', 'published')).to.equal('5');
    expect(await cellText(page, 'orders', 'acknowledged')).to.equal('2');
    expect(await page.locator('[data-overview="queues"]').innerText()).to.equal('2');
    await page.screenshot({ path: path.join(ARTIFACTS, 'console-queues.png'), fullPage: true });
  });

  it('browses the SOW of a queue: records, content filter, paging', async function () {
    await page.locator('#queues tr[data-queue="prices"] a').click();
    await page.locator('#sow-status').waitFor();
    await page.waitForFunction(() => document.getElementById('sow-status')?.dataset.done === '1');
    expect(await page.locator('[data-stat="depth"]').innerText()).to.equal('2');
    expect(await page.locator('[data-stat="history_window"]').innerText()).to.equal('1h');
    expect(await sowKeys(page)).to.deep.equal(['IBM', 'MSFT']);
    expect(await sowBodies(page)).to.deep.equal([{ id: 'IBM', px: 102 }, { id: 'MSFT', px: 210 }]);
    expect(await page.locator('#sow-records tbody tr[data-key="IBM"] td[data-col="scn"]').innerText()).to.equal('7');
    expect(await page.locator('#sow-status').innerText()).to.contain('group_end SCN 7');

    await page.fill('#filter', '/px > 205');
    await query(page, () => page.click('#run'));
    expect(await sowKeys(page)).to.deep.equal(['MSFT']);

    await page.fill('#filter', '');
    await page.fill('#top-n', '1');
    await query(page, () => page.click('#run'));
    expect(await page.locator('#page-info').innerText()).to.equal('records 1–1');
    expect(await sowKeys(page)).to.deep.equal(['IBM']);
    expect(await page.isDisabled('#next')).to.equal(false);
    await query(page, () => page.click('#next'));
    expect(await page.locator('#page-info').innerText()).to.equal('records 2–2');
    expect(await sowKeys(page)).to.deep.equal(['MSFT']);
    expect(await page.isDisabled('#next')).to.equal(true);

    await page.fill('#top-n', '20');
    await page.fill('#order-by', '/px DESC');
    await query(page, () => page.click('#run'));
    expect(await sowKeys(page)).to.deep.equal(['MSFT', 'IBM']);
  });

  it('runs a historical query from the point-in-time picker', async function () {
    await page.fill('#order-by', '');
    await page.fill('#asof-picker', '2026-01-01T09:15:00');
    expect(await page.inputValue('#asof')).to.equal('2026-01-01T09:15:00Z');
    const status = await query(page, () => page.click('#run-asof'));
    expect(await sowKeys(page)).to.deep.equal(['AAPL', 'IBM', 'MSFT']);
    expect(await sowBodies(page)).to.deep.equal([{ id: 'AAPL', px: 150 }, { id: 'IBM', px: 101 }, { id: 'MSFT', px: 210 }]);
    expect((await page.locator('#sow-records tbody td[data-col="scn"]').allInnerTexts()).map((t) => t.trim())).to.deep.equal(['3', '4', '5']);
    expect(status).to.contain('as of 2026-01-01T09:15:00Z').and.contain('SCN 5');
    // Before anything was published: an empty world.
    await page.fill('#asof', '2026-01-01T08:59:00Z');
    expect(await query(page, () => page.click('#run-asof'))).to.match(/^0 records/);
    expect(await sowKeys(page)).to.deep.equal([]);
  });

  it("draws a key's history as a timeline with versions, tombstone and the window boundary", async function () {
    await page.fill('#asof', '2026-01-01T09:15:00Z');
    await query(page, () => page.click('#run-asof'));
    await page.click('#sow-records tbody tr[data-key="IBM"] button');
    await page.waitForFunction(() => document.getElementById('history-key')?.textContent === 'IBM' && !!document.getElementById('timeline-svg'));
    expect(await page.locator('#timeline-svg circle.version').count()).to.equal(3);
    expect(await page.locator('#timeline-svg g.tombstone').count()).to.equal(0);

    await page.click('#sow-records tbody tr[data-key="AAPL"] button');
    await page.waitForFunction(() => document.getElementById('history-key')?.textContent === 'AAPL' && !!document.getElementById('timeline-svg'));
    expect(await page.locator('#timeline-svg circle.version').count()).to.equal(1);
    expect(await page.locator('#timeline-svg g.tombstone').count()).to.equal(1);
    expect(await page.locator('#timeline-svg g.tombstone').getAttribute('data-scn')).to.equal('6');
    expect(await page.locator('#timeline-svg [data-role="window-boundary"]').count()).to.equal(1);
    // The boundary (now - 1h = 08:40) lies left of the first version (09:00).
    const bx = Number(await page.locator('#timeline-svg [data-role="window-boundary"]').getAttribute('x1'));
    const vx = Number(await page.locator('#timeline-svg circle.version').getAttribute('cx'));
    expect(bx).to.be.below(vx);
    expect((await page.locator('#history tbody tr').allInnerTexts()).map((t) => t.split('\t').slice(0, 3).join(' '))).to.deep.equal([
      '3 2026-01-01 09:00:00.000 version', '6 2026-01-01 09:20:00.000 tombstone',
    ]);
  });

  it('follows live events over Server-Sent Events', async function () {
    await page.waitForFunction(() => /Following prices/.test(document.getElementById('tail-status')?.textContent ?? ''));
    clock.set(T0 + 41 * MIN);
    await send(tb.url, 'prices', [rec({ id: 'IBM', px: 103 }), { message_annotations: { 'x-opt-tm-op': 'delete' }, body: JSON.stringify({ id: 'MSFT' }) }]);
    await page.locator('#tail li[data-scn="9"]').waitFor();
    const items = (await page.locator('#tail li').allInnerTexts()).map((t) => t.trim());
    expect(items[1]).to.match(/^publish .*#8 IBM .*"px":103/);
    expect(items[0]).to.match(/^delete .*#9 MSFT/);
    await page.screenshot({ path: path.join(ARTIFACTS, 'console-queue.png'), fullPage: true });
  });

  it('a tail the broker ends says why and stays closed (it reconnected every 3 s, forever)', async function () {
    await send(tb.url, 'ephemeral', [{ body: 'x' }]);
    let streams = 0;
    const count = (req: { url(): string }) => { if (req.url().endsWith('/api/queues/ephemeral/events')) streams++; };
    page.on('request', count);
    try {
      await page.goto(tb.broker.httpUrl + '/#/queue/ephemeral');
      await page.waitForFunction(() => /Following ephemeral/.test(document.getElementById('tail-status')?.textContent ?? ''));
      await tb.broker.nodes.delete('ephemeral');
      await page.waitForFunction(() => /Stream ended: queue ephemeral was deleted \(amqp:resource-deleted\)/.test(document.getElementById('tail-status')?.textContent ?? ''));
      await page.waitForTimeout(4000); // past the stream's `retry: 3000`
      expect(streams, 'requests for the stream').to.equal(1);
      expect(await page.locator('#tail-status').innerText()).to.match(/^Stream ended: queue ephemeral was deleted/);
    } finally { page.off('request', count); }
  });
});
