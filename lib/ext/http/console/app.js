// Tidemark console: plain DOM, no build step. Pages (hash routes):
//   #/                         queues table (arguments, statistics)
//   #/queue/NAME[?key=K]       one queue: statistics, SOW record browser (filter, paging,
//                              top_n/order_by), point-in-time query, a key's history
//                              timeline (SVG), and a live tail of events (Server-Sent Events)
// Everything is read from the broker's read-only JSON API under /api/.

const app = document.getElementById('app');
const overviewEl = document.getElementById('overview');
const SVG = 'http://www.w3.org/2000/svg';

/** Builds an element: h('td', {class: 'num', 'data-col': 'depth'}, '12'). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'value') el.value = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== undefined && c !== null && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}
function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

async function api(path) {
  const res = await fetch('/api/' + path, { headers: { accept: 'application/json' } });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.description || `${res.status} ${res.statusText}`);
  return body;
}

const nf = new Intl.NumberFormat('en-US');
const fmt = (n) => (typeof n === 'number' ? nf.format(n) : n ?? '');
function fmtBytes(n) {
  if (typeof n !== 'number') return '';
  if (n < 1024) return `${n} B`;
  const u = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024, i = 0;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(1)} ${u[i]}`;
}
/** UTC, millisecond precision: the broker's bookmarks are UTC too. */
const fmtTime = (ms) => (typeof ms === 'number' ? new Date(ms).toISOString().replace('T', ' ').replace('Z', '') : '');
function fmtDuration(ms) {
  if (ms === null || ms === undefined) return 'none';
  const units = [['d', 86400000], ['h', 3600000], ['m', 60000], ['s', 1000]];
  for (const [u, m] of units) if (ms >= m && ms % m === 0) return `${ms / m}${u}`;
  return `${ms}ms`;
}
const bodyText = (b) => (typeof b === 'string' ? b : JSON.stringify(b));
const enc = encodeURIComponent;
/**
 * The API path of a queue's view (`sub`: '', 'sow', 'history', 'events'), `params` appended.
 * Browsers resolve "." and ".." path segments (and %2e) before sending, so those two names
 * go as ?name= (/api/queue/...).
 */
function queuePath(name, sub = '', params = '') {
  const p = params ? String(params) : '';
  if (name === '.' || name === '..') {
    const q = new URLSearchParams(p);
    q.set('name', name);
    return `queue${sub ? '/' + sub : ''}?${q}`;
  }
  return `queues/${enc(name)}${sub ? '/' + sub : ''}${p ? '?' + p : ''}`;
}

// ---- page lifecycle ----------------------------------------------------------------------

// Each route() starts a generation; a page checks it after every await and stops when the
// user has gone on meanwhile (its late content was appended to the next page, and its
// interval and EventSource were registered as the next page's). `g` is the page's own.
let cleanups = [];
let generation = 0;
const current = (g) => g === generation;
/** Runs `fn` when page `g` is left; at once if it is already gone. */
function onLeave(g, fn) { if (current(g)) cleanups.push(fn); else fn(); }
function every(g, ms, fn) { if (!current(g)) return; const t = setInterval(fn, ms); onLeave(g, () => clearInterval(t)); }

async function refreshOverview() {
  try {
    const o = await api('overview');
    overviewEl.replaceChildren(
      h('span', {}, 'connections ', h('b', { 'data-overview': 'connections' }, fmt(o.connections))),
      h('span', {}, 'links ', h('b', { 'data-overview': 'links' }, fmt(o.links))),
      h('span', {}, 'queues ', h('b', { 'data-overview': 'queues' }, fmt(o.queues))),
      h('span', {}, 'commits ', h('b', {}, fmt(o.commit.batches)), ` (mean ${o.commit.mean_latency_ms.toFixed(2)} ms)`),
      h('span', { class: 'mono' }, o.amqp[0] ?? ''),
    );
  } catch (e) { overviewEl.replaceChildren(h('span', { class: 'error' }, e.message)); }
}

function route() {
  const g = ++generation;
  for (const fn of cleanups) { try { fn(); } catch { /* ignore */ } }
  cleanups = [];
  const hash = location.hash || '#/';
  const m = /^#\/queue\/([^?]+)(?:\?(.*))?$/.exec(hash);
  if (!m) { queuesPage(g); return; }
  let name;
  try { name = decodeURIComponent(m[1]); } catch {
    app.replaceChildren(h('h1', {}, h('a', { href: '#/' }, 'Queues'), ' / ?'),
      h('p', { class: 'error', id: 'route-error' }, `Malformed queue name in the address (bad percent-encoding): ${m[1]}`));
    return;
  }
  queuePage(g, name, new URLSearchParams(m[2] || ''));
}

// ---- queues table ------------------------------------------------------------------------

function argsCell(args) {
  const entries = Object.entries(args || {});
  if (!entries.length) return h('span', { class: 'muted' }, '—');
  return entries.map(([k, v]) => h('code', {}, `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`));
}

async function queuesPage(g) {
  app.replaceChildren(h('h1', {}, 'Queues'), h('section', { class: 'card' }, h('p', { class: 'muted' }, 'Loading…')));
  const card = app.lastChild;
  const draw = async () => {
    let qs;
    try { qs = await api('queues'); } catch (e) { if (current(g)) card.replaceChildren(h('p', { class: 'error' }, e.message)); return; }
    if (!current(g)) return;
    const num = (col, v, title) => h('td', { class: 'num', 'data-col': col, title }, v);
    const rows = qs.map((q) => h('tr', { 'data-queue': q.name },
      h('td', { 'data-col': 'name' }, h('a', { href: `#/queue/${enc(q.name)}` }, q.name)),
      h('td', { 'data-col': 'kind' }, q.kind),
      h('td', { 'data-col': 'durable' }, q.durable ? 'yes' : 'no'),
      h('td', { class: 'args', 'data-col': 'arguments' }, argsCell(q.arguments)),
      num('depth', fmt(q.depth)),
      num('bytes', fmtBytes(q.bytes), `${q.bytes} bytes`),
      num('scn', q.scn_oldest ? `${fmt(q.scn_oldest)}–${fmt(q.scn_head)}` : fmt(q.scn_head), 'oldest retained SCN – head SCN'),
      num('sow_records', fmt(q.sow_records)),
      num('history_versions', fmt(q.history_versions)),
      num('consumers', fmt(q.consumers)),
      num('published', fmt(q.counters.published)),
      num('delivered', fmt(q.counters.delivered)),
      num('acknowledged', fmt(q.counters.acknowledged)),
    ));
    const head = ['Queue', 'Kind', 'Durable', 'Arguments'].map((t) => h('th', {}, t))
      .concat(['Depth', 'Bytes', 'SCN range', 'SOW records', 'History', 'Consumers', 'Published', 'Delivered', 'Acked'].map((t) => h('th', { class: 'num' }, t)));
    card.replaceChildren(qs.length
      ? h('table', { id: 'queues' }, h('thead', {}, h('tr', {}, head)), h('tbody', {}, rows))
      : h('p', { class: 'muted' }, 'No queues yet.'));
  };
  await draw();
  every(g, 5000, draw);
}

// ---- queue page --------------------------------------------------------------------------

function statsGrid(q) {
  const item = (label, key, value) => h('div', {}, h('dt', {}, label), h('dd', { 'data-stat': key }, value));
  return h('dl', { class: 'stats' },
    item('Kind', 'kind', q.kind),
    item('Depth', 'depth', fmt(q.depth)),
    item('Bytes', 'bytes', fmtBytes(q.bytes)),
    item('SCN head', 'scn_head', fmt(q.scn_head)),
    item('Oldest SCN', 'scn_oldest', fmt(q.scn_oldest)),
    item('SOW records', 'sow_records', fmt(q.sow_records)),
    item('History versions', 'history_versions', fmt(q.history_versions)),
    item('History window', 'history_window', fmtDuration(q.history_window_ms)),
    item('Consumers', 'consumers', fmt(q.consumers)),
    item('Published', 'published', fmt(q.counters.published)),
    item('Delivered', 'delivered', fmt(q.counters.delivered)),
    item('Acked', 'acknowledged', fmt(q.counters.acknowledged)),
  );
}

async function queuePage(g, name, params) {
  app.replaceChildren(h('h1', {}, h('a', { href: '#/' }, 'Queues'), ' / ', name));
  let q;
  try { q = await api(queuePath(name)); } catch (e) { if (current(g)) app.append(h('p', { class: 'error' }, e.message)); return; }
  if (!current(g)) return; // the user went on while this page loaded
  const statsCard = h('section', { class: 'card' }, h('h2', {}, 'Statistics'), statsGrid(q),
    h('p', { class: 'args' }, h('span', { class: 'muted' }, 'Arguments: '), argsCell(q.arguments)));
  app.append(statsCard);
  every(g, 5000, async () => {
    try { const fresh = await api(queuePath(name)); statsCard.children[1].replaceWith(statsGrid(fresh)); } catch { /* keep the last */ }
  });
  let timeline;
  if (q.kind === 'sow') {
    timeline = h('section', { class: 'card', id: 'timeline', hidden: true });
    app.append(sowBrowser(q, (key) => showHistory(q, key, timeline)), timeline);
    if (params.get('key')) showHistory(q, params.get('key'), timeline);
  }
  app.append(liveTail(g, q));
}

function sowBrowser(q, pickKey) {
  const state = { skip: 0, top: 20, filter: '', orderBy: '', at: '' };
  const filter = h('input', { id: 'filter', placeholder: "/px > 100 AND /sym LIKE 'I%'", autocomplete: 'off' });
  const orderBy = h('input', { id: 'order-by', placeholder: '/px DESC', autocomplete: 'off' });
  const topN = h('input', { id: 'top-n', type: 'number', min: 1, max: 1000, value: 20 });
  const picker = h('input', { id: 'asof-picker', type: 'datetime-local', step: 1, title: 'point in time (UTC)' });
  const asof = h('input', { id: 'asof', placeholder: '2026-01-01T09:30:00Z or an SCN', autocomplete: 'off' });
  const status = h('div', { class: 'status', id: 'sow-status' });
  const tbody = h('tbody');
  const prev = h('button', { id: 'prev', class: 'secondary', type: 'button', disabled: true }, '‹ Prev');
  const next = h('button', { id: 'next', class: 'secondary', type: 'button', disabled: true }, 'Next ›');
  const pageInfo = h('span', { id: 'page-info', class: 'muted' });

  picker.addEventListener('change', () => {
    if (!picker.value) return;
    const v = picker.value.length === 16 ? picker.value + ':00' : picker.value; // datetime-local may omit seconds
    asof.value = v + 'Z';
  });

  let seq = 0;
  async function run() {
    const mine = ++seq;
    const p = new URLSearchParams({ top_n: String(state.top), skip_n: String(state.skip) });
    if (state.filter) p.set('filter', state.filter);
    if (state.orderBy) p.set('order_by', state.orderBy);
    if (state.at) p.set('at', state.at);
    status.className = 'status';
    status.textContent = 'Querying…';
    try {
      const r = await api(queuePath(q.name, 'sow', p));
      if (mine !== seq) return; // a newer query was started
      tbody.replaceChildren(...r.records.map((rec) => h('tr', { 'data-key': rec.key },
        h('td', { 'data-col': 'key' }, h('button', { class: 'link', type: 'button', title: 'show history', onclick: () => pickKey(rec.key) }, rec.key)),
        h('td', { class: 'num', 'data-col': 'scn' }, fmt(rec.scn)),
        h('td', { 'data-col': 'ts', class: 'mono' }, fmtTime(rec.ts)),
        h('td', { class: 'body', 'data-col': 'body', title: bodyText(rec.body) }, bodyText(rec.body)),
      )));
      const from = r.records.length ? state.skip + 1 : 0;
      pageInfo.textContent = `records ${from}–${state.skip + r.records.length}`;
      state.count = r.records.length;
      prev.disabled = state.skip === 0;
      next.disabled = !r.more;
      status.className = state.at ? 'status asof' : 'status';
      status.replaceChildren(
        h('span', { id: 'sow-count' }, `${r.records.length}${r.more ? '+' : ''} records`),
        r.truncated ? ` · page cut at ${fmtBytes(r.max_bytes)} of records` : '',
        ` · ${state.at ? 'historical query as of ' + state.at + ' (SCN ' + fmt(r.group_end_scn) + ')' : 'group_end SCN ' + fmt(r.group_end_scn)}`,
        ` · ${r.elapsed_ms} ms`,
      );
    } catch (e) {
      if (mine !== seq) return;
      tbody.replaceChildren();
      status.className = 'status error';
      status.textContent = e.message;
    }
    status.dataset.done = String(mine); // tests wait on this
  }
  const submit = (at) => (ev) => {
    ev?.preventDefault();
    state.filter = filter.value.trim();
    state.orderBy = orderBy.value.trim();
    state.top = Math.max(1, Math.min(1000, Number(topN.value) || 20));
    state.at = at === undefined ? asof.value.trim() : at;
    if (at === '') { asof.value = ''; picker.value = ''; }
    state.skip = 0;
    run();
  };
  prev.addEventListener('click', () => { state.skip = Math.max(0, state.skip - state.top); run(); });
  // A page cut by the API's byte budget holds fewer than top_n: the next starts after it.
  next.addEventListener('click', () => { state.skip += state.count ?? state.top; run(); });

  const form = h('form', { class: 'query', id: 'sow-form', onsubmit: submit('') },
    h('label', {}, 'Content filter', filter),
    h('label', {}, 'order_by', orderBy),
    h('label', {}, 'top_n (page)', topN),
    h('button', { id: 'run', type: 'submit' }, 'Query now'),
    h('label', {}, 'Point in time (UTC)', picker),
    h('label', {}, 'Bookmark', asof),
    h('button', { id: 'run-asof', type: 'button', class: 'secondary', onclick: submit(undefined) }, 'Query as of'),
  );
  run();
  return h('section', { class: 'card', id: 'sow' }, h('h2', {}, 'State of the world'), form, status,
    h('table', { id: 'sow-records' }, h('thead', {}, h('tr', {}, h('th', {}, 'Key'), h('th', { class: 'num' }, 'SCN'), h('th', {}, 'Time (UTC)'), h('th', {}, 'Body'))), tbody),
    h('div', { class: 'pager' }, prev, pageInfo, next));
}

// ---- key history timeline -----------------------------------------------------------------

async function showHistory(q, key, card) {
  card.hidden = false;
  card.replaceChildren(h('h2', {}, 'History of ', h('code', { id: 'history-key' }, key)), h('p', { class: 'muted' }, 'Loading…'));
  let hist;
  try { hist = await api(queuePath(q.name, 'history', new URLSearchParams({ key }))); }
  catch (e) { card.lastChild.replaceWith(h('p', { class: 'error' }, e.message)); return; }
  const legend = h('div', { class: 'legend' }, h('span', {}, h('i'), 'version'), h('span', {}, h('i', { class: 't' }), 'tombstone (delete)'),
    h('span', {}, h('i', { class: 'w' }), `history window (${fmtDuration(hist.window_ms)})`));
  const rows = hist.versions.map((v) => h('tr', { 'data-scn': v.scn },
    h('td', { class: 'num' }, fmt(v.scn)), h('td', { class: 'mono' }, fmtTime(v.ts)), h('td', {}, v.op === 'delete' ? 'tombstone' : 'version'),
    h('td', { class: 'body', title: v.body === null ? '' : bodyText(v.body) }, v.body === null ? '—' : bodyText(v.body))));
  card.lastChild.replaceWith(
    legend, timelineSvg(hist),
    h('p', { class: 'muted' }, `${hist.versions.length} retained version(s)${hist.truncated ? ' (newest shown; older ones left out)' : ''}; broker time ${fmtTime(hist.now)} UTC`),
    h('table', { id: 'history' }, h('thead', {}, h('tr', {}, h('th', { class: 'num' }, 'SCN'), h('th', {}, 'Time (UTC)'), h('th', {}, 'Kind'), h('th', {}, 'Body'))), h('tbody', {}, rows)),
  );
  card.scrollIntoView({ behavior: 'smooth', block: 'nearest' });
}

/** Versions as spans on a time axis, tombstones as crosses, the window boundary dashed. */
function timelineSvg(hist) {
  const W = 960, H = 150, L = 30, R = 30, Y = 70, AX = 112;
  const vs = hist.versions;
  const times = vs.map((v) => v.ts).concat([hist.now]);
  if (hist.window_start !== null) times.push(hist.window_start);
  let t0 = Math.min(...times), t1 = Math.max(...times);
  if (t1 - t0 < 1000) { t0 -= 500; t1 += 500; }
  const pad = (t1 - t0) * 0.04;
  t0 -= pad; t1 += pad;
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const svg = s('svg', { class: 'timeline', id: 'timeline-svg', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `history of ${hist.key}` });
  if (hist.window_start !== null) {
    const wx = x(hist.window_start);
    svg.append(s('rect', { class: 'outside', x: L, y: 20, width: Math.max(0, wx - L), height: AX - 20 }));
    svg.append(s('line', { class: 'boundary', 'data-role': 'window-boundary', x1: wx, x2: wx, y1: 14, y2: AX + 4 }));
    svg.append(s('text', { class: 'boundary-label', x: wx + 4, y: 14 }, 'window start'));
  }
  svg.append(s('line', { class: 'axis', x1: L, x2: W - R, y1: AX, y2: AX }));
  for (let i = 0; i <= 5; i++) {
    const t = t0 + ((t1 - t0) * i) / 5;
    const g = s('g', { class: 'tick' });
    g.append(s('line', { class: 'axis', x1: x(t), x2: x(t), y1: AX, y2: AX + 5 }));
    const label = (t1 - t0) > 86400000 ? new Date(t).toISOString().slice(0, 16).replace('T', ' ') : new Date(t).toISOString().slice(11, 19);
    g.append(s('text', { x: x(t), y: AX + 18, 'text-anchor': 'middle' }, label));
    svg.append(g);
  }
  const nx = x(hist.now);
  svg.append(s('line', { class: 'now', x1: nx, x2: nx, y1: 24, y2: AX }));
  svg.append(s('text', { x: nx, y: AX + 32, 'text-anchor': 'middle' }, 'now'));
  let lastLabel = -Infinity;
  vs.forEach((v, i) => {
    const end = i + 1 < vs.length ? vs[i + 1].ts : hist.now;
    const vx = x(v.ts);
    const tip = `SCN ${v.scn} · ${fmtTime(v.ts)} UTC · ${v.op === 'delete' ? 'tombstone' : bodyText(v.body)}`;
    if (v.op !== 'delete') {
      svg.append(s('line', { class: 'span', x1: vx, x2: Math.max(vx + 1, x(end)), y1: Y, y2: Y }));
      const c = s('circle', { class: 'version', 'data-scn': v.scn, cx: vx, cy: Y, r: 6 });
      c.append(s('title', {}, tip));
      svg.append(c);
    } else {
      const g = s('g', { class: 'tombstone', 'data-scn': v.scn });
      g.append(s('line', { x1: vx - 6, x2: vx + 6, y1: Y - 6, y2: Y + 6 }), s('line', { x1: vx - 6, x2: vx + 6, y1: Y + 6, y2: Y - 6 }), s('title', {}, tip));
      svg.append(g);
    }
    if (vx - lastLabel > 34) { svg.append(s('text', { x: vx, y: Y - 12, 'text-anchor': 'middle' }, String(v.scn))); lastLabel = vx; }
  });
  return svg;
}

// ---- live tail ----------------------------------------------------------------------------

function liveTail(g, q) {
  const list = h('ul', { class: 'tail', id: 'tail' });
  const status = h('div', { class: 'status', id: 'tail-status' }, 'Connecting…');
  const es = new EventSource('/api/' + queuePath(q.name, 'events'));
  onLeave(g, () => es.close());
  es.addEventListener('ready', (ev) => { status.textContent = `Following ${q.name} from SCN ${fmt(JSON.parse(ev.data).scn_head)}`; });
  es.addEventListener('record', (ev) => {
    const r = JSON.parse(ev.data);
    if (r.cmd === 'completed' || r.cmd === 'group_begin' || r.cmd === 'group_end') return;
    list.prepend(h('li', { 'data-key': r.key ?? '', 'data-scn': r.scn ?? '' },
      h('span', { class: `cmd cmd-${r.cmd}` }, r.cmd), ' ', h('span', { class: 'muted' }, fmtTime(r.ts)), ' ',
      r.scn !== undefined ? `#${r.scn} ` : '', r.key !== undefined ? h('b', {}, r.key) : '', ' ', bodyText(r.body)));
    while (list.children.length > 200) list.lastChild.remove();
  });
  // The broker ended the link (queue deleted, …): say why and stay closed; reconnecting
  // (EventSource's default) would only end the same way, over and over.
  es.addEventListener('end', (ev) => {
    es.close();
    const e = JSON.parse(ev.data);
    status.textContent = 'Stream ended: ' + (e.description ?? e.error ?? 'closed') + (e.error ? ` (${e.error})` : '');
  });
  es.onerror = () => {
    if (es.readyState !== EventSource.CLOSED) { status.textContent = 'Disconnected; retrying…'; return; }
    // Refused (not 200, e.g. 503 when auth.anonymous is false): the JSON answer says why.
    fetch('/api/' + queuePath(q.name, 'events')).then((res) => { if (res.ok) { res.body?.cancel(); throw new Error('stream'); } return res.json(); }).then((e) => { status.textContent = 'Live tail unavailable: ' + e.description; }, () => { status.textContent = 'Live tail unavailable'; });
  };
  return h('section', { class: 'card' }, h('h2', {}, 'Live events'), status, list);
}

// ---- start --------------------------------------------------------------------------------

window.addEventListener('hashchange', route);
refreshOverview();
setInterval(refreshOverview, 5000);
route();
