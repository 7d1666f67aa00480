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

/** rhea leaves a null terminus as a typed null. */
/** A create-on-demand terminus as qpid::messaging sends it (wire.md 2.1): flat node properties. */
export const createOnDemand = (address: string, props: Record<string, unknown>) => ({ address, capabilities: ['create-on-demand', 'queue', 'durable'], dynamic_node_properties: props });

export function isNullTerminus(t: any): boolean { return t === null || t === undefined || (t?.type?.name === 'Null'); }

/** condition/description of a link or connection error, whatever shape rhea left it in. */
export function errorOf(e: any): { condition?: string; description?: string } {
  if (!e) return {};
  const pick = (v: any) => (v && typeof v === 'object' && 'value' in v ? v.value : v);
  if (Array.isArray(e.value)) return { condition: pick(e.value[0]), description: pick(e.value[1]) };
  return { condition: pick(e.condition), description: pick(e.description) };
}

export interface Outcome { state: string; condition?: string; description?: string }

/** Opens a sender and waits for the attach reply. */
export function openSender(conn: Conn, target: any, opts: Record<string, unknown> = {}): Promise<any> {
  return new Promise((resolve, reject) => {
    const s = conn.connection.open_sender({ target, ...opts });
    s.once('sendable', () => resolve(s));
    const fail = () => { const e = errorOf(s.error); reject(Object.assign(new Error(e.description ?? 'sender closed'), { condition: e.condition, link: s })); };
    s.once('sender_close', fail);
    s.once('sender_error', fail);
  });
}

/** Sends messages and resolves with each outcome in order. */
export function sendAll(sender: any, messages: any[]): Promise<Outcome[]> {
  return new Promise((res) => {
    let resolve = res;
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
    const events: Record<string, (ctx: any) => void> = {
      accepted: (ctx) => finish(ctx.delivery.__idx, { state: 'accepted' }),
      rejected: (ctx) => finish(ctx.delivery.__idx, { state: 'rejected', condition: ctx.delivery.remote_state?.error?.condition, description: ctx.delivery.remote_state?.error?.description }),
      released: (ctx) => finish(ctx.delivery.__idx, { state: 'released' }),
      modified: (ctx) => finish(ctx.delivery.__idx, { state: 'modified' }),
      sendable: pump,
    };
    const done = resolve;
    resolve = ((v: Outcome[]) => { for (const [e, f] of Object.entries(events)) sender.removeListener(e, f); done(v); }) as any;
    for (const [e, f] of Object.entries(events)) sender.on(e, f);
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
    // A refused attach is answered with a null source, then a detach carrying the error.
    rcv.once('receiver_open', () => { if (isNullTerminus(rcv.remote?.attach?.source)) return; opened = true; resolve(rcv); });
    const fail = () => { if (!opened) { const e = errorOf(rcv.error); reject(Object.assign(new Error(e.description ?? 'receiver closed'), { condition: e.condition, link: rcv })); } };
    rcv.once('receiver_close', fail);
    rcv.once('receiver_error', fail);
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
