/**
 * The AMQP side of the benchmark: one rhea connection per role, links opened with bounded
 * waits, and the Tidemark-specific terminus pieces (create-on-demand SOW queue, command /
 * bookmark / options filters). Nothing here assumes the peer is Tidemark.
 */
import rhea from 'rhea';
import { connectPlan, connectFailure } from '../../common/connection.js';

export const r: any = rhea;

export interface Conn {
  connection: any;
  /** `product` from the peer's open properties (Tidemark says 'tidemark'). */
  product: string;
  close(): Promise<void>;
}

let seq = 0;

/** Set by the bench's `--client tuned`: see corkPerTick. */
let corkWrites = false;
export function setCorkWrites(on: boolean): void { corkWrites = on; }

/**
 * rhea writes every frame with its own socket.write, one syscall each (a fifth of the bench
 * client's time when publishing). Corked until the end of the tick, a burst of transfers
 * leaves in one writev. (The broker goes further: its FrameWriter, frame-writer.ts, gathers
 * a connection's frames into one buffer. The bench keeps the cork so that its ratios stay
 * comparable with earlier runs; either way both brokers get the same client.)
 */
function corkPerTick(connection: any): void {
  const output = connection.output;
  let corked = false;
  connection.output = function (this: any) {
    const socket = this.socket;
    if (socket && !corked && typeof socket.cork === 'function') {
      corked = true;
      socket.cork();
      process.nextTick(() => { corked = false; socket.uncork(); });
    }
    return output.call(this);
  };
}

/**
 * Connects to `url` (the tools' -b/--broker forms, Qpid's user/pass@host:port included) with
 * the tools' `--connection-options` (a Qpid map: credentials, sasl_mechanisms, container_id,
 * idle_timeout, transport). Each connection gets its own container id unless the options
 * name one.
 */
export function connect(url: string, connectionOptions?: string, timeoutMs = 10000): Promise<Conn> {
  const plan = connectPlan({ broker: url, connectionOptions, containerId: `tidemark-bench-${process.pid}-${++seq}` });
  const container = r.create_container({ id: plan.containerId });
  return new Promise((resolve, reject) => {
    let done = false;
    let protocolError: Error | undefined;
    const opts: Record<string, unknown> = { transport: 'tcp', ...plan.options, tcp_no_delay: true };
    const connection = container.connect(opts);
    if (corkWrites) corkPerTick(connection);
    const fail = (msg: string) => { if (done) return; done = true; clearTimeout(timer); try { connection.close(); } catch { /* ignore */ } reject(new Error(msg)); };
    const timer = setTimeout(() => fail(`could not connect to ${plan.where} within ${timeoutMs / 1000}s`), timeoutMs);
    connection.on('protocol_error', (e: Error) => { protocolError = e; });
    connection.on('connection_error', (ctx: any) => fail(connectFailure(plan, ctx?.error ?? connection.error ?? protocolError, 'refused')));
    connection.on('disconnected', (ctx: any) => fail(connectFailure(plan, protocolError ?? ctx?.error ?? ctx?.connection?.error, 'lost')));
    connection.on('error', () => { /* reported through disconnected */ });
    connection.once('connection_open', () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      const props = connection.remote?.open?.properties ?? {};
      resolve({
        connection,
        product: String(props.product ?? ''),
        close: () => new Promise<void>((res) => {
          if (!connection.is_open()) { res(); return; }
          const t = setTimeout(() => { try { connection.socket?.destroy(); } catch { /* ignore */ } res(); }, 2000);
          const fin = () => { clearTimeout(t); res(); };
          connection.once('connection_close', fin);
          connection.once('disconnected', fin);
          connection.close();
        }),
      });
    });
  });
}

export function describe(err: any): string {
  if (!err) return 'closed by the peer';
  const pick = (v: any) => (v && typeof v === 'object' && 'value' in v ? v.value : v);
  const c = pick(err.condition); const d = pick(err.description);
  return [c, d].filter(Boolean).join(': ') || String(err);
}

/** Opens a sender; resolves once it has been attached (credit may come later). */
export function openSender(c: Conn, target: Record<string, unknown>, timeoutMs = 10000): Promise<any> {
  return new Promise((resolve, reject) => {
    const s = c.connection.open_sender({ target, autosettle: true });
    let done = false;
    const finish = (e?: Error) => { if (done) return; done = true; clearTimeout(t); e ? reject(e) : resolve(s); };
    const t = setTimeout(() => finish(new Error(`sender attach to ${target.address} not answered in ${timeoutMs / 1000}s`)), timeoutMs);
    s.once('sender_open', () => {
      const tgt = s.remote?.attach?.target;
      if (!tgt || tgt?.type?.name === 'Null') return; // refused: the detach follows
      finish();
    });
    s.once('sender_close', () => finish(new Error(`sender to ${target.address} refused: ${describe(s.error)}`)));
    s.once('sender_error', () => finish(new Error(`sender to ${target.address} refused: ${describe(s.error)}`)));
  });
}

/** Opens a receiver with manual (credit_window 0) or automatic credit; resolves on attach. */
export function openReceiver(c: Conn, source: Record<string, unknown>, opts: { creditWindow: number; autoaccept?: boolean; presettled?: boolean; onMessage?: (ctx: any) => void }, timeoutMs = 10000): Promise<any> {
  return new Promise((resolve, reject) => {
    const rcv = c.connection.open_receiver({
      source, credit_window: opts.creditWindow, autoaccept: opts.autoaccept ?? true,
      ...(opts.presettled ? { snd_settle_mode: 1 } : {}),
    });
    // Listening from the start: transfers that arrive in the same read as the attach are
    // dispatched before the promise's continuation runs, and would be accepted uncounted.
    if (opts.onMessage) rcv.on('message', opts.onMessage);
    let done = false;
    const finish = (e?: Error) => { if (done) return; done = true; clearTimeout(t); e ? reject(e) : resolve(rcv); };
    const t = setTimeout(() => finish(new Error(`receiver attach to ${source.address} not answered in ${timeoutMs / 1000}s`)), timeoutMs);
    rcv.once('receiver_open', () => {
      const src = rcv.remote?.attach?.source;
      if (!src || src?.type?.name === 'Null') return;
      finish();
    });
    rcv.once('receiver_close', () => finish(new Error(`receiver from ${source.address} refused: ${describe(rcv.error)}`)));
    rcv.once('receiver_error', () => finish(new Error(`receiver from ${source.address} refused: ${describe(rcv.error)}`)));
  });
}

/**
 * Calls `fail` once if the connection drops or the link is detached by the peer while a
 * workload runs (connections never reconnect: connectPlan sets reconnect false), so a broker
 * that goes away mid-run fails the run at once and clearly, not after a stall timeout.
 * Returns a function that stops watching (call it before closing on purpose).
 */
export function watchLoss(c: Conn, link: any, what: string, fail: (e: Error) => void): () => void {
  let on = true;
  const lost = (why: string) => { if (on) { on = false; fail(new Error(`${what}: ${why}`)); } };
  const onDisc = (ctx: any) => lost(`connection lost${ctx?.error ? ` (${describe(ctx.error)})` : ''}`);
  const onConnClose = () => lost(`connection closed by the broker: ${describe(c.connection.remote?.close?.error ?? c.connection.error)}`);
  const onLinkClose = () => lost(`link detached by the broker: ${describe(link?.error)}`);
  c.connection.on('disconnected', onDisc);
  c.connection.on('connection_close', onConnClose);
  if (link) { link.on(link.is_receiver?.() ? 'receiver_close' : 'sender_close', onLinkClose); }
  return () => {
    on = false;
    c.connection.removeListener('disconnected', onDisc);
    c.connection.removeListener('connection_close', onConnClose);
    if (link) link.removeListener(link.is_receiver?.() ? 'receiver_close' : 'sender_close', onLinkClose);
  };
}

/** Tidemark source filters (wire.md 4), encoded as described values. */
export function tmFilters(f: { command?: string; bookmark?: string; options?: Record<string, unknown>; checkpoint?: Record<string, unknown> }): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const d = (desc: string, v: any) => r.types.described_nc(r.types.wrap_symbol(desc), v);
  if (f.command) out.command = d('tidemark:command:symbol', r.types.wrap_symbol(f.command));
  if (f.bookmark) out.bookmark = d('tidemark:bookmark:string', r.types.wrap_string(f.bookmark));
  if (f.options) out.options = d('tidemark:options:map', r.types.wrap_map(f.options));
  if (f.checkpoint) out.checkpoint = d('tidemark:checkpoint:map', r.types.wrap_map(f.checkpoint));
  return out;
}

/** `x-opt-tm-cmd` of a received message ('' for a plain message). */
export function cmdOf(m: any): string {
  const v = m?.message_annotations?.['x-opt-tm-cmd'];
  return v === undefined || v === null ? '' : String(v);
}

export function scnOf(m: any): number {
  const v = m?.message_annotations?.['x-opt-tm-scn'];
  return v === undefined || v === null ? -1 : Number(v);
}

/** Data messages of a Tidemark stream (not group_begin / group_end / completed markers). */
export function isMarker(m: any): boolean {
  const c = cmdOf(m);
  return c === 'group_begin' || c === 'group_end' || c === 'completed';
}
