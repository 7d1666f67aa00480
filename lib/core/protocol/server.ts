/**
 * The AMQP 1.0 server on rhea: listeners, SASL, connection/session/link lifecycle, credit,
 * drain and dispositions. Handlers translate performatives into calls on the broker and
 * delegate; they hold no queue logic. This is the only place that imports rhea's networking
 * and the one place where errors become AMQP conditions (architecture invariant 6).
 */
import net from 'node:net';
import tls from 'node:tls';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import rhea from 'rhea';
import { installRawCapture, rawBytes } from './raw-message.js';
import { RheaSink, deliverOutcome } from './sink.js';
import { dropUnwrittenOnDetach, forgetUnsettled } from './sender-detach.js';
import { FrameWriter } from './frame-writer.js';
import { capabilities, nodeProperties, filters as sourceFilters, expandQpidAddress } from './terminus.js';
import { oddMapSection } from '../../codec/message-bytes.js';
import { TidemarkError, Conditions, toAmqpError, amqpInfo } from '../errors.js';
import { ConfigError, type BrokerConfig } from '../config.js';
import type { Consumer } from '../queue/delivery.js';
import type { InboundMessage } from '../queue/inbound.js';
import type { Queue } from '../queue/queue.js';
import { filterText, type ConsumerRequest, type ParsedFilter } from '../extensions.js';
import { logger } from '../log.js';
import { applyRheaPatches } from './rhea-patches.js';
import { applyRheaGuards, DELIVERY_ABORTED } from './rhea-guards.js';
import { PeerError } from './peer-error.js';
import { tuneRhea } from './rhea-tuning.js';
import { Transactions } from './transactions.js';
import { checkSaslServer, guardSaslServer } from './sasl-guard.js';

const require = createRequire(import.meta.url);
const Connection = require('rhea/lib/connection.js');
const { ProtocolError } = require('rhea/lib/errors.js');
const rheaFrames = require('rhea/lib/frames.js');
/** The capabilities the client asked for that the node has (wire.md 2.1: echo only those that hold). */
function heldCapabilities(asked: string[], q: Queue): string[] {
  return asked.filter((c) => c === 'queue' || c === 'create-on-demand' || (c === 'durable' && q.def.durable && !q.def.temporary));
}

/**
 * The TLS listener's key material; a file or key problem names the config key and file.
 * With `ca`, clients must present a certificate that CA signed (mutual TLS): a server has no
 * other use for a CA, and an operator who names one expects it to be enforced.
 */
function tlsOptions(t: { key?: string; cert?: string; ca?: string }): tls.TlsOptions {
  const read = (field: string, file: string | undefined) => {
    if (typeof file !== 'string' || file === '') throw new ConfigError(`config.tls.${field}: missing: the TLS listener needs key and cert (PEM file paths)`);
    try { return readFileSync(file); } catch (e) { throw new ConfigError(`config.tls.${field}: cannot read ${file}: ${(e as Error).message}`); }
  };
  const opts: tls.TlsOptions = { key: read('key', t.key), cert: read('cert', t.cert) };
  if (t.ca) Object.assign(opts, { ca: read('ca', t.ca), requestCert: true, rejectUnauthorized: true });
  try { tls.createSecureContext(opts); } catch (e) {
    throw new ConfigError(`config.tls: the key ${t.key} and certificate ${t.cert}${t.ca ? ` (ca ${t.ca})` : ''} are not usable PEM: ${(e as Error).message}`);
  }
  return opts;
}

const log = logger('protocol');

/**
 * What went wrong with an undecodable frame, for the peer. rhea leaves a frame whose
 * descriptor is not a performative undecoded and then fails calling its `dispatch`: say that,
 * not the JavaScript error.
 */
function describeUndecodable(err: any): string {
  const msg = String(err?.message ?? err);
  if (err instanceof TypeError && /performative\.dispatch is not a function/.test(msg)) {
    return 'the frame body is not an AMQP 1.0 performative (open, begin, attach, flow, transfer, disposition, detach, end, close, or a SASL frame during SASL)';
  }
  return msg;
}

/** What the protocol layer needs from the broker. */
export interface ProtocolBackend {
  readonly config: BrokerConfig;
  /** Finds or creates the node a link attaches to; throws TidemarkError (not-found, invalid-field...). */
  resolveNode(address: string, opts: { createOnDemand: boolean; properties: Record<string, unknown>; role: 'sender' | 'receiver'; user: string }): Queue;
  /** A dynamic (temporary) node, deleted with its link. */
  createDynamicNode(properties: Record<string, unknown>, user: string, connectionId: string, onLinkClose: (fn: () => void) => void): Queue;
  /** Parses a source filter by descriptor; undefined when no extension knows it. */
  parseFilter(descriptor: string, value: unknown, queue: Queue): { symbol: string; parsed: ParsedFilter } | undefined;
  openConsumer(queue: Queue, req: ConsumerRequest, sink: RheaSink): Consumer;
  /** Stores a message; `done` runs when durable or refused. */
  publish(queue: Queue, msg: InboundMessage, done: (err?: TidemarkError) => void): void;
  /** Whether a queue of exactly this name exists (a name holding `; {` is then not read as a Qpid address). */
  hasNode(name: string): boolean;
  /** Addresses served by extensions ($management): returns a handler or undefined. */
  serviceAddress(address: string): ((msg: InboundMessage, user: string, done: (err?: TidemarkError) => void) => void) | undefined;
  /**
   * PLAIN check (may be async: scrypt off the event loop). `user` and `password` are as rhea
   * extracted them: null for an empty field. `gone()`: the connection has ended, nobody waits
   * for the answer.
   */
  authenticate(user: unknown, password: unknown, gone?: () => boolean): boolean | Promise<boolean>;
  /** ACL for a receiving link before the attach reply: throws unauthorized, may downgrade move to copy. */
  authorizeConsumer?(queue: Queue, req: ConsumerRequest): void;
  readonly stats: { connections: number; links: number };
  /** A peer sent `bytes`: the broker is in use (idle-time work waits). */
  onActivity?(bytes: number): void;
  /** Runs `fn` once every write queued so far is durable (acknowledged messages' removals included). */
  whenStored?(fn: () => void): void;
}

interface LinkState {
  outstandingBytes?: number; ready?: boolean; sink?: RheaSink; consumer?: Consumer; queue?: Queue; onClose: Array<() => void>; outstanding: number; credit: number;
  /** The service address ($management) a producer link targets; its messages go there, whatever their `to`. */
  service?: string;
}
const STATE = Symbol('tidemark.link');
/**
 * A connection's links that have a LinkState, so its end closes every one: rhea drops a link
 * that never counted as open (one refused at attach, its detach unanswered) from its session
 * when the socket goes, before the `disconnected` handler runs, and the link's close hooks
 * (the links gauge among them) never ran.
 */
const LINKS = Symbol('tidemark.links');
/** Bytes of a producer's messages waiting for storage beyond which it gets no more credit. */
const MAX_PENDING_BYTES = 64 * 1024 * 1024;
const HARDEN = Symbol('tidemark.harden');
/** A connection accepted over limits.maxConnections, only to be told so at its open. */
const OVER_LIMIT = Symbol('tidemark.over-limit');
/** The peer's close has been read: frames after it are left alone (see the guards below). */
const PEER_CLOSED = Symbol('tidemark.peer-closed');
/** Over-limit connections being refused at once; more are reset. */
const MAX_REFUSALS_AT_ONCE = 16;
/** How long an over-limit connection may take to open and hear why before it is reset. */
const REFUSAL_MS = 2000;
/** Marks SASL mechanisms that authenticate a user name (PLAIN); see #user. */
const NAMES_USER = Symbol('tidemark.names-user');
/** When a TLS listener's TCP socket connected (its open deadline runs from then). */
const CONNECTED_AT = Symbol('tidemark.connected-at');
const PRODUCT = { product: 'tidemark', version: '0.1.0' };

/**
 * Shortest idle-time-out a peer may ask for, ms. The broker sends its heartbeats at half the
 * peer's idle-time-out (rhea), so they never come more often than every 100 ms. A peer asking
 * for less is refused at open with amqp:not-allowed and a description [AMQP 2.4.5: a peer
 * that cannot support a proposed idle timeout SHOULD close the connection with an error
 * explaining why]. Sending at a floor instead would not keep such a peer's connection alive
 * (it would time out between two heartbeats) and would hide the reason; refusing tells it.
 * 1 ms made the broker write ~840 heartbeats a second.
 */
export const MIN_PEER_IDLE_TIMEOUT_MS = 200;
/**
 * The largest frame a peer may send before its open has been read: SASL frames and the open
 * itself. Until then max-frame-size is not negotiated, and AMQP 1.0 §2.4.1 allows 512 bytes;
 * rhea buffered up to limits.maxFrameSize (1 MiB) of one frame for every connection that had
 * not even authenticated (400 sockets: +430 MB). 64 KiB leaves room for long PLAIN
 * credentials (a token as password) and an open with many properties.
 */
export const PRE_OPEN_MAX_FRAME = 64 * 1024;
/** rhea arms setTimeout(idle-time-out / 2); past 2^31-1 ms Node fires after 1 ms instead. */
const MAX_PEER_IDLE_TIMEOUT_MS = 2 * 0x7fffffff;

/**
 * rhea 3.0.5 computes a sender's credit from a peer's flow without serial-number arithmetic
 * [AMQP 2.6.7] (`credit = flow.delivery_count + flow.link_credit - delivery_count`) and
 * drains it one unit at a time (`while (credit) { ++delivery_count; --credit }`). A flow
 * with drain and a huge credit, or a delivery-count ahead of ours (negative credit), spins
 * the event loop for seconds or forever. Per sender instance: compute credit modulo 2^32,
 * never below 0, and drain in O(1). Found by spec/integration/hostile-input.spec.ts.
 */
/**
 * rhea 3.0.5 decodes an AMQP array by looping `count` times over its element type; for a
 * zero-width element type (null, true, false, uint0, ulong0, list0) nothing is consumed, so
 * an 8-byte array header claiming 2^32-1 nulls makes the decoder push billions of values
 * (event loop stuck, memory exhausted). Found by spec/integration/fuzz.spec.ts. Refuse an
 * array whose count cannot be real: more elements than remaining bytes, beyond 64 Ki.
 * Global (rhea.types.Reader is shared), idempotent; a decode error closes the connection
 * with amqp:decode-error like any other malformed frame.
 */
const ARRAY_GUARD = Symbol.for('tidemark.array-guard');
export function guardArrayDecoding(): void {
  const Reader: any = (rhea as any).types.Reader;
  if (Reader.prototype[ARRAY_GUARD]) return;
  const readItems = Reader.prototype.read_array_items;
  Reader.prototype.read_array_items = function (n: number, type: any) {
    if (n > 65536 && n > this.buffer.length - this.position) {
      throw Object.assign(new ProtocolError(`malformed array: ${n} elements announced, ${this.buffer.length - this.position} bytes left`), { condition: 'amqp:decode-error' });
    }
    return readItems.call(this, n, type);
  };
  Reader.prototype[ARRAY_GUARD] = true;
}

function hardenSenderCredit(sender: any): void {
  const onFlow = sender.on_flow;
  sender.on_flow = function (frame: any) {
    const f = frame.performative;
    const num = (v: unknown, dflt: number) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.floor(v) : dflt);
    const ours = num(sender.delivery_count, 0);
    const theirs = num(f.delivery_count, ours);
    const linkCredit = num(f.link_credit, 0);
    // serial difference theirs - ours in [-2^31, 2^31)
    const diff = ((theirs - ours) % 0x100000000 + 0x100000000 + 0x80000000) % 0x100000000 - 0x80000000;
    // Hand rhea a frame whose arithmetic comes out to the right, non-negative credit.
    const credit = Math.max(0, Math.min(0xffffffff, diff + linkCredit));
    const fixed = Object.create(f, { delivery_count: { value: ours }, link_credit: { value: credit }, drain: { value: f.drain === true } });
    return onFlow.call(sender, { ...frame, performative: fixed });
  };
  // The drain's answer carries drain=true even when no credit was left to advance over (the
  // peer's credit was used by transfers that crossed its drain flow, or it drained with none):
  // rhea's own answer then left the flag off, and a rhea receiver waits for
  // `receiver_drained` on a flow with drain set. `_drained` is true here only once the
  // consumer said it has nothing more to send (set_drained), or, from rhea's on_flow, while
  // credit is left, as before.
  sender._get_drain = function () {
    if (this._draining && this._drained) {
      this.delivery_count = (num32(this.delivery_count) + num32(this.credit)) % 0x100000000;
      this.credit = 0;
      return true;
    }
    return false;
  };
}
const num32 = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);

/** Why a frame of `size` bytes is refused, or undefined: max-frame-size, or PRE_OPEN_MAX_FRAME before the peer's open. */
function frameTooLarge(size: number, maxFrame: number, preOpen: boolean): string | undefined {
  if (preOpen && size > Math.min(maxFrame, PRE_OPEN_MAX_FRAME)) {
    return `frame of ${size} bytes before open exceeds the ${Math.min(maxFrame, PRE_OPEN_MAX_FRAME)} bytes allowed until the connection is open (max-frame-size ${maxFrame} applies after it) [AMQP 2.4.1]`;
  }
  return size > maxFrame ? `frame of ${size} bytes exceeds max-frame-size ${maxFrame}` : undefined;
}

/** A connection's identity for `replace` and the ownership of temporary queues (rhea gives each connection its own). */
function connectionIdOf(conn: any): string { return conn.options?.id ?? String(conn.id ?? ''); }

export function isLoopback(addr: string | undefined): boolean {
  if (!addr) return false;
  return addr.startsWith('127.') || addr === '::1' || addr.startsWith('::ffff:127.');
}

export class AmqpServer {
  readonly #backend: ProtocolBackend;
  readonly #servers: Array<net.Server> = [];
  readonly #containers: any[] = [];
  readonly #connections = new Set<any>();
  /**
   * TLS sockets whose handshake has not finished, by remote address and port (#onTlsSocket):
   * they count against maxConnections like connections do. Node runs the listener's callback
   * only after the handshake, so until then nothing else knew of them.
   */
  readonly #handshakes = new Map<string, net.Socket>();
  /** Connections over maxConnections being told so (#accept). */
  #refusing = 0;
  #anonContainer: any;
  #strictContainer: any;
  /** AMQP local transactions: coordinator links, transactional transfers and acquisitions (transactions.ts). */
  readonly #tx = new Transactions();

  constructor(backend: ProtocolBackend) {
    this.#backend = backend;
    applyRheaPatches();
    applyRheaGuards();
    checkSaslServer();
    tuneRhea();
    guardArrayDecoding();
    installRawCapture();
    this.#anonContainer = this.#makeContainer(true);
    this.#strictContainer = this.#makeContainer(false);
  }

  #makeContainer(allowAnonymous: boolean): any {
    const c = (rhea as any).create_container({ id: 'tidemark' });
    if (allowAnonymous) c.sasl_server_mechanisms.enable_anonymous();
    // (Each connection's SASL server gets its own PLAIN check, with the connection: sasl-guard.ts.)
    c.sasl_server_mechanisms.enable_plain((user: unknown, pass: unknown) => this.#backend.authenticate(user, pass));
    // Tag PLAIN so #user trusts only its user name (security.md).
    const plain = c.sasl_server_mechanisms.PLAIN;
    c.sasl_server_mechanisms.PLAIN = () => Object.assign(plain(), { [NAMES_USER]: true });
    this.#wire(c);
    this.#containers.push(c);
    return c;
  }

  /** Starts the AMQP (and, when configured, AMQPS) listeners; resolves with their URLs. */
  async listen(): Promise<string[]> {
    const cfg = this.#backend.config;
    const urls: string[] = [];
    const tcp = net.createServer((s) => this.#accept(s));
    urls.push(await this.#start(tcp, cfg.listen.host, cfg.listen.port, 'amqp'));
    if (cfg.tls) {
      // The handshake is part of the time a connection has to open (#armOpenTimeout): Node's
      // default handshakeTimeout is 120 s, and on its expiry Node only emits tlsClientError.
      const openWithin = this.#openDeadlineMs();
      const t = tls.createServer({ ...tlsOptions(cfg.tls), ...(openWithin !== undefined ? { handshakeTimeout: openWithin } : {}) }, (s) => this.#accept(s, this.#handshakeDone(s)));
      t.on('connection', (raw: net.Socket) => this.#onTlsSocket(raw));
      // A failed or timed-out handshake: Node leaves a timed-out socket open unless told.
      t.on('tlsClientError', (err: Error, s: tls.TLSSocket) => {
        log.debug('TLS handshake failed', { remote: s.remoteAddress, err: err.message });
        s.destroy();
      });
      urls.push(await this.#start(t, cfg.tls.host ?? cfg.listen.host, cfg.tls.port, 'amqps'));
    }
    return urls;
  }

  /**
   * A TCP socket on the TLS listener, before its handshake: counted against maxConnections
   * from here (over the limit it is reset: it cannot be told why before the handshake), and
   * its open deadline starts now. 1000 sockets that never sent a ClientHello used to be held
   * for good, uncounted (session 24).
   */
  #onTlsSocket(raw: net.Socket): void {
    const max = this.#backend.config.limits.maxConnections;
    if (this.#connections.size + this.#handshakes.size >= max) {
      log.warn('connection refused: max connections reached', { remote: raw.remoteAddress, max, listener: 'amqps' });
      raw.destroy();
      return;
    }
    if (raw.remoteAddress === undefined) { raw.destroy(); return; } // already reset by the peer
    const key = `${raw.remoteAddress}|${raw.remotePort}`;
    (raw as any)[CONNECTED_AT] = performance.now();
    this.#handshakes.set(key, raw);
    raw.once('close', () => { if (this.#handshakes.get(key) === raw) this.#handshakes.delete(key); });
  }

  /** When the TCP connection under a TLS socket whose handshake just finished was made; it no longer counts as a handshake. */
  #handshakeDone(s: tls.TLSSocket): number | undefined {
    const key = `${s.remoteAddress}|${s.remotePort}`;
    const raw = this.#handshakes.get(key);
    if (!raw) return undefined;
    this.#handshakes.delete(key);
    return (raw as any)[CONNECTED_AT];
  }

  #start(server: net.Server, host: string, port: number, scheme: string): Promise<string> {
    this.#servers.push(server);
    return new Promise((resolve, reject) => {
      // Which listener and which setting: a bare "listen EADDRINUSE" did not say.
      const setting = scheme === 'amqps' ? 'tls.port' : '--port or listen.port';
      const onError = (err: NodeJS.ErrnoException) => reject(new Error(`${scheme.toUpperCase()} listener cannot bind ${host}:${port}: ${err.code === 'EADDRINUSE' ? 'the port is in use (another broker?)' : err.code ?? err.message}; choose another with ${setting}`, { cause: err }));
      server.once('error', onError);
      server.listen(port, host, () => {
        server.off('error', onError);
        server.on('error', (err) => log.error('listener error', { err }));
        const a = server.address() as net.AddressInfo;
        const h = a.family === 'IPv6' ? `[${a.address}]` : a.address;
        resolve(`${scheme}://${h}:${a.port}`);
      });
    });
  }

  /** `connectedAt`: when the TCP connection was made, if before now (a TLS handshake came first). */
  #accept(socket: net.Socket, connectedAt?: number): void {
    const cfg = this.#backend.config;
    socket.on('error', () => { /* reported through the connection */ });
    // Nagle's algorithm holds a small frame (a disposition, a flow) until the previous one is
    // ACKed; with the peer's delayed ACK that is a ~40 ms stall per round trip. AMQP brokers
    // (RabbitMQ, Qpid) all set TCP_NODELAY.
    socket.setNoDelay(true);
    // Over maxConnections, a client is told why (wire.md 1): it gets an open answered by a
    // close with resource-limit-exceeded, not a reset it cannot tell from a crash. Only a few
    // such refusals at a time; beyond them, and for peers that never open, the socket is reset.
    const overLimit = this.#connections.size + this.#handshakes.size >= cfg.limits.maxConnections;
    if (overLimit) {
      log.warn('connection refused: max connections reached', { remote: socket.remoteAddress, max: cfg.limits.maxConnections });
      if (this.#refusing >= MAX_REFUSALS_AT_ONCE) { socket.destroy(); return; }
    }
    const anon = cfg.auth.anonymous === true || (cfg.auth.anonymous === 'loopback' && isLoopback(socket.remoteAddress));
    const container = anon ? this.#anonContainer : this.#strictContainer;
    const opts = {
      container_id: 'tidemark',
      max_frame_size: cfg.limits.maxFrameSize,
      channel_max: cfg.limits.maxSessionsPerConnection - 1,
      idle_time_out: cfg.limits.idleTimeoutMs || undefined,
      properties: PRODUCT,
      offered_capabilities: ['ANONYMOUS-RELAY'],
      require_sasl: !anon,
      // modified is its own outcome: delivery-count +1 / undeliverable-here [AMQP 3.4.5]
      treat_modified_as_released: false,
      autoaccept: false,
      // Producer credit is ours alone (#topUp: senderCredit, held back while storage lags).
      // rhea's default credit_window (1000) added its own flow on attach and after every
      // message, whatever waited for storage, so credit never ran out.
      credit_window: 0,
    };
    try {
      const conn = new Connection(opts, container);
      this.#harden(conn, socket, !anon);
      if (overLimit) {
        // Only to be told so at its open (#harden): not counted, reset if it does not open soon.
        conn[OVER_LIMIT] = true;
        this.#refusing++;
        socket.once('close', () => { this.#refusing--; });
        setTimeout(() => socket.destroy(), REFUSAL_MS).unref();
      } else {
        this.#armOpenTimeout(conn, socket, connectedAt);
      }
      conn.accept(socket);
      this.#hardenTransports(conn);
      FrameWriter.install(conn, socket, rheaFrames);
      if (overLimit) return;
      this.#connections.add(conn);
      this.#backend.stats.connections = this.#connections.size;
      socket.once('close', () => { this.#connections.delete(conn); this.#backend.stats.connections = this.#connections.size; });
    } catch (err) {
      log.error('accept failed', { err });
      socket.destroy();
    }
  }

  /**
   * rhea arms its idle timer only once bytes arrive: a socket that connects and never sends
   * anything would be held forever. And a connection counts against maxConnections from its
   * first byte: peers that never authenticate could fill the broker and lock every login out.
   * So a connection must have authenticated and opened within limits.openTimeoutMs, and
   * within twice the idle time-out if that is sooner. On the TLS listener the time runs from
   * the TCP connect: the handshake is part of it.
   */
  #armOpenTimeout(conn: any, socket: net.Socket, connectedAt = performance.now()): void {
    const openWithin = this.#openDeadlineMs();
    if (openWithin === undefined) return;
    const left = Math.max(0, openWithin - (performance.now() - connectedAt));
    const silent = setTimeout(() => { if (!conn.state.remote_open) { log.info('closing a connection that did not authenticate and open in time', { remote: socket.remoteAddress, ms: openWithin }); socket.destroy(); } }, left);
    silent.unref();
    socket.once('close', () => clearTimeout(silent));
  }

  /** ms a connection has to authenticate and open (#armOpenTimeout), or undefined for no limit. */
  #openDeadlineMs(): number | undefined {
    const { openTimeoutMs, idleTimeoutMs } = this.#backend.config.limits;
    const ms = Math.min(...[openTimeoutMs, idleTimeoutMs * 2].filter((v) => v > 0));
    return Number.isFinite(ms) ? ms : undefined;
  }

  // ---- Hostile-input hardening (spec/integration/hostile-input.spec.ts, docs/robustness.md) ----
  // rhea 3.0.5 as a server ends the socket on a decode failure without telling the peer why,
  // buffers frames of any declared size (a 4 GiB size prefix is a memory sink), keeps a
  // connection open after a failed SASL outcome, accepts `begin` before `open` or on a
  // channel in use, and drops the connection on a transfer/flow for an unknown handle. These
  // per-connection wrappers (instance properties only; rhea's prototypes are not touched)
  // turn each of those into the condition wire.md 8 documents, then close.

  /** Installs the wrappers that must exist before `accept` binds the socket. */
  #harden(conn: any, socket: net.Socket, saslRequired: boolean): void {
    const maxFrame = this.#backend.config.limits.maxFrameSize;
    // lastFrameAt: when a read last completed a frame or a protocol header (#hardenTransports).
    const h = { failed: false, openSent: false, saslRequired, lastFrameAt: performance.now() };
    conn[HARDEN] = h;
    // 1. Oversized frames: a partial frame whose declared size exceeds max-frame-size is
    //    refused as soon as its size prefix arrives, not buffered to the end.
    const input = conn.input;
    const backend = this.#backend;
    conn.input = function (buff: Buffer) {
      if (h.failed) return; // a failed connection reads nothing more
      backend.onActivity?.(buff.length);
      const lastFrameAt = h.lastFrameAt;
      input.call(conn, buff);
      // The idle time-out runs from the last frame received [AMQP 2.4.5]. rhea stops its idle
      // timer on any bytes and restarts it only once the frame they belong to is complete, so
      // one byte of a never-ending frame held a connection for good. A read that completed no
      // frame keeps the deadline the last frame set.
      const idleMs = conn.local?.open?.idle_time_out;
      if (h.lastFrameAt === lastFrameAt && idleMs > 0 && !h.failed) {
        clearTimeout(conn.heartbeat_in);
        const silentFor = performance.now() - h.lastFrameAt;
        conn.heartbeat_in = setTimeout(conn.idle.bind(conn), Math.max(0, idleMs * 2 - silentFor));
      }
      // (Once the open is read the partial frame is not the open: max-frame-size applies.)
      const tooLarge = h.failed || conn.frame_size === undefined ? undefined : frameTooLarge(conn.frame_size, maxFrame, !conn.state.remote_open);
      if (tooLarge) {
        server.#protocolFailure(conn, 'amqp:connection:framing-error', tooLarge);
        try { socket.end(); } catch { /* gone */ }
      }
    };
    const server = this;
    const writeOpen = conn._write_open;
    conn._write_open = function () { h.openSent = true; return writeOpen.call(conn); };
    // 2. Decode failures: rhea dispatches protocol_error/error from its input loop and then
    //    ends the socket; first tell the peer (close with framing-error/decode-error, or our
    //    protocol header when theirs was wrong [AMQP 2.2]).
    conn.on('protocol_error', (err: any) => {
      log.warn('protocol error', { err: String(err?.message ?? err), remote: socket.remoteAddress });
      this.#protocolFailure(conn, err?.condition ?? 'amqp:connection:framing-error', String(err?.message ?? err));
    });
    conn.on('error', (err: any) => {
      // Only failures of the connection's own input/output land in saved_error; anything
      // else (link, session errors bubbling up) is logged as the container listener does.
      if (err !== undefined && err === conn.saved_error) {
        log.warn('undecodable input', { err: String(err?.message ?? err), remote: socket.remoteAddress });
        this.#protocolFailure(conn, 'amqp:decode-error', 'malformed frame: ' + describeUndecodable(err));
      } else {
        log.warn('link or connection error', { err: String(err?.message ?? err) });
      }
    });
    // 3. Performatives rhea accepts out of order or on a bad channel/handle.
    const onOpen = conn.on_open;
    conn.on_open = function (frame: any) {
      const p = frame.performative;
      const bad = (v: unknown, t: string) => v !== undefined && v !== null && typeof v !== t;
      if (typeof p.container_id !== 'string' || bad(p.max_frame_size, 'number') || bad(p.channel_max, 'number') || bad(p.idle_time_out, 'number') || (typeof p.max_frame_size === 'number' && p.max_frame_size < 512)) {
        throw Object.assign(new ProtocolError('open has fields of the wrong type or range'), { condition: 'amqp:decode-error' });
      }
      const idle = p.idle_time_out;
      if (typeof idle === 'number' && idle > 0 && idle < MIN_PEER_IDLE_TIMEOUT_MS) {
        throw Object.assign(new ProtocolError(
          `idle-time-out of ${idle} ms is below the ${MIN_PEER_IDLE_TIMEOUT_MS} ms this broker supports (it sends heartbeats at half the idle-time-out, at most every ${MIN_PEER_IDLE_TIMEOUT_MS / 2} ms): ` +
          `open with an idle-time-out of at least ${MIN_PEER_IDLE_TIMEOUT_MS} ms, or 0 for none [AMQP 2.4.5]`), { condition: 'amqp:not-allowed' });
      }
      if (typeof idle === 'number' && idle > MAX_PEER_IDLE_TIMEOUT_MS) {
        // rhea keeps the peer's open as remote.open: hand it one whose idle-time-out fits a timer.
        frame = { ...frame, performative: Object.create(p, { idle_time_out: { value: MAX_PEER_IDLE_TIMEOUT_MS } }) };
      }
      const r = onOpen.call(conn, frame);
      if (conn[OVER_LIMIT]) {
        const max = server.#backend.config.limits.maxConnections;
        conn.close({ condition: 'amqp:resource-limit-exceeded', description: `the broker has its maximum of ${max} connections (limits.maxConnections); try again later` });
        setImmediate(() => { try { socket.end(); } catch { /* gone */ } });
      }
      return r;
    };
    // A frame after the peer's own close is not one "before open": rhea, closing while our
    // detach of one of its links is on the way, answers that detach after its close. Nothing
    // is left to act on; answering the close with a framing error (as before) told a client
    // that closed cleanly that it had broken the protocol.
    const onClose = conn.on_close;
    conn.on_close = function (frame: any) { conn[PEER_CLOSED] = true; return onClose.call(conn, frame); };
    const onBegin = conn.on_begin;
    const channelMax = this.#backend.config.limits.maxSessionsPerConnection - 1;
    conn.on_begin = function (frame: any) {
      if (!conn.state.remote_open) { if (conn[PEER_CLOSED]) return; throw new ProtocolError('begin before open'); }
      if (conn[OVER_LIMIT]) return; // refused at its open: nothing it sends after is acted on
      if (frame.channel > channelMax) {
        // [AMQP 2.7.1] a channel beyond the channel-max we announced: framing-error.
        throw new ProtocolError(`begin on channel ${frame.channel}, beyond the channel-max of ${channelMax} (limits.maxSessionsPerConnection ${channelMax + 1})`);
      }
      const used = conn.remote_channel_map[frame.channel];
      if (used && used.state?.remote_open) throw new ProtocolError(`begin on channel ${frame.channel}, which is in use`);
      return onBegin.call(conn, frame);
    };
    for (const name of ['transfer', 'flow', 'detach', 'disposition', 'attach', 'end']) {
      const orig = conn['on_' + name];
      conn['on_' + name] = function (frame: any) {
        if (!conn.state.remote_open) { if (conn[PEER_CLOSED]) return; throw new ProtocolError(`${name} before open`); }
        if (conn[OVER_LIMIT]) return;
        const session = conn.remote_channel_map[frame.channel];
        const handle = frame.performative?.handle;
        if (session && (name === 'transfer' || name === 'detach' || (name === 'flow' && handle !== undefined && handle !== null))) {
          const link = typeof handle === 'number' ? session.remote.handles[handle] : undefined;
          // A link whose detach the peer sent is unattached from then on, though rhea frees its
          // handle only two ticks later (rhea-guards.ts 12): a flow or detach after it in the
          // same read is no less on an unattached handle. (A transfer gets its own description there.)
          if (!link || (name !== 'transfer' && link.state?.remote_open === false)) {
            // [AMQP 2.7.5/2.7.4] a frame for a handle that is not attached ends the session.
            if (session.state?.local_open) {
              session.end({ condition: 'amqp:session:unattached-handle', description: `${name} on unattached handle ${String(handle)}` });
            }
            return;
          }
        }
        if (session && session.state && !session.state.local_open && (name === 'transfer' || name === 'flow' || name === 'disposition')) return; // ended by us: ignore until the peer's end
        try {
          return orig.call(conn, frame);
        } catch (err) {
          // A rule broken with valid frames (rhea-guards.ts): end just the link or session.
          if (PeerError.is(err)) { server.#onPeerError(conn, err); return; }
          throw err;
        }
      };
    }
    // 4. A failed SASL outcome ends the connection [AMQP 5.3.2]: no retries on one socket.
    // (Frames leave through the connection's FrameWriter, one socket write per tick.)
    const output = conn.output;
    conn.output = function () {
      if (h.failed) return;
      output.call(conn);
      const srv = conn.sasl_transport?.transports?.[3] ?? conn.sasl_transport;
      if (srv?.outcome !== undefined && srv.outcome !== 0 && !h.failed) {
        h.failed = true;
        log.info('authentication failed; connection closed', { remote: socket.remoteAddress });
        try { socket.end(); } catch { /* gone */ }
        setTimeout(() => socket.destroy(), 1000).unref();
      }
    };
  }

  /** Frame-size checks on each frame of a read buffer (rhea's transports are per connection). */
  #hardenTransports(conn: any): void {
    const maxFrame = this.#backend.config.limits.maxFrameSize;
    const guard = (transport: any) => {
      if (!transport || transport[HARDEN]) return;
      transport[HARDEN] = true;
      const read = transport.read;
      transport.read = function (buffer: Buffer) {
        let off = transport.header_received ? 0 : 8;
        // SASL frames all come before the open; in the AMQP layer the first frame with a body
        // is the open (anything else is refused as "before open" when rhea reads it).
        let preOpen = transport !== conn.amqp_transport || !conn.state.remote_open;
        while (off + 4 <= buffer.length) {
          if (buffer.toString('latin1', off, off + 4) === 'AMQP') break; // next layer's header (after SASL)
          const size = buffer.readUInt32BE(off);
          if (size < 8) throw new ProtocolError(`frame size ${size} is smaller than the frame header`);
          const tooLarge = frameTooLarge(size, maxFrame, preOpen);
          if (tooLarge) {
            // A header in the same read is taken first, so the refusal is a close frame after
            // an open when it was AMQP's (#protocolFailure), not a bare protocol header.
            if (!transport.header_received) read.call(transport, buffer.subarray(0, 8));
            throw new ProtocolError(tooLarge);
          }
          if (preOpen && transport === conn.amqp_transport && off + 5 <= buffer.length && size > buffer[off + 4] * 4) preOpen = false;
          off += size;
        }
        const consumed = read.call(transport, buffer);
        if (consumed > 0) { const h = conn[HARDEN]; if (h) h.lastFrameAt = performance.now(); }
        return consumed;
      };
    };
    guard(conn.amqp_transport);
    const srv = conn.sasl_transport?.transports?.[3] ?? conn.sasl_transport;
    guard(srv?.transport);
    // One sasl-init, and no check left waiting for a connection that is gone (sasl-guard.ts).
    const gone = () => conn[HARDEN]?.failed === true || conn.socket?.destroyed === true;
    if (srv) guardSaslServer(srv, gone, (user, password, isGone) => this.#backend.authenticate(user, password, isGone));
  }

  /** Ends the endpoint a protocol violation names (rhea-guards.ts), with its condition; the rest carries on. */
  #onPeerError(conn: any, e: PeerError): void {
    const where = { condition: e.condition, description: e.message, remote: conn.socket?.remoteAddress, container: conn.remote?.open?.container_id };
    try {
      if (e.scope === 'link') {
        const link: any = e.endpoint;
        log.info('link detached: the client broke a protocol rule', { link: link?.name, ...where });
        if (link?.state?.local_open) link.close(e.amqpError);
      } else if (e.scope === 'session') {
        const session: any = e.endpoint;
        log.info('session ended: the client broke a protocol rule', where);
        if (session?.state?.local_open) session.end(e.amqpError);
      } else {
        log.warn('connection closed: the client broke a protocol rule', where);
        this.#protocolFailure(conn, e.condition, e.message);
      }
    } catch (err) {
      log.debug('could not end the endpoint after a protocol violation', { err: String(err) });
    }
  }

  /** Tells the peer why (header or close frame) and stops all further I/O on the connection. */
  #protocolFailure(conn: any, condition: string, description: string): void {
    const h = conn[HARDEN];
    if (!h || h.failed) return;
    h.failed = true;
    const socket = conn.socket;
    try {
      const sasl = conn.sasl_transport?.transports?.[3] ?? conn.sasl_transport;
      const amqpReady = conn.amqp_transport.header_received?.protocol_id === 0 && conn.amqp_transport.header_received?.major === 1;
      if (amqpReady) {
        // Open (if not yet sent) then close with the error [AMQP 2.4.5, 2.8.16].
        if (!h.openSent) { conn.state.open(); conn.state.need_open(); conn._write_open(); }
        conn.state.close_requests = 0;
        conn.local.close.error = { condition, description };
        conn.state.close();
        conn.state.close_requests = 0;
        conn.amqp_transport.encode(rheaFrames.amqp_frame(0, conn.local.close));
        conn.amqp_transport.write(socket);
      } else if (!sasl?.transport?.header_sent && !conn.amqp_transport.header_sent) {
        // A wrong protocol header (or garbage in the SASL layer): answer with the header we
        // support for that layer, then close [AMQP 2.2].
        const saslLayer = h.saslRequired || conn.sasl_transport?.header_received?.protocol_id === 3 || sasl?.transport?.header_received?.protocol_id === 3;
        socket.write(Buffer.from(saslLayer ? 'AMQP\x03\x01\x00\x00' : 'AMQP\x00\x01\x00\x00', 'latin1'));
      }
    } catch (err) {
      log.debug('could not write close after protocol failure', { err: String(err) });
    }
    conn.output = () => { /* nothing more after a protocol failure */ };
    FrameWriter.of(conn)?.seal();
    setTimeout(() => { try { socket.destroy(); } catch { /* gone */ } }, 1000).unref();
  }

  #wire(c: any): void {
    c.on('connection_open', (ctx: any) => this.#guard(ctx, () => {
      log.info('connection open', { container: ctx.connection.remote?.open?.container_id, user: this.#user(ctx) });
    }));
    c.on('connection_close', (ctx: any) => {
      log.info('connection close', { container: ctx.connection.remote?.open?.container_id });
      later(() => this.#closeConnection(ctx.connection));
    });
    c.on('receiver_open', (ctx: any) => this.#guard(ctx, () => this.#onReceiverOpen(ctx)));
    c.on('sender_open', (ctx: any) => this.#guard(ctx, () => this.#onSenderOpen(ctx)));
    c.on('message', (ctx: any) => this.#guard(ctx, () => this.#onMessage(ctx)));
    // An aborted delivery [AMQP 2.6.14] used a credit and is gone (rhea-guards.ts): top up.
    c.on(DELIVERY_ABORTED, (ctx: any) => this.#guard(ctx, () => {
      const receiver = ctx.receiver;
      if (!receiver || this.#tx.isCoordinatorLink(receiver)) return;
      const st = this.#state(receiver);
      if (st) this.#topUp(receiver, st);
    }));
    // Until our attach reply is written, credit waits: rhea writes a session's transfers
    // before pending attaches, and a transfer ahead of its attach is an unknown handle to the peer.
    // Credit is acted on once the rest of the socket read is processed: Proton writes a flow
    // before the disposition that releases the message it had, and answering the flow at once
    // sent the next message ahead of the released one (FIFO, acceptance A4).
    const credit = (ctx: any) => queueMicrotask(() => this.#guard(ctx, () => { const st = this.#state(ctx.sender); if (st?.ready) st.consumer?.onCredit(); }));
    c.on('sendable', credit);
    c.on('sender_flow', credit);
    c.on('sender_draining', (ctx: any) => this.#guard(ctx, () => {
      const st = this.#state(ctx.sender);
      if (st && !st.ready) { setImmediate(() => this.#guard(ctx, () => { if (this.#state(ctx.sender)) { st.sink?.drainRequested(); st.consumer?.onDrain(); } })); return; }
      // A drain that finds no credit left (the peer's was used by transfers that crossed its
      // flow) is complete as it arrives: answered with drain set, whatever the consumer has.
      // (A SOW consumer waited for credit to judge the drain: the receiver waited for good.)
      if (st?.consumer && st.sink && !(ctx.sender.credit > 0)) { st.sink.drainRequested(); st.sink.drained(); return; }
      if (st?.consumer) { st.sink?.drainRequested(); st.consumer.onDrain(); } else { ctx.sender.set_drained(true); ctx.connection._register?.(); }
    }));
    // transactions: an outcome held by a transaction is applied at its discharge, not here.
    for (const t of ['accepted', 'released', 'rejected', 'modified'] as const) c.on(t, (ctx: any) => this.#guard(ctx, () => { if (!this.#tx.holds(ctx.delivery)) deliverOutcome(ctx.delivery, t); }));
    c.on('settled', (ctx: any) => this.#guard(ctx, () => {
      if (!ctx.sender) return;
      if (!this.#tx.holds(ctx.delivery)) deliverOutcome(ctx.delivery, 'settled');
      // A settlement frees the session window: resume a link that stalled on it.
      const st = this.#state(ctx.sender);
      if (st?.sink?.blocked && st.ready) setImmediate(() => st.consumer?.onCredit());
    }));
    // transactions: transactional acquisition (disposition transactional-state{txn-id, outcome}); rhea-patches.ts patch 3 names the event.
    c.on('transactional_state', (ctx: any) => this.#guard(ctx, () => { if (ctx.sender) this.#tx.onOutgoingState(ctx.sender, ctx.delivery); }));
    // rhea dispatches disposition events on its next processing tick, after a detach or close
    // that arrived in the same read; defer so outcomes settle before unsettled are released.
    const later = (fn: () => void) => setImmediate(fn);
    const closeLink = (ctx: any) => later(() => this.#closeLink(ctx.sender ?? ctx.receiver));
    c.on('sender_close', closeLink);
    c.on('receiver_close', closeLink);
    c.on('sender_error', closeLink);
    c.on('receiver_error', closeLink);
    c.on('session_close', (ctx: any) => later(() => this.#closeSession(ctx.session)));
    c.on('session_error', (ctx: any) => later(() => this.#closeSession(ctx.session)));
    c.on('connection_error', (ctx: any) => log.info('connection error', { error: ctx.connection?.error }));
    c.on('disconnected', (ctx: any) => later(() => this.#closeConnection(ctx.connection)));
    c.on('protocol_error', (err: any) => log.warn('protocol error', { err: String(err) }));
    c.on('error', (err: any) => log.warn('link or connection error', { err: String(err?.message ?? err) }));
  }

  /** Runs a handler; anything thrown becomes an AMQP error on the right endpoint, never a crash. */
  #guard(ctx: any, fn: () => void): void {
    try { fn(); }
    catch (err) {
      const e = toAmqpError(err);
      if (!(err instanceof TidemarkError)) log.error('handler failed', { err });
      const link = ctx.sender ?? ctx.receiver;
      try {
        if (link) link.close(e);
        else ctx.connection?.close(e);
      } catch { /* gone */ }
    }
  }

  /**
   * The authenticated user: the PLAIN user name after a successful outcome, else `anonymous`.
   * rhea's ANONYMOUS server takes the client's initial response (free trace text, e.g. a
   * user name the client picked) as `username`; trusting it would let anyone claim any
   * identity to the ACL. The SASL server sits under rhea's Selective transport when
   * ANONYMOUS is allowed.
   */
  #user(ctx: any): string {
    const t = ctx.connection?.sasl_transport;
    const srv = t?.transports?.[3] ?? t;
    const mech = srv?.mechanism;
    return mech?.[NAMES_USER] && srv.outcome === 0 && typeof mech.username === 'string' ? mech.username : 'anonymous';
  }

  #state(link: any): LinkState | undefined { return link?.[STATE]; }

  #linkState(link: any): LinkState {
    let st: LinkState | undefined = link[STATE];
    if (!st) {
      st = link[STATE] = { onClose: [], outstanding: 0, credit: 0 };
      const conn = link.connection ?? link.session?.connection;
      if (conn) (conn[LINKS] ??= new Set<any>()).add(link);
    }
    return st!;
  }

  #checkLinkLimit(link: any): void {
    const n = Object.keys(link.session?.links ?? {}).length;
    if (n > this.#backend.config.limits.maxLinksPerSession) {
      throw new TidemarkError(Conditions.resourceLimit, `too many links on this session (max ${this.#backend.config.limits.maxLinksPerSession})`);
    }
  }

  /** Refuse an attach: null terminus in the reply, then detach with the error [AMQP 2.6.3]. */
  #refuse(link: any, which: 'source' | 'target', err: unknown): void {
    link.local.attach[which] = null;
    const e = toAmqpError(err);
    if (!(err instanceof TidemarkError)) log.error('attach failed', { err });
    log.info('attach refused', { link: link.name, condition: e.condition, description: e.description });
    link.close(e);
  }

  /** A client sender attached: we receive. */
  #onReceiverOpen(ctx: any): void {
    const receiver = ctx.receiver;
    // wire.md 1: the max-message-size is announced on every attach reply.
    receiver.local.attach.max_message_size = this.#backend.config.limits.maxMessageSize;
    let target = receiver.remote.attach?.target;
    const st = this.#linkState(receiver);
    this.#backend.stats.links++;
    st.onClose.push(() => this.#backend.stats.links--);
    // transactions: a coordinator target [AMQP 4.2] (decoded by rhea-patches.ts patch 3) is a
    // transaction controller; transactions.ts answers its declare/discharge.
    if (Transactions.isCoordinatorTarget(target)) {
      try { this.#checkLinkLimit(receiver); } catch (err) { this.#refuse(receiver, 'target', err); return; }
      this.#tx.attachCoordinator(receiver, (fn) => st.onClose.push(fn));
      return;
    }
    // No target: rhea leaves an absent (or unknown) terminus as a typed null.
    const noTarget = target !== null && target !== undefined && typeof target === 'object' && target.address === undefined && (target as any).value === null;
    if (target === null || target === undefined || noTarget) {
      receiver.local.attach.target = null;
      receiver.close({ condition: Conditions.notImplemented, description: 'attach has no target' });
      return;
    }
    try {
      this.#checkLinkLimit(receiver);
      target = expandQpidAddress(target, 'sender', (n) => this.#backend.hasNode(n));
      const address: string | undefined = target.address ?? undefined;
      if (target.dynamic) {
        const q = this.#backend.createDynamicNode(nodeProperties(target), this.#user(ctx), connectionIdOf(ctx.connection), (fn) => st.onClose.push(fn));
        st.queue = q;
        receiver.set_target({ address: q.name, dynamic: true });
      } else if (address) {
        if (this.#backend.serviceAddress(address)) {
          st.service = address;
          receiver.set_target({ address });
        } else {
          const caps = capabilities(target);
          const q = this.#backend.resolveNode(address, { createOnDemand: caps.includes('create-on-demand'), properties: nodeProperties(target), role: 'receiver', user: this.#user(ctx) });
          st.queue = q;
          receiver.set_target({ address: target.qpidAddress ?? address, capabilities: heldCapabilities(caps, q), durable: target.durable });
        }
      } else {
        receiver.set_target({}); // anonymous relay: routed per message by properties.to
      }
    } catch (err) {
      this.#refuse(receiver, 'target', err);
      return;
    }
    // Our own credit management: top up by half-window as messages are settled, never one at a time.
    st.credit = this.#backend.config.limits.senderCredit;
    receiver.flow(st.credit);
  }

  #onMessage(ctx: any): void {
    const receiver = ctx.receiver;
    const delivery = ctx.delivery;
    if (!receiver) return; // only receiving links get messages (rhea-guards.ts refuses the rest)
    // transactions: unsettled transactional transfers must not close the session's incoming window.
    this.#tx.relieve(receiver.session);
    // transactions: declare/discharge on a coordinator link (transactions.ts keeps its credit).
    if (this.#tx.isCoordinatorLink(receiver)) { this.#tx.onControl(receiver, delivery, ctx.message); return; }
    if (this.#stopping) {
      // Shutting down: not stored, so not accepted; released, the producer may send it again.
      if (!delivery.remote_settled) delivery.release();
      this.#lastReleasedAt = performance.now();
      return;
    }
    const st = this.#linkState(receiver);
    const bytes = rawBytes(ctx.message);
    const size = bytes?.length ?? 0;
    const settle = (err?: TidemarkError) => {
      st.outstanding--;
      st.outstandingBytes = (st.outstandingBytes ?? 0) - size;
      if (!delivery.remote_settled) {
        if (err) delivery.reject({ condition: err.condition, description: err.message, info: amqpInfo(err.info) });
        else delivery.accept();
      } else if (err) {
        log.warn('pre-settled message not stored', { err: err.message });
      }
      this.#topUp(receiver, st);
    };
    st.outstanding++;
    st.outstandingBytes = (st.outstandingBytes ?? 0) + size;
    this.#topUp(receiver, st); // credit is replenished as it is used, not only as messages settle
    if (!bytes) { settle(new TidemarkError(Conditions.decodeError, 'message could not be decoded')); return; }
    if (bytes.length > this.#backend.config.limits.maxMessageSize) {
      settle(new TidemarkError(Conditions.resourceLimit, `message of ${bytes.length} bytes exceeds max-message-size ${this.#backend.config.limits.maxMessageSize}`));
      return;
    }
    // A map with a dangling key [AMQP 1.6.23]: rhea dropped the item, and the stored bytes
    // broke every later delivery (message-bytes.ts oddMapSection).
    const odd = oddMapSection(bytes);
    if (odd) {
      settle(new TidemarkError(Conditions.decodeError, `the ${odd.section} section is a map with an odd number of items (${odd.count}): a map holds key-value pairs [AMQP 1.6.23]; nothing was stored`));
      return;
    }
    const msg: InboundMessage = { bytes, message: ctx.message, receivedAt: Date.now(), attrs: {} };
    let q = st.queue;
    if (q?.deleted) {
      // Its queue was deleted under it: refuse this one and end the link (consumers were
      // detached at the delete), rather than reject every later message on a live link.
      const gone = new TidemarkError(Conditions.resourceDeleted, `queue ${q.name} was deleted`);
      settle(gone);
      receiver.close({ condition: gone.condition, description: `${gone.message}; attach again to use a new one` });
      return;
    }
    if (!q) {
      // A link's target decides where its messages go; only the anonymous relay (no target
      // address) routes each by properties.to [AMQP 3.5.4; ANONYMOUS-RELAY]. A $management
      // request carrying to: "orders" was stored in orders.
      const to: string | undefined = st.service ?? ctx.message.to ?? undefined;
      const service = to ? this.#backend.serviceAddress(to) : undefined;
      if (service) { service(msg, this.#user(ctx), settle); return; }
      if (!to) { settle(new TidemarkError(Conditions.notFound, 'anonymous relay: message has no properties.to')); return; }
      try { q = this.#backend.resolveNode(to, { createOnDemand: false, properties: {}, role: 'receiver', user: this.#user(ctx) }); }
      catch (err) { settle(err instanceof TidemarkError ? err : new TidemarkError(Conditions.internal, String(err))); return; }
    }
    // transactions: a transactional transfer [AMQP 4.4.1] is buffered in its transaction and
    // stored and settled at discharge (or rejected now); its credit comes back at once.
    if (this.#tx.transactional(delivery)) { this.#tx.enlist(delivery, q, msg); st.outstanding--; st.outstandingBytes = (st.outstandingBytes ?? 0) - size; this.#topUp(receiver, st); return; }
    this.#backend.publish(q, msg, settle);
  }

  #topUp(receiver: any, st: LinkState): void {
    // wire.md 1: top the credit back up once half of it is used, never one message at a
    // time. Messages still being stored do not hold credit back (so a producer can fill the
    // next group commit while one is written), up to 4 windows of them: then the producer
    // waits for storage, which bounds what a fast producer can pile up in memory.
    const window = st.credit;
    const avail = receiver.credit as number;
    if (avail <= window / 2 && st.outstanding < 4 * window && (st.outstandingBytes ?? 0) < MAX_PENDING_BYTES && receiver.is_open()) receiver.flow(window - avail);
  }

  /** A client receiver attached: we send. */
  #onSenderOpen(ctx: any): void {
    const sender = ctx.sender;
    sender.local.attach.max_message_size = this.#backend.config.limits.maxMessageSize;
    hardenSenderCredit(sender);
    // Nothing of this link is sent after its detach (sender-detach.ts).
    dropUnwrittenOnDetach(sender);
    let source = sender.remote.attach?.source;
    const st = this.#linkState(sender);
    this.#backend.stats.links++;
    st.onClose.push(() => this.#backend.stats.links--);
    let q: Queue;
    const echoed: Record<string, unknown> = {};
    let req: ConsumerRequest;
    try {
      this.#checkLinkLimit(sender);
      if (!source) throw new TidemarkError(Conditions.invalidField, 'attach has no source');
      source = expandQpidAddress(source, 'receiver', (n) => this.#backend.hasNode(n));
      let address: string | undefined = source.address ?? undefined;
      if (source.dynamic) {
        q = this.#backend.createDynamicNode(nodeProperties(source), this.#user(ctx), connectionIdOf(ctx.connection), (fn) => st.onClose.push(fn));
        address = q.name;
      } else {
        if (!address) throw new TidemarkError(Conditions.invalidField, 'receiver source has no address');
        const caps = capabilities(source);
        q = this.#backend.resolveNode(address, { createOnDemand: caps.includes('create-on-demand'), properties: nodeProperties(source), role: 'sender', user: this.#user(ctx) });
      }
      // A filter set is a map [AMQP 3.5.8]; a list or scalar is a bad filter (wire.md 8).
      if (source.filter !== undefined && source.filter !== null && (typeof source.filter !== 'object' || Array.isArray(source.filter) || Buffer.isBuffer(source.filter))) {
        throw new TidemarkError(Conditions.invalidField, 'source filter must be a map of filters');
      }
      const parsed = new Map<string, ParsedFilter>();
      const filterTexts = new Map<string, string>();
      const predicates = [];
      let annotate = false;
      for (const f of sourceFilters(source)) {
        const r = this.#backend.parseFilter(f.descriptor, f.value, q);
        if (!r) continue; // unknown filters are not applied and not echoed [AMQP 3.5.1]
        // Only one of each kind applies; echoing two and applying the last would claim a
        // filter the broker does not apply (wire.md 4).
        if (parsed.has(r.symbol)) throw new TidemarkError(Conditions.invalidField, `source filter: two ${r.symbol} filters (the second under key ${JSON.stringify(f.key)}); give each kind of filter once`);
        parsed.set(r.symbol, r.parsed);
        filterTexts.set(r.symbol, filterText(f.value));
        if (r.parsed.predicate) predicates.push(r.parsed.predicate);
        if (r.symbol.startsWith('tidemark:')) annotate = true;
        // Defined, not assigned: a filter keyed __proto__ is applied, so it is echoed (wire.md 4).
        Object.defineProperty(echoed, f.key, { value: f.raw, enumerable: true, writable: true, configurable: true });
      }
      const wantsCopy = source.distribution_mode === 'copy';
      const mode: 'move' | 'copy' = wantsCopy || q.browseOnly ? 'copy' : 'move';
      req = {
        mode, filters: parsed, predicates, annotate,
        linkName: sender.name, containerId: ctx.connection.remote?.open?.container_id ?? '', connectionId: connectionIdOf(ctx.connection),
        durable: source.durable === 2 && String(source.expiry_policy) === 'never',
        user: this.#user(ctx), filterTexts,
      };
      // ACL before the reply: may refuse, or answer move with copy (browse-only by ACL).
      this.#backend.authorizeConsumer?.(q, req);
      const caps = heldCapabilities(capabilities(source), q);
      sender.set_source({
        address: source.dynamic ? address : source.qpidAddress ?? address, dynamic: source.dynamic || undefined, distribution_mode: req.mode,
        filter: Object.keys(echoed).length ? echoed : undefined, capabilities: caps.length ? caps : undefined,
        durable: source.durable, expiry_policy: source.expiry_policy,
      });
    } catch (err) {
      this.#refuse(sender, 'source', err);
      return;
    }
    const limits = this.#backend.config.limits;
    const sink = new RheaSink(sender, `${req.containerId}/${req.linkName}`, limits.maxUnsettledPerLink, limits.maxPendingBytesPerConnection);
    st.sink = sink;
    sink.onUnblocked = () => { if (st.ready) st.consumer?.onCredit(); };
    const whenStored = this.#backend.whenStored?.bind(this.#backend);
    if (whenStored) sink.whenStored = whenStored;
    st.queue = q;
    try {
      st.consumer = this.#backend.openConsumer(q, req, sink);
    } catch (err) {
      this.#refuse(sender, 'source', err);
      return;
    }
    setImmediate(() => { st.ready = true; this.#guard(ctx, () => st.consumer?.onCredit()); });
    log.info('link attached', { queue: q.name, link: sender.name, mode: req.mode, filters: [...req.filters.keys()] });
  }

  #closeLink(link: any): void {
    const st = this.#state(link);
    if (!st) return;
    link[STATE] = undefined;
    (link.connection ?? link.session?.connection)?.[LINKS]?.delete(link);
    const linkClosed = link.remote?.detach?.closed === true;
    const close = () => {
      // detach with closed=true ends a durable subscription; a plain detach or a lost connection keeps it [AMQP 2.6.6]
      try { st.consumer?.close({ linkClosed }); } catch (err) { log.error('consumer close failed', { err }); }
      // Released by the core now: the session stops waiting for the peer to settle them (sender-detach.ts).
      if (st.sink) forgetUnsettled(link);
      for (const fn of st.onClose) { try { fn(); } catch (err) { log.error('link close hook failed', { err }); } }
    };
    // transactions: a transaction being discharged that holds outcomes for this link's
    // deliveries applies them first; closed before, the consumer would release them.
    if (st.sink) this.#tx.whenSettled(link, close); else close();
  }

  #closeSession(session: any): void {
    for (const l of Object.values<any>(session?.links ?? {})) this.#closeLink(l);
    const mine = session?.connection?.[LINKS] as Set<any> | undefined;
    if (mine) for (const l of [...mine]) if (l.session === session) this.#closeLink(l);
  }

  #closeConnection(conn: any): void {
    const sessions = new Set<any>([...Object.values<any>(conn?.local_channel_map ?? {}), ...Object.values<any>(conn?.remote_channel_map ?? {})]);
    for (const s of sessions) this.#closeSession(s);
    const mine = conn?.[LINKS] as Set<any> | undefined;
    if (mine) for (const l of [...mine]) this.#closeLink(l);
    this.#connections.delete(conn);
    this.#backend.stats.connections = this.#connections.size;
  }

  /**
   * First step of a shutdown (tools.md "SIGINT/SIGTERM"): no new connections, and a message
   * that arrives from now on is released (not stored: the producer may send it again
   * elsewhere or later). Messages already being stored are settled when their batch is
   * written, which the broker awaits before close().
   */
  quiesce(): void {
    this.#stopping = true;
    for (const s of this.#servers) s.close();
  }
  #stopping = false;
  #lastReleasedAt = 0;

  /**
   * After quiesce(): lets messages already on their way arrive and be released before the
   * connections close, until none has come for `quietMs` (at most `maxMs`). A message still
   * in flight when its connection closes gets no outcome at all (the producer must treat it
   * as unsettled); released, it knows at once.
   */
  async releaseInFlight(quietMs = 50, maxMs = 500): Promise<void> {
    const start = performance.now();
    this.#lastReleasedAt = Math.max(this.#lastReleasedAt, start);
    while (this.#connections.size > 0) {
      const now = performance.now();
      if (now - this.#lastReleasedAt >= quietMs || now - start >= maxMs) return;
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /**
   * Closes every connection with `amqp:connection:forced` [AMQP 2.8.15], so a client knows
   * the broker went away on purpose, and gives the peers a moment to answer before the
   * sockets are destroyed. Links stay as they are until then: a consumer's accept that was
   * on its way still removes its message (the broker flushes it after this); only what is
   * unsettled when the connection is gone goes back.
   */
  async close(): Promise<void> {
    this.quiesce();
    const closed: Array<Promise<unknown>> = [];
    for (const c of [...this.#connections]) {
      try {
        const socket = c.socket;
        if (socket && !socket.destroyed) closed.push(new Promise((r) => socket.once('close', r)));
        c.close({ condition: 'amqp:connection:forced', description: 'the broker is shutting down' });
        // The close frame leaves with the connection's next write (FrameWriter, end of tick): end after it.
        setImmediate(() => { try { socket?.end?.(); } catch { /* gone */ } });
      } catch { /* already gone */ }
    }
    for (const raw of this.#handshakes.values()) raw.destroy();
    await Promise.race([Promise.all(closed), new Promise((r) => setTimeout(r, 500).unref())]);
    for (const c of [...this.#connections]) {
      try { this.#closeConnection(c); } catch { /* already gone */ }
      try { c.socket?.destroy?.(); } catch { /* gone */ }
    }
  }
}
