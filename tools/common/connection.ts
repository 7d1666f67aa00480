/**
 * Connecting the tools to a broker: the `-b/--broker` URL (also Qpid's `user/pass@host:port`),
 * `--connection-options` (a Qpid map) and promise helpers over rhea with bounded waits, so a
 * tool never hangs on a silent broker.
 */
import { isIP } from 'node:net';
import rhea from 'rhea';
import { randomUUID } from 'node:crypto';
import { parseQpidMap } from '../../lib/address/index.js';
import { ToolError, errorMessage } from './cli.js';
import { applyRheaPatches } from '../../lib/core/protocol/rhea-patches.js';

// rhea 3.0.5 merges dispositions of different outcomes settled in one tick (docs/rhea-patches.md
// patch 1); it bites a client settling its receives as much as the broker: the tools get the fix too.
applyRheaPatches();

export const r: any = rhea;

export interface BrokerAddress {
  scheme: 'amqp' | 'amqps';
  host: string;
  port: number;
  username?: string;
  password?: string;
}

/**
 * Parses `amqp://host:port`, `amqps://user:pass@host`, `host:port`, `host`,
 * `user/pass@host:port` (Qpid) and `user@host`. Default port 5672 (5671 for amqps).
 */
export function parseBrokerUrl(text: string): BrokerAddress {
  const orig = text.trim();
  if (!orig) throw new ToolError('empty broker URL');
  let rest = orig;
  let scheme: 'amqp' | 'amqps' = 'amqp';
  const m = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\//.exec(rest);
  if (m) {
    const s = m[1].toLowerCase();
    if (s !== 'amqp' && s !== 'amqps') throw new ToolError(`unsupported scheme '${m[1]}' in broker URL '${orig}' (use amqp or amqps)`);
    scheme = s;
    rest = rest.slice(m[0].length);
  }
  rest = rest.replace(/\/+$/, '');
  let username: string | undefined;
  let password: string | undefined;
  const at = rest.lastIndexOf('@');
  if (at >= 0) {
    const cred = rest.slice(0, at);
    rest = rest.slice(at + 1);
    // Qpid writes user/pass; URLs write user:pass
    const sep = cred.search(/[/:]/);
    // %XX escapes are decoded in both forms (a password holding '@', '/' or ':' writes them so)
    const decode = (part: string, what: string) => {
      try { return decodeURIComponent(part); } catch {
        throw new ToolError(`broker URL: the ${what} has a '%' that is not a %XX escape (write a literal '%' as %25)`);
      }
    };
    username = decode(sep >= 0 ? cred.slice(0, sep) : cred, 'user name');
    password = sep >= 0 ? decode(cred.slice(sep + 1), 'password') : undefined;
    if (!username) throw new ToolError(`empty user name in broker URL '${orig}'`);
  }
  let host = rest;
  let port = scheme === 'amqps' ? 5671 : 5672;
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(rest);
  if (v6) {
    host = v6[1];
    if (v6[2]) port = Number(v6[2]);
  } else {
    const c = rest.lastIndexOf(':');
    if (c >= 0) {
      const p = rest.slice(c + 1);
      host = rest.slice(0, c);
      if (!/^\d+$/.test(p)) throw new ToolError(`bad port '${p}' in broker URL '${orig}'`);
      port = Number(p);
    }
  }
  if (!host) host = '127.0.0.1';
  if (port < 1 || port > 65535) throw new ToolError(`port out of range in broker URL '${orig}'`);
  if (/[/\s]/.test(host)) throw new ToolError(`bad host '${host}' in broker URL '${orig}'`);
  return { scheme, host, port, username, password };
}

export interface ConnectionOptions {
  username?: string;
  password?: string;
  sasl_mechanisms?: string;
  container_id?: string;
  /** seconds */
  idle_timeout?: number;
}

/** Qpid connection options we act on, and those we accept and ignore (they make no sense here). */
const KNOWN = ['username', 'password', 'sasl_mechanisms', 'sasl-mechanisms', 'container_id', 'container-id', 'idle_timeout', 'idle-timeout', 'heartbeat', 'protocol', 'transport'];
const IGNORED = ['reconnect', 'reconnect_timeout', 'reconnect_limit', 'reconnect_interval', 'reconnect_interval_min', 'reconnect_interval_max', 'reconnect_urls', 'tcp_nodelay', 'tcp-nodelay', 'sasl_service', 'sasl_min_ssf', 'sasl_max_ssf', 'max_frame_size'];

/** Parses `--connection-options` (a Qpid map); refuses unknown keys with the list of known ones. */
export function parseConnectionOptions(text: string | undefined): ConnectionOptions & { transport?: string } {
  if (text === undefined || text.trim() === '') return {};
  let map: Record<string, unknown>;
  try { map = parseQpidMap(text); } catch (e) { throw new ToolError(`--connection-options: ${errorMessage(e)}`); }
  const out: ConnectionOptions & { transport?: string } = {};
  for (const [k, v] of Object.entries(map)) {
    if (IGNORED.includes(k)) continue;
    if (!KNOWN.includes(k)) throw new ToolError(`--connection-options: unknown option '${k}' (known: username, password, sasl_mechanisms, container_id, idle_timeout, heartbeat, protocol, transport)`);
    const key = k.replace(/-/g, '_');
    if (key === 'protocol') {
      if (!/^amqp1\.0$/i.test(String(v))) throw new ToolError(`--connection-options: protocol '${v}' is not supported (only amqp1.0)`);
    } else if (key === 'idle_timeout' || key === 'heartbeat') {
      const n = Number(v);
      if (!Number.isFinite(n) || n < 0) throw new ToolError(`--connection-options: ${k} expects seconds >= 0, got '${v}'`);
      out.idle_timeout = n;
    } else if (key === 'transport') {
      const t = String(v).toLowerCase();
      if (!['tcp', 'ssl', 'tls'].includes(t)) throw new ToolError(`--connection-options: transport '${v}' (use tcp or ssl)`);
      out.transport = t;
    } else {
      (out as Record<string, unknown>)[key] = String(v);
    }
  }
  if (out.sasl_mechanisms) {
    const mechs = out.sasl_mechanisms.toUpperCase().split(/[\s,]+/).filter(Boolean);
    for (const m of mechs) if (m !== 'PLAIN' && m !== 'ANONYMOUS') throw new ToolError(`--connection-options: SASL mechanism '${m}' is not supported (PLAIN, ANONYMOUS)`);
  }
  return out;
}

export interface Connected {
  container: any;
  connection: any;
  /** Closes the connection, waiting at most `ms`. */
  close(ms?: number): Promise<void>;
}

export interface ConnectSettings {
  broker: string;
  connectionOptions?: string;
  /** default container id when --connection-options has none */
  containerId?: string;
  timeoutMs?: number;
}

/** What a tool will do to connect: rhea's connect options and what to say when it fails. */
export interface ConnectPlan {
  /** rhea `connect` options: host, port, transport, username/password, idle_time_out */
  options: Record<string, unknown>;
  containerId: string;
  /** `amqp://host:port` (no credentials), for messages */
  where: string;
  /** the SASL mechanism rhea will use ('none': no SASL layer, which the broker takes as ANONYMOUS when it allows it) */
  mechanism: 'PLAIN' | 'ANONYMOUS' | 'none';
  /** the user name sent (PLAIN), or the trace name of ANONYMOUS */
  user?: string;
}

/** Works out the connection from `-b/--broker` and `--connection-options` (the latter wins). */
export function connectPlan(settings: ConnectSettings): ConnectPlan {
  const addr = parseBrokerUrl(settings.broker);
  const co = parseConnectionOptions(settings.connectionOptions);
  const username = co.username ?? addr.username;
  const password = co.password ?? addr.password;
  const mechs = co.sasl_mechanisms?.toUpperCase() ?? '';
  const containerId = co.container_id ?? settings.containerId ?? `tidemark-tool-${randomUUID()}`;
  const options: Record<string, unknown> = { host: addr.host, port: addr.port, reconnect: false };
  // `transport` in --connection-options wins over the URL's scheme, as credentials do
  const tls = co.transport !== undefined ? co.transport !== 'tcp' : addr.scheme === 'amqps';
  if (tls) {
    options.transport = 'tls';
    // SNI carries host names only (RFC 6066): for an IP address send none (Node warns otherwise)
    if (isIP(addr.host)) options.servername = '';
  }
  let mechanism: ConnectPlan['mechanism'] = 'none';
  let user: string | undefined;
  if (mechs && !mechs.includes('PLAIN')) {
    options.username = 'anonymous'; // SASL ANONYMOUS
    mechanism = 'ANONYMOUS';
    user = 'anonymous';
  } else if (username !== undefined) {
    options.username = username;
    user = username;
    if (password !== undefined) { options.password = password; mechanism = 'PLAIN'; } else if (mechs.includes('PLAIN')) throw new ToolError('SASL PLAIN needs a password');
    else mechanism = 'ANONYMOUS'; // rhea: a user name without a password is ANONYMOUS with that trace
  }
  if (co.idle_timeout) options.idle_time_out = co.idle_timeout * 1000;
  return { options, containerId, where: `${tls ? 'amqps' : 'amqp'}://${addr.host}:${addr.port}`, mechanism, user };
}

const CREDENTIALS_HINT = 'give user/password in the URL (amqp://user:pass@host:port) or with --connection-options "{username: U, password: P}"';
const SASL_CODES: Record<string, string> = { 1: 'auth', 2: 'sys', 3: 'sys-perm', 4: 'sys-temp' };

/**
 * The one-line reason a connection attempt failed, in terms of what the user can do about
 * it: missing or refused credentials first (rhea's own texts, "SASL layer not enabled" or
 * "Failed to authenticate: 1", say neither what happened nor what to do).
 */
export function connectFailure(plan: ConnectPlan, e: { condition?: unknown; description?: unknown; message?: unknown; name?: unknown } | undefined, stage: 'refused' | 'lost'): string {
  const cond = e?.condition ? String(e.condition) : '';
  const desc = e?.description ? String(e.description) : e?.message ? String(e.message) : '';
  const where = plan.where;
  if (/SASL layer not enabled/i.test(desc)) {
    // we sent a plain AMQP header (no user name); the broker answered with SASL: it wants credentials
    return `cannot connect to ${where}: authentication required: the broker does not allow anonymous connections; ${CREDENTIALS_HINT}`;
  }
  const outcome = /Failed to authenticate: (\d+)/.exec(desc);
  if (outcome) {
    const code = SASL_CODES[outcome[1]] ?? outcome[1];
    if (code !== 'auth') return `authentication failed at ${where}: the broker could not check the credentials (SASL outcome ${code}); try again later`;
    if (plan.mechanism === 'PLAIN') return `authentication failed at ${where} for user '${plan.user}' (SASL PLAIN, outcome auth): wrong user name or password`;
    const as = plan.user && plan.user !== 'anonymous' ? `; user '${plan.user}' was given without a password` : '';
    return `authentication failed at ${where}: the broker refused SASL ANONYMOUS (outcome auth${as}): it does not allow anonymous connections; ${CREDENTIALS_HINT}`;
  }
  const noMech = /No suitable mechanism; server supports (.*)$/.exec(desc);
  if (noMech) {
    const offers = `it offers SASL ${noMech[1] || 'nothing'}`;
    if (plan.mechanism === 'PLAIN') return `authentication failed at ${where}: the broker does not offer SASL PLAIN (${offers})`;
    const as = plan.user && plan.user !== 'anonymous' ? `user '${plan.user}' was given without a password; ` : '';
    return `authentication failed at ${where}: the broker does not allow anonymous connections (${as}${offers}); ${CREDENTIALS_HINT}`;
  }
  if (cond === 'amqp:unauthorized-access') {
    return `authentication failed at ${where}${plan.user ? ` for user '${plan.user}'` : ''}${desc ? `: ${desc}` : ''}${plan.mechanism === 'PLAIN' ? '' : `; ${CREDENTIALS_HINT}`}`;
  }
  if (stage === 'refused') {
    const reason = cond && desc ? `${cond}: ${desc}` : cond || desc;
    return `connection to ${where} refused: ${reason || 'the broker closed it without giving a reason'}`;
  }
  // OpenSSL's text ("...:SSL routines:ssl3_get_record:wrong version number:../deps/...") says
  // which step failed; the user needs to know the port did not answer in TLS.
  const ssl = /SSL routines:[^:]*:([^:]+)/.exec(desc);
  if (ssl) return `cannot connect to ${where}: the TLS handshake failed (${ssl[1]}): is this a TLS port? (amqps:// and transport ssl need one)`;
  // rhea shows the first bytes of a header that is not AMQP in hex: "HTTP" is 48545450, what
  // the broker's metrics and console port answers.
  const header = /Invalid protocol header for AMQP:? ?([0-9a-f]+)/i.exec(desc);
  if (header) {
    const text = Buffer.from(header[1].slice(0, 16), 'hex').toString('latin1');
    const http = text.startsWith('HTTP');
    return `cannot connect to ${where}: it does not speak AMQP (it answered ${JSON.stringify(text.replace(/[^\x20-\x7e]/g, '.'))})${http ? `: an HTTP port, such as the broker's metrics and console; its AMQP port is the one printed as "Tidemark listening on amqp://…" (5672 by default)` : ''}`;
  }
  return `cannot connect to ${where}: ${desc || cond || 'disconnected'}`;
}

/** Opens a connection with a fresh rhea container; rejects with a ToolError on failure or time-out. */
export function connect(settings: ConnectSettings): Promise<Connected> {
  const plan = connectPlan(settings);
  const container = r.create_container({ id: plan.containerId });
  const { where } = plan;
  return new Promise((resolve, reject) => {
    let settled = false;
    /** a protocol error rhea met reading (it would print it with console.error without a listener) */
    let protocolError: Error | undefined;
    const connection = container.connect(plan.options);
    const fail = (msg: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      try { connection.close(); } catch { /* ignore */ }
      reject(new ToolError(msg));
    };
    const timer = setTimeout(() => fail(`could not connect to ${where} within ${(settings.timeoutMs ?? 10000) / 1000}s`), settings.timeoutMs ?? 10000);
    container.on('error', (ctx: any) => { if (!settled) fail(`connection to ${where} failed: ${errorMessage(ctx?.error ?? ctx)}`); });
    connection.on('protocol_error', (e: Error) => { protocolError = e; });
    connection.on('connection_error', (ctx: any) => {
      fail(connectFailure(plan, ctx.error ?? ctx.connection.error ?? protocolError, 'refused'));
    });
    connection.on('disconnected', (ctx: any) => {
      if (!settled) fail(connectFailure(plan, protocolError ?? ctx?.error ?? ctx?.connection?.error, 'lost'));
    });
    connection.once('connection_open', () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({
        container,
        connection,
        close: (ms = 2000) => new Promise<void>((res) => {
          if (!connection.is_open()) { try { connection.close(); } catch { /* ignore */ } res(); return; }
          const t = setTimeout(() => { try { connection.socket?.destroy(); } catch { /* ignore */ } res(); }, ms);
          const done = () => { clearTimeout(t); res(); };
          connection.once('connection_close', done);
          connection.once('disconnected', done);
          connection.close();
        }),
      });
    });
  });
}

/**
 * Why an open connection ended: the broker's close error when it sent one (`the broker closed
 * the connection: amqp:connection:forced: the broker is shutting down`), else "disconnected
 * from the broker".
 */
export function connectionLost(connection: any): string {
  const err = connection?.remote?.close?.error ?? connection?.error;
  if (err) return `the broker closed the connection: ${describeError(err)}`;
  if (connection?.remote?.close) return 'the broker closed the connection';
  return 'disconnected from the broker';
}

/** `condition: description` of a link or connection error. */
export function describeError(err: any): string {
  if (!err) return 'closed by the broker';
  const cond = err.condition ? String(err.condition) : '';
  const desc = err.description ? String(err.description) : '';
  if (cond && desc) return `${cond}: ${desc}`;
  return cond || desc || errorMessage(err);
}

/** Wraps a plain filter entry ({descriptor, value}) as a described AMQP value. */
export function wrapDescribed(value: unknown, descriptor: number | string): any {
  return r.types.wrap_described(value, descriptor);
}

/**
 * Gives rhea AMQP types to address-derived terminus data: lifetime-policy and filter
 * entries are described values ({descriptor, value}).
 */
export function typedTerminus(t: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (!t) return t;
  const out: Record<string, unknown> = { ...t };
  const dnp = t.dynamic_node_properties as Record<string, unknown> | undefined;
  if (dnp) {
    const props: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(dnp)) props[k] = isDescribed(v) ? wrapDescribed(v.value, v.descriptor) : v;
    out.dynamic_node_properties = props;
  }
  const filter = t.filter as Record<string, unknown> | undefined;
  if (filter) {
    const f: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(filter)) f[k] = isDescribed(v) ? wrapDescribed(v.value, v.descriptor) : v;
    out.filter = f;
  }
  return out;
}

function isDescribed(v: unknown): v is { descriptor: number | string; value: unknown } {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && 'descriptor' in v && 'value' in v && Object.keys(v).length === 2;
}

/** Opens a sender and waits for credit or the attach reply; rejects with the detach error. */
export function openSender(conn: Connected, opts: Record<string, unknown>, timeoutMs = 10000): Promise<any> {
  return new Promise((resolve, reject) => {
    const s = conn.connection.open_sender(opts);
    let done = false;
    const finish = (err?: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (err) reject(err); else resolve(s);
    };
    const timer = setTimeout(() => finish(new ToolError(`no answer from the broker to the attach within ${timeoutMs / 1000}s`)), timeoutMs);
    s.once('sender_open', () => {
      // a refused attach comes back with a null target, then a detach
      const tgt = s.remote?.attach?.target;
      if (s.remote?.attach && (!tgt || tgt?.type?.name === 'Null')) return;
      finish();
    });
    s.once('sender_close', () => finish(new ToolError(describeError(s.error))));
    s.once('sender_error', () => finish(new ToolError(describeError(s.error))));
    conn.connection.once('connection_close', () => finish(new ToolError(`connection closed: ${describeError(conn.connection.error)}`)));
    conn.connection.once('disconnected', () => finish(new ToolError(connectionLost(conn.connection))));
  });
}

/** Opens a receiver (manual credit) and waits for the attach reply; rejects with the detach error. */
export function openReceiver(conn: Connected, opts: Record<string, unknown>, timeoutMs = 10000): Promise<any> {
  return new Promise((resolve, reject) => {
    const rcv = conn.connection.open_receiver({ autoaccept: false, credit_window: 0, ...opts });
    let done = false;
    const finish = (err?: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (err) reject(err); else resolve(rcv);
    };
    const timer = setTimeout(() => finish(new ToolError(`no answer from the broker to the attach within ${timeoutMs / 1000}s`)), timeoutMs);
    rcv.once('receiver_open', () => {
      // A refused attach has a null source; rhea hands it over as a typed null.
      const src = rcv.remote?.attach?.source;
      if (rcv.remote?.attach && (!src || src?.type?.name === 'Null')) {
        // refused: the detach with the error follows; wait for it (bounded)
        setTimeout(() => finish(new ToolError(describeError(rcv.error ?? { description: 'the broker refused the link (null source)' }))), 2000);
        return;
      }
      // A detach read together with the attach (a link refused or ended at once) is handled
      // before this runs, and so rejects: resolving now would leave the caller a closed link
      // whose close event it never sees.
      setImmediate(() => finish());
    });
    rcv.once('receiver_close', () => finish(new ToolError(describeError(rcv.error))));
    rcv.once('receiver_error', () => finish(new ToolError(describeError(rcv.error))));
    conn.connection.once('connection_close', () => finish(new ToolError(`connection closed: ${describeError(conn.connection.error)}`)));
    conn.connection.once('disconnected', () => finish(new ToolError(connectionLost(conn.connection))));
  });
}
