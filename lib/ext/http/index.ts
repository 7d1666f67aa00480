/**
 * The `http` extension: one HTTP listener (config `http: {enabled, host, port}`, loopback
 * port 8672 by default; `--http-port`, `--no-http`) serving
 *   /metrics   Prometheus text (prom-client), see metrics.ts
 *   /healthz   liveness: 200 while the process serves requests
 *   /readyz    readiness: 200 once storage is open and the AMQP listener is up, else 503
 *   /          the console (static files from ./console, plain HTML + vanilla JS)
 *   /api/...   the console's read-only JSON API, see api.ts
 * The URL is published as `broker.httpUrl` (tidemark prints it after the amqp line).
 *
 * Read-only: only GET and HEAD are served. There is no authentication on this listener yet,
 * so it binds to loopback by default; do not expose it beyond a trusted network
 * (docs/observability.md). The views with message content (SOW, history, tail) answer 503
 * when `auth.anonymous` is false, and 403 to clients off loopback when it is "loopback"
 * (api.ts, contentGate); statistics are always served.
 */
import { createServer, type Server, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Extension } from '../../core/extensions.js';
import type { BrokerContext } from '../../core/broker-context.js';
import { logger } from '../../core/log.js';
import { createMetrics, type BrokerMetrics } from './metrics.js';
import { SelfClient } from './self-client.js';
import { Api, HttpError, sendJson } from './api.js';
import { loadConsoleFiles, type StaticFile } from './static.js';
import { hostAllowed } from './host-check.js';

const log = logger('http');

export function httpExtension(): Extension {
  let server: Server | undefined;
  let metrics: BrokerMetrics | undefined;
  let client: SelfClient | undefined;
  let api: Api | undefined;
  let files: Map<string, StaticFile> | undefined;
  let broker: BrokerContext | undefined;

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const b = broker!;
    // Every response carries data others sent (names, bodies, errors that echo a path): the
    // browser must take each as its declared type, never sniff it into HTML.
    res.setHeader('x-content-type-options', 'nosniff');
    if (!hostAllowed(req.headers.host, b.config.http.allowedHosts)) {
      throw new HttpError(403, 'host-not-allowed', `Host ${JSON.stringify(req.headers.host ?? '')} is not served: use an IP address or localhost, or list the name in the config's http.allowedHosts (a guard against DNS rebinding)`);
    }
    const u = new URL(req.url ?? '/', 'http://localhost');
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD');
      throw new HttpError(405, 'method-not-allowed', 'the console and API are read-only (GET, HEAD)');
    }
    const path = u.pathname;
    // The API's path is split as sent: URL's pathname resolves dot segments, which made the
    // queues "." and ".." unreachable (/api/queues/. listed every queue).
    // An absolute-form target (`GET http://host/api/… HTTP/1.1`, RFC 7230 5.3.2, as proxies
    // send) is the same request: its scheme and authority come off first.
    const target = req.url ?? '/';
    const raw = (target.startsWith('/') ? target : target.replace(/^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i, '') || '/').split('?')[0];
    if (path === '/metrics') {
      const text = await metrics!.text();
      res.writeHead(200, { 'content-type': metrics!.registry.contentType, 'cache-control': 'no-store' });
      res.end(req.method === 'HEAD' ? undefined : text);
      return;
    }
    if (path === '/healthz') return sendJson(res, 200, { status: 'ok' });
    if (path === '/readyz') {
      const storage = b.store !== undefined && !b.store.closed;
      const amqp = b.urls.length > 0;
      return sendJson(res, storage && amqp ? 200 : 503, { status: storage && amqp ? 'ready' : 'not ready', storage: storage ? 'open' : 'closed', amqp: amqp ? b.urls[0] : null });
    }
    if (raw.startsWith('/api/')) {
      let parts: string[];
      try { parts = raw.slice(5).split('/').filter((s) => s !== '').map(decodeURIComponent); }
      catch { throw new HttpError(400, 'bad-request', 'malformed path'); }
      return api!.handle(req, res, u, parts);
    }
    const f = files!.get(path === '/' ? '/index.html' : path);
    if (!f) throw new HttpError(404, 'not-found', `no such page: ${path}`);
    res.writeHead(200, {
      'content-type': f.type, 'cache-control': 'no-cache', 'x-content-type-options': 'nosniff',
      'content-security-policy': "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'",
    });
    res.end(req.method === 'HEAD' ? undefined : f.body);
  }

  return {
    name: 'http',
    async start(b) {
      const cfg = b.config.http;
      if (!cfg.enabled) return;
      broker = b;
      files = loadConsoleFiles();
      metrics = createMetrics(b);
      client = new SelfClient(() => b.urls[0], () => b.consoleLogin);
      api = new Api(b, client);
      const srv = createServer((req, res) => {
        route(req, res).catch((err) => {
          if (res.headersSent) { res.end(); return; }
          if (err instanceof HttpError) return sendJson(res, err.status, { error: err.code, description: err.message });
          log.error('http request failed', { path: req.url, err });
          sendJson(res, 500, { error: 'internal-error', description: (err as Error).message });
        });
      });
      srv.keepAliveTimeout = 5000;
      await new Promise<void>((resolve, reject) => {
        const onError = (err: NodeJS.ErrnoException) => reject(new Error(`HTTP listener cannot bind ${cfg.host}:${cfg.port}: ${err.code ?? err.message} (choose another with --http-port, or --no-http)`));
        srv.once('error', onError);
        srv.listen(cfg.port, cfg.host, () => { srv.off('error', onError); resolve(); });
      });
      srv.on('error', (err) => log.error('http listener error', { err }));
      server = srv;
      const a = srv.address() as AddressInfo;
      const host = a.family === 'IPv6' || a.address.includes(':') ? `[${a.address}]` : a.address;
      b.httpUrl = `http://${host}:${a.port}`;
      log.info('http listening', { url: b.httpUrl });
    },
    async stop() {
      api?.closeStreams();
      await client?.close();
      metrics?.close();
      const srv = server;
      server = undefined;
      if (srv) {
        await new Promise<void>((resolve) => { srv.close(() => resolve()); srv.closeAllConnections(); });
      }
    },
  };
}
