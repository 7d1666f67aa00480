/**
 * Hand-built AMQP 1.0 frames for hostile-input and fuzz tests, on rhea's type codec
 * (`rhea.types.Writer` / `Reader`), plus a parser for what the broker sends back and a raw
 * socket client that records it. Nothing here validates: it encodes whatever it is given.
 *
 * Frame layout [AMQP 2.3.1]: size(4) doff(1) type(1) channel(2) [extended header] body.
 * A performative is a described list: descriptor ulong code, value list of fields.
 */
import net from 'node:net';
import rhea from 'rhea';

const types: any = (rhea as any).types;

export const AMQP_HEADER = Buffer.from('AMQP\x00\x01\x00\x00', 'latin1');
export const SASL_HEADER = Buffer.from('AMQP\x03\x01\x00\x00', 'latin1');

/** Performative and SASL frame descriptor codes [AMQP 2.7, 5.3.3]. */
export const Code = {
  open: 0x10, begin: 0x11, attach: 0x12, flow: 0x13, transfer: 0x14, disposition: 0x15, detach: 0x16, end: 0x17, close: 0x18,
  error: 0x1d, source: 0x28, target: 0x29, accepted: 0x24,
  saslMechanisms: 0x40, saslInit: 0x41, saslChallenge: 0x42, saslResponse: 0x43, saslOutcome: 0x44,
} as const;
export const NAMES: Record<number, string> = Object.fromEntries(Object.entries(Code).map(([k, v]) => [v, k]));

/** Typed-value shorthands (rhea typed values pass through `types.wrap` unchanged). */
export const t = {
  null: () => types.Null(),
  bool: (v: boolean) => types.wrap_boolean(v),
  uint: (v: number) => types.wrap_uint(v),
  ulong: (v: number) => types.wrap_ulong(v),
  ushort: (v: number) => types.wrap_ushort(v),
  ubyte: (v: number) => types.wrap_ubyte(v),
  int: (v: number) => types.wrap_int(v),
  long: (v: number) => types.wrap_long(v),
  str: (v: string) => types.wrap_string(v),
  sym: (v: string) => types.wrap_symbol(v),
  bin: (v: Buffer) => types.wrap_binary(v),
  list: (v: unknown[]) => types.wrap_list(v),
  map: (v: Record<string, unknown>) => types.wrap_map(v),
  symMap: (v: Record<string, unknown>) => types.wrap_symbolic_map(v),
  symArray: (v: string[]) => types.wrap_array(v.map((s) => Buffer.from(s)), 0xb3),
  described: (code: number | string, value: unknown) => types.described(typeof code === 'string' ? types.wrap_symbol(code) : types.wrap_ulong(code), types.wrap(value)),
};

/** Encodes one typed value (or a plain JS value, wrapped). */
export function encodeValue(v: unknown): Buffer {
  const w = new types.Writer();
  w.write(types.wrap(v));
  return w.toBuffer();
}

/** A described list: the body of a performative. Fields are typed values or plain JS values. */
export function performative(code: number | string, fields: unknown[]): Buffer {
  return encodeValue(t.described(code, fields.map((f) => (f === undefined ? null : f))));
}

export interface FrameOpts { type?: number; channel?: number; doff?: number; size?: number; payload?: Buffer }

/** A whole frame around `body` (performative bytes); `size`/`doff` may be forced to lie. */
export function frame(body: Buffer, opts: FrameOpts = {}): Buffer {
  const doff = opts.doff ?? 2;
  const ext = Buffer.alloc(Math.max(0, doff * 4 - 8));
  const head = Buffer.alloc(8);
  const payload = opts.payload ?? Buffer.alloc(0);
  const total = 8 + ext.length + body.length + payload.length;
  head.writeUInt32BE(opts.size ?? total, 0);
  head.writeUInt8(doff & 0xff, 4);
  head.writeUInt8(opts.type ?? 0, 5);
  head.writeUInt16BE(opts.channel ?? 0, 6);
  return Buffer.concat([head, ext, body, payload]);
}

/** An AMQP frame on `channel` carrying one performative. */
export const amqp = (code: number | string, fields: unknown[], channel = 0, payload?: Buffer) => frame(performative(code, fields), { channel, payload });
/** A SASL frame (type 1). */
export const sasl = (code: number, fields: unknown[]) => frame(performative(code, fields), { type: 1 });
/** An empty frame (heartbeat). */
export const heartbeat = () => frame(Buffer.alloc(0));

// ---- performatives with sane defaults -------------------------------------------------

export function open(o: { containerId?: unknown; maxFrameSize?: unknown; channelMax?: unknown; idleTimeOut?: unknown } = {}): Buffer {
  return amqp(Code.open, [o.containerId ?? t.str('raw-' + Math.random().toString(36).slice(2)), null, o.maxFrameSize ?? t.uint(65536), o.channelMax ?? t.ushort(255), o.idleTimeOut ?? null]);
}
export function begin(channel = 0, o: { remoteChannel?: unknown; nextOutgoingId?: unknown; incomingWindow?: unknown; outgoingWindow?: unknown; handleMax?: unknown } = {}): Buffer {
  return amqp(Code.begin, [o.remoteChannel ?? null, o.nextOutgoingId ?? t.uint(0), o.incomingWindow ?? t.uint(2048), o.outgoingWindow ?? t.uint(2048), o.handleMax ?? null], channel);
}
/** A source terminus [AMQP 3.5.3]: address, durable, expiry, timeout, dynamic, props, dist-mode, filter, default-outcome, outcomes, capabilities. */
export function source(o: { address?: unknown; dynamicNodeProperties?: unknown; distributionMode?: unknown; filter?: unknown; capabilities?: unknown; dynamic?: unknown } = {}): any {
  return t.described(Code.source, [o.address ?? null, null, null, null, o.dynamic ?? null, o.dynamicNodeProperties ?? null, o.distributionMode ?? null, o.filter ?? null, null, null, o.capabilities ?? null]);
}
/** A target terminus [AMQP 3.5.4]: address, durable, expiry, timeout, dynamic, props, capabilities. */
export function target(o: { address?: unknown; dynamicNodeProperties?: unknown; capabilities?: unknown; dynamic?: unknown } = {}): any {
  return t.described(Code.target, [o.address ?? null, null, null, null, o.dynamic ?? null, o.dynamicNodeProperties ?? null, o.capabilities ?? null]);
}
/** role false = we send (broker receives), true = we receive. */
export function attach(o: { name?: unknown; handle?: unknown; role?: unknown; source?: unknown; target?: unknown; sndSettleMode?: unknown; initialDeliveryCount?: unknown; channel?: number } = {}): Buffer {
  return amqp(Code.attach, [
    o.name ?? t.str('link-' + Math.random().toString(36).slice(2)), o.handle ?? t.uint(0), o.role ?? t.bool(false), o.sndSettleMode ?? null, null,
    o.source === undefined ? source() : o.source, o.target === undefined ? target({ address: t.str('raw.q') }) : o.target,
    null, null, o.initialDeliveryCount ?? t.uint(0),
  ], o.channel ?? 0);
}
export function flow(o: { nextIncomingId?: unknown; incomingWindow?: unknown; nextOutgoingId?: unknown; outgoingWindow?: unknown; handle?: unknown; deliveryCount?: unknown; linkCredit?: unknown; drain?: unknown; echo?: unknown; channel?: number } = {}): Buffer {
  return amqp(Code.flow, [
    o.nextIncomingId ?? t.uint(0), o.incomingWindow ?? t.uint(2048), o.nextOutgoingId ?? t.uint(0), o.outgoingWindow ?? t.uint(2048),
    o.handle ?? null, o.deliveryCount ?? null, o.linkCredit ?? null, null, o.drain ?? null, o.echo ?? null,
  ], o.channel ?? 0);
}
/** A message body: one amqp-value section holding `v`. */
export function amqpValueMessage(v: unknown): Buffer {
  return encodeValue(t.described(0x77, v));
}
export function transfer(o: { handle?: unknown; deliveryId?: unknown; tag?: unknown; settled?: unknown; more?: unknown; channel?: number; payload?: Buffer } = {}): Buffer {
  return amqp(Code.transfer, [o.handle ?? t.uint(0), o.deliveryId ?? t.uint(0), o.tag ?? t.bin(Buffer.from([0])), t.uint(0), o.settled ?? t.bool(false), o.more ?? null],
    o.channel ?? 0, o.payload ?? amqpValueMessage('hello'));
}
export const detach = (handle = 0, closed = true, channel = 0) => amqp(Code.detach, [t.uint(handle), t.bool(closed)], channel);
export const end = (channel = 0) => amqp(Code.end, [], channel);
export const close = () => amqp(Code.close, []);
export const saslInit = (mechanism: string, response?: Buffer) => sasl(Code.saslInit, [t.sym(mechanism), response ? t.bin(response) : null]);
export const plainResponse = (user: string, pass: string) => Buffer.from(`\0${user}\0${pass}`);

// ---- parsing what comes back ----------------------------------------------------------

export interface AmqpErrorInfo { condition?: string; description?: string }
export interface ParsedFrame {
  type: number;
  channel: number;
  /** performative name (`open`, `close`, `saslOutcome`...) or `empty` or `0x..` for unknown */
  name: string;
  /** field values, unwrapped to plain JS where possible */
  fields: unknown[];
  /** the error field of close/end/detach, if any */
  error?: AmqpErrorInfo;
  /** bytes after the performative (a transfer's message section bytes) */
  payload?: Buffer;
}

function plain(v: any): any {
  if (v === null || v === undefined) return v;
  if (Array.isArray(v)) return v.map(plain);
  if (typeof v === 'object' && v.type !== undefined && 'value' in v) {
    if (v.descriptor !== undefined) return { descriptor: plain(v.descriptor), value: plain(v.value) };
    return plain(v.value);
  }
  return v;
}

function readError(v: any): AmqpErrorInfo | undefined {
  const p = plain(v);
  if (!p || typeof p !== 'object' || !Array.isArray(p.value)) return undefined;
  return { condition: p.value[0] === undefined || p.value[0] === null ? undefined : String(p.value[0]), description: p.value[1] ?? undefined };
}

/** Parses one complete frame (size included). Throws on a malformed one. */
export function parseFrame(buf: Buffer): ParsedFrame {
  const doff = buf.readUInt8(4);
  const type = buf.readUInt8(5);
  const channel = buf.readUInt16BE(6);
  const body = buf.subarray(doff * 4);
  if (body.length === 0) return { type, channel, name: 'empty', fields: [] };
  const reader = new types.Reader(body);
  const v = reader.read();
  const code = Number(plain(v.descriptor));
  const fields: unknown[] = Array.isArray(v.value) ? v.value : [];
  const name = NAMES[code] ?? '0x' + code.toString(16);
  const f: ParsedFrame = { type, channel, name, fields: fields.map(plain) };
  if (reader.position < body.length) f.payload = Buffer.from(body.subarray(reader.position));
  const errIdx = code === Code.close || code === Code.end ? 0 : code === Code.detach ? 2 : -1;
  if (errIdx >= 0 && fields[errIdx] !== undefined) f.error = readError(fields[errIdx]);
  return f;
}

/** Splits a byte stream into protocol headers and frames as they arrive. */
export class FrameParser {
  headers: Buffer[] = [];
  frames: ParsedFrame[] = [];
  /** Bytes that could not be parsed (the stream is then abandoned). */
  garbage?: Buffer;
  #buf = Buffer.alloc(0);

  push(data: Buffer): void {
    if (this.garbage) return;
    this.#buf = Buffer.concat([this.#buf, data]);
    for (;;) {
      if (this.#buf.length >= 4 && this.#buf.subarray(0, 4).toString('latin1') === 'AMQP') {
        if (this.#buf.length < 8) return;
        this.headers.push(this.#buf.subarray(0, 8));
        this.#buf = this.#buf.subarray(8);
        continue;
      }
      if (this.#buf.length < 4) return;
      const size = this.#buf.readUInt32BE(0);
      if (size < 8) { this.garbage = this.#buf; return; }
      if (this.#buf.length < size) return;
      try { this.frames.push(parseFrame(this.#buf.subarray(0, size))); }
      catch { this.garbage = this.#buf; return; }
      this.#buf = this.#buf.subarray(size);
    }
  }
}

/** A raw TCP client that records every header and frame the broker sends. */
export class RawClient {
  readonly socket: net.Socket;
  readonly parser = new FrameParser();
  /** Resolves when the socket has closed (either side). */
  readonly closed: Promise<void>;
  isClosed = false;
  error?: Error;
  #waiters: Array<() => void> = [];

  private constructor(socket: net.Socket) {
    this.socket = socket;
    this.closed = new Promise((res) => socket.once('close', () => { this.isClosed = true; this.#wake(); res(); }));
    socket.on('data', (d) => { this.parser.push(d); this.#wake(); });
    socket.on('error', (e) => { this.error = e; });
  }

  static connect(port: number, host = '127.0.0.1'): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const s = net.connect({ port, host });
      s.once('connect', () => { s.removeListener('error', reject); resolve(new RawClient(s)); });
      s.once('error', reject);
    });
  }

  get frames(): ParsedFrame[] { return this.parser.frames; }

  #wake(): void { for (const w of this.#waiters.splice(0)) w(); }

  /** Writes bytes; swallows errors from writing to a socket the broker already closed. */
  write(...bufs: Buffer[]): void {
    if (this.isClosed || this.socket.destroyed || this.socket.writableEnded) return;
    try { this.socket.write(Buffer.concat(bufs)); } catch { /* closed */ }
  }

  /** Waits until `pred` holds (checked on every arrival and at close) or `ms` pass; returns whether it held. */
  waitFor(pred: (c: RawClient) => boolean, ms = 2000): Promise<boolean> {
    return new Promise((resolve) => {
      const check = () => {
        if (pred(this)) { clearTimeout(timer); resolve(true); return true; }
        if (this.isClosed) { clearTimeout(timer); resolve(pred(this)); return true; }
        return false;
      };
      const timer = setTimeout(() => { resolve(pred(this)); }, ms);
      const loop = () => { if (!check()) this.#waiters.push(loop); };
      loop();
    });
  }

  /** First frame with this performative name. */
  find(name: string): ParsedFrame | undefined { return this.frames.find((f) => f.name === name); }

  /** Waits for the socket to close (the broker ending it); true if it closed within `ms`. */
  async waitClosed(ms = 2000): Promise<boolean> { return this.waitFor((c) => c.isClosed, ms); }

  destroy(): void { this.socket.destroy(); }

  /** Header + open + begin (channel 0) as a plain (no SASL) AMQP client. */
  async handshake(opts: { begin?: boolean } = {}): Promise<void> {
    this.write(AMQP_HEADER, open(), ...(opts.begin === false ? [] : [begin(0)]));
    await this.waitFor((c) => !!c.find(opts.begin === false ? 'open' : 'begin') || !!c.find('close'), 2000);
  }
}
