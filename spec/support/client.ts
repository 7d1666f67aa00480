/**
 * A small promise-based rhea client for tests: connect, send and wait for outcomes, receive
 * N messages, attach with arbitrary termini and see the broker's reply or detach error.
 */
import rhea from 'rhea';

export const r: any = rhea;

export interface Conn {
  connection: any;
  container: any;
  close(): Promise<void>;
}

export function connect(url: string, opts: Record<string, unknown> = {}): Promise<Conn> {
  const u = new URL(url);
  const container = r.create_container({ id: (opts.container_id as string) ?? `test-${Math.random().toString(36).slice(2)}` });
  return new Promise((resolve, reject) => {
    const connection = container.connect({ host: u.hostname, port: Number(u.port), reconnect: false, ...opts });
    const fail = (ctx: any) => reject(new Error('connect failed: ' + (ctx?.connection?.error?.description ?? ctx?.error ?? 'disconnected')));
    connection.once('connection_open', () => {
      connection.removeListener('disconnected', fail);
      connection.on('disconnected', () => { /* tests look at state */ });
      resolve({
        connection, container,
        close: () => new Promise<void>((res) => {
          if (!connection.is_open()) { res(); return; }
          const t = setTimeout(res, 2000);
          connection.once('connection_close', () => { clearTimeout(t); res(); });
          connection.once('disconnected', () => { clearTimeout(t); res(); });
          connection.close();
        }),
      });
    });
    connection.once('disconnected', fail);
    connection.once('connection_error', fail);
  });
}

export interface Outcome { state: string; condition?: string; description?: string }

/** Opens a sender and waits for the attach reply. */
export function openSender(conn: Conn, target: any, opts: Record<string, unknown> = {}): Promise<any> {
  return new Promise((resolve, reject) => {
    const s = conn.connection.open_sender({ target, ...opts });
    s.once('sendable', () => resolve(s));
    s.once('sender_close', () => reject(Object.assign(new Error(s.error?.description ?? 'sender closed'), { condition: s.error?.condition, link: s })));
    s.once('sender_error', () => reject(Object.assign(new Error(s.error?.description ?? 'sender error'), { condition: s.error?.condition, link: s })));
  });
}

/** Sends messages and resolves with each outcome in order. */
export function sendAll(sender: any, messages: any[]): Promise<Outcome[]> {
  return new Promise((resolve) => {
    const outcomes: Outcome[] = new Array(messages.length);
    let pending = messages.length;
    if (pending === 0) { resolve(outcomes); return; }
    let i = 0;
    const finish = (idx: number, o: Outcome) => { if (outcomes[idx]) return; outcomes[idx] = o; if (--pending === 0) resolve(outcomes); };
    const pump = () => {
      while (i < messages.length && sender.sendable()) {
        const idx = i++;
        const d = sender.send(messages[idx]);
        d.__idx = idx;
      }
    };
    sender.on('accepted', (ctx: any) => finish(ctx.delivery.__idx, { state: 'accepted' }));
    sender.on('rejected', (ctx: any) => finish(ctx.delivery.__idx, { state: 'rejected', condition: ctx.delivery.remote_state?.error?.condition, description: ctx.delivery.remote_state?.error?.description }));
    sender.on('released', (ctx: any) => finish(ctx.delivery.__idx, { state: 'released' }));
    sender.on('modified', (ctx: any) => finish(ctx.delivery.__idx, { state: 'modified' }));
    sender.on('sendable', pump);
    pump();
  });
}

export async function send(url: string, address: string | any, messages: any[]): Promise<Outcome[]> {
  const c = await connect(url);
  try {
    const s = await openSender(c, typeof address === 'string' ? { address } : address);
    return await sendAll(s, messages);
  } finally { await c.close(); }
}

export interface Received { message: any; delivery: any }

/** Opens a receiver; resolves with the link once attached (or rejects with the detach error). */
export function openReceiver(conn: Conn, source: any, opts: Record<string, unknown> = {}): Promise<any> {
  return new Promise((resolve, reject) => {
    const rcv = conn.connection.open_receiver({ source, autoaccept: false, credit_window: 0, ...opts });
    let opened = false;
    rcv.once('receiver_open', () => { opened = true; resolve(rcv); });
    rcv.once('receiver_close', () => { if (!opened) reject(Object.assign(new Error(rcv.error?.description ?? 'receiver closed'), { condition: rcv.error?.condition, link: rcv })); });
    rcv.once('receiver_error', () => { if (!opened) reject(Object.assign(new Error(rcv.error?.description ?? 'receiver error'), { condition: rcv.error?.condition, link: rcv })); });
  });
}

/**
 * Collects messages from a receiver until `count` arrive or `idleMs` pass without one.
 * Grants credit as it goes; `settle` decides each outcome (default accept).
 */
export function collect(rcv: any, opts: { count?: number; idleMs?: number; settle?: (m: Received) => 'accept' | 'release' | 'reject' | 'none' | 'modify'; credit?: number; until?: (m: Received) => boolean } = {}): Promise<Received[]> {
  const out: Received[] = [];
  const credit = opts.credit ?? 100;
  return new Promise((resolve) => {
    let timer: NodeJS.Timeout;
    const done = () => { clearTimeout(timer); rcv.removeListener('message', onMessage); rcv.removeListener('receiver_close', done); resolve(out); };
    const arm = () => { clearTimeout(timer); timer = setTimeout(done, opts.idleMs ?? 500); };
    const onMessage = (ctx: any) => {
      const m = { message: ctx.message, delivery: ctx.delivery };
      out.push(m);
      const how = opts.settle ? opts.settle(m) : 'accept';
      if (how === 'accept') ctx.delivery.accept();
      else if (how === 'release') ctx.delivery.release();
      else if (how === 'reject') ctx.delivery.reject();
      else if (how === 'modify') ctx.delivery.modified({ delivery_failed: true });
      if (rcv.credit < credit / 2) rcv.add_credit(credit - rcv.credit);
      if ((opts.count !== undefined && out.length >= opts.count) || opts.until?.(m)) { done(); return; }
      arm();
    };
    rcv.on('message', onMessage);
    rcv.once('receiver_close', done);
    rcv.add_credit(opts.count !== undefined ? Math.min(credit, opts.count) : credit);
    arm();
  });
}

export async function receive(url: string, source: any, opts: Parameters<typeof collect>[1] = {}): Promise<Received[]> {
  const c = await connect(url);
  try {
    const rcv = await openReceiver(c, typeof source === 'string' ? { address: source } : source);
    return await collect(rcv, opts);
  } finally { await c.close(); }
}

/** A filter value with an explicit descriptor (symbol or ulong). */
export function described(descriptor: string | bigint, value: unknown): any {
  const d = typeof descriptor === 'bigint' ? r.types.wrap_ulong(Number(descriptor)) : r.types.wrap_symbol(descriptor);
  return r.types.described_nc(d, r.types.wrap(value));
}

export const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));
