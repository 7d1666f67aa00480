/**
 * Guards on rhea 3.0.5 against peers that send valid frames which break a protocol rule, or
 * legal frames rhea handles badly (docs/rhea-patches.md, patches 4-10, 12 and 13; docs/robustness.md).
 * Found by the hostile-input audit; tests: spec/integration/protocol-edges.spec.ts.
 *
 * 4. Dispositions are applied to the deliveries that exist. rhea's Outgoing/Incoming
 *    `on_disposition` loop `for (i = first; i <= last; i++)`: one disposition with
 *    first=0 last=0xffffffff froze the broker for 12-35 s. A range wider than the session's
 *    delivery buffer (at most 2048 deliveries) walks the buffer instead. Delivery ids are
 *    serial numbers [AMQP 2.7.6, RFC 1982]: the buffer finds them modulo 2^32.
 * 5. Transfers [AMQP 2.5.6, 2.6.7, 2.6.14, 2.7.5], on the server's connections:
 *    - a transfer beyond the session's incoming window ends the session with
 *      amqp:session:window-violation (rhea overflowed its delivery buffer, "circular buffer
 *      overflow", and the connection was closed as a decode error);
 *    - a transfer on a link whose broker end is the sender detaches that link with
 *      amqp:not-allowed (rhea dispatched it as a message of a sender: internal error);
 *    - a new delivery without link credit detaches the link with
 *      amqp:link:transfer-limit-exceeded (rhea printed "Received transfer when credit was 0");
 *    - a delivery still incomplete whose bytes pass the link's max-message-size detaches the
 *      link with amqp:link:message-size-exceeded and drops what was buffered (rhea buffered
 *      any number of `more` frames);
 *    - transfers for a link the broker has detached are discarded until the peer's detach;
 *      a transfer after the peer's own detach ends the session (amqp:session:unattached-handle).
 *    On every connection: an aborted delivery is discarded and implicitly settled, its
 *    credit and delivery-count used as the sender counted them; a pre-settled delivery frees
 *    its slot of the session window once received (rhea kept it until the application
 *    settled it, which nothing does for a pre-settled delivery: after 2048 of them the window
 *    stayed shut); delivery-ids and transfer-ids wrap at 2^32; a session whose window runs low
 *    while frames arrive writes its flow (rhea waited for some other event, so a delivery of
 *    more than 1024 frames stalled); a delivery is settled when any of its frames says so
 *    (rhea read the first frame's flag only, and the receiver answered a settled delivery).
 * 6. Attach [AMQP 2.6.1, 2.6.2, 2.7.3], on the server's connections: an attach on a handle
 *    that is still attached ends the session with amqp:session:handle-in-use (rhea silently
 *    re-pointed the handle); an attach whose name is already attached on the session in the
 *    same direction is refused alone (attach with a null terminus, then detach
 *    amqp:invalid-field) where rhea threw "Attach already received" and the connection was
 *    closed as a decode error.
 * 7. Values nested deeper than MAX_NESTING levels are a decode error ("nested too deeply"),
 *    for every frame and message rhea decodes. rhea reads and unwraps values recursively:
 *    3000 nested lists in an attach overflowed the stack (amqp:internal-error with a
 *    RangeError stack).
 * 9. Our own ids past 2^32 [AMQP 2.5.6, 2.6.7; RFC 1982]. rhea counts the session's outgoing
 *    delivery-ids and transfer-ids, and each link's delivery-count, without wrapping. After
 *    2^32 deliveries on one session (12 hours at 100k/s) the next transfer's delivery-id did
 *    not fit its uint, and the window rhea computed from the peer's (wrapped) next-incoming-id
 *    went negative: the session's consumers stopped for good. The counters stay as rhea keeps
 *    them (its loops compare them); they are written modulo 2^32 into transfers, flows and
 *    dispositions, and the peer's next-incoming-id is read back at its serial distance.
 * 10. A flow with echo=true is answered with our flow state [AMQP 2.7.4]: the link's
 *    (delivery-count, link-credit) when it names an open link, else the session's. rhea read
 *    the rest of such a flow and never answered, so a client polling the sender's state with
 *    echo waited for nothing. The answer never says drain: rhea's receivers take any flow
 *    with drain=true from the sender as the drain's end; the drain is answered as before.
 * 12. A link's handle is freed once its detach exchange is over [AMQP 2.6.2]: rhea never freed
 *    it (it looks for the handle in `link.remote.handle`, never set), so a flow or detach on it
 *    reached the dead link and every link attached on a new handle stayed in memory.
 * 13. A session's outgoing-window stays 2^32-1 [AMQP 2.5.6]: rhea took one off per transfer, so
 *    after 2^32-1 transfers on a session the window went negative, the encoder threw on every
 *    flow and the connection was closed.
 *
 * Like rhea-patches.ts this checks rhea's version and the source of everything it relies on
 * before changing anything, throws if they differ, and is idempotent.
 */
import { createRequire } from 'node:module';
import rhea from 'rhea';
import { applyRheaPatches, roleKey, PATCHED_RHEA_VERSION } from './rhea-patches.js';
import { PeerError, PeerConditions as C } from './peer-error.js';
import { MAX_NESTING } from './message-decode.js';

export { MAX_NESTING };

const require = createRequire(import.meta.url);
const APPLIED = Symbol.for('tidemark.rhea-guards.applied');
const TWO32 = 4294967296;
/** The next-outgoing-id our begin announced (section 9). */
const INITIAL_OUTGOING_ID = Symbol('tidemark.initial-outgoing-id');
/** Bytes buffered so far of an incomplete incoming delivery. */
const BYTES = Symbol('tidemark.delivery-bytes');
/** The `links` key of a link created only to refuse an attach. */
const REFUSED_KEY = Symbol('tidemark.refused-key');
/** Depth of the value being read by a rhea Reader. */
const DEPTH = Symbol('tidemark.reader-depth');

/** rhea's event for a delivery the sender aborted (dispatched on the receiving link). */
export const DELIVERY_ABORTED = 'delivery_aborted';

/* Minimal views of the rhea internals touched here. */
interface Delivery {
  id: number;
  settled: unknown;
  remote_settled: unknown;
  state?: unknown;
  incomplete?: unknown;
  frames?: unknown[];
  link?: unknown;
  [BYTES]?: number;
}
interface DeliveryBuffer {
  size: number;
  head: number;
  capacity: number;
  entries: Array<Delivery | undefined>;
  available(): number;
  push(d: Delivery): void;
  get_tail(): Delivery | undefined;
  by_id(id: number): Delivery | undefined;
}
interface Endpoint { local_open: boolean; open_requests?: number; remote_open: boolean; remote_opened(): boolean }
interface Link {
  name: string;
  state: Endpoint;
  credit: number;
  delivery_count: number;
  _incomplete?: Delivery;
  local: { handle: number; attach: { max_message_size?: unknown; source?: unknown; target?: unknown } };
  remote: { attach?: unknown };
  is_sender(): boolean;
  is_receiver(): boolean;
  open(): void;
  close(error?: unknown): void;
  dispatch(name: string, ctx: unknown): void;
  _context(c: unknown): unknown;
  [REFUSED_KEY]?: string;
}
interface Incoming {
  deliveries: DeliveryBuffer;
  next_transfer_id: number;
  next_delivery_id: number | undefined;
  max_transfer_id: number;
  readonly window: number;
  on_disposition(fields: unknown): void;
}
/** What section 9 reads of rhea's outgoing side of a session. */
interface Outgoing {
  next_transfer_id: number;
  remote_next_transfer_id: number | undefined;
  [INITIAL_OUTGOING_ID]?: number;
}
interface Session {
  connection: { is_server?: boolean; _register(): void };
  links: Record<string, Link>;
  local: { handles: Record<number, Link>; begin: { incoming_window?: unknown } };
  remote: { handles: Record<string, Link | undefined> };
  incoming: Incoming;
  outgoing: { deliveries: DeliveryBuffer; on_disposition(fields: unknown): void };
  get_option(name: string, dflt: unknown): unknown;
  state?: Endpoint;
  _write_flow(link?: { _get_drain(): boolean; delivery_count: number; credit: number; local: { handle: number } }): void;
}
type Fn = (this: Session, ...args: any[]) => any;
type SessionProto = Record<string, Fn> & { [APPLIED]?: true };

function hasSource(fn: unknown, ...snippets: string[]): boolean {
  if (typeof fn !== 'function') return false;
  const src = Function.prototype.toString.call(fn).replace(/\s+/g, '');
  return snippets.every((s) => src.includes(s.replace(/\s+/g, '')));
}

function fail(what: string): never {
  throw new Error(
    `applyRheaGuards: rhea internals changed (${what}); the guards were verified against rhea ${PATCHED_RHEA_VERSION}. ` +
      'Re-check docs/rhea-patches.md (patches 4-7) against this version, then update or drop lib/core/protocol/rhea-guards.ts.',
  );
}

export function applyRheaGuards(): void {
  applyRheaPatches(); // the guards wrap the patched methods (they must be the outermost layer)
  const probe = rhea.create_connection({ id: 'tidemark-rhea-guards-probe', host: '127.0.0.1', port: 0 }).create_session() as unknown as Session;
  const proto = Object.getPrototypeOf(probe) as SessionProto;
  if (proto[APPLIED]) return;
  const bufferProto = Object.getPrototypeOf(probe.incoming.deliveries) as Record<string, unknown>;
  const incomingProto = Object.getPrototypeOf(probe.incoming) as Record<string, unknown>;
  const outgoingProto = Object.getPrototypeOf(probe.outgoing) as Record<string, unknown>;
  const links = require('rhea/lib/link.js') as { Sender?: unknown; Receiver?: unknown };
  const Reader = (rhea as any).types?.Reader;
  const checks: Array<[string, boolean]> = [
    ['CircularBuffer.by_id', hasSource(bufferProto.by_id, 'var gap = id - this.entries[this.head].id;', 'if (gap < this.size)')],
    ['Outgoing.on_disposition', hasSource(outgoingProto.on_disposition, 'for (var i = fields.first; i <= last; i++)', 'var d = this.deliveries.by_id(i);')],
    ['Incoming.on_disposition', hasSource(incomingProto.on_disposition, 'for (var i = fields.first; i <= last; i++)', 'var d = this.deliveries.by_id(i);')],
    ['Session.on_disposition', hasSource(proto.on_disposition, 'this.outgoing.on_disposition(frame.performative);', 'this.incoming.on_disposition(frame.performative);', 'this.connection._register();')],
    ['Incoming.on_begin', hasSource(incomingProto.on_begin, 'this.next_transfer_id = fields.next_outgoing_id;')],
    ['Incoming.on_flow', hasSource(incomingProto.on_flow, 'this.next_transfer_id = fields.next_outgoing_id;')],
    ['Incoming.process', hasSource(incomingProto.process, 'this.deliveries.pop_if(function (d) { return d.settled; });', 'if (this.max_transfer_id - this.next_transfer_id < (this.window / 2))')],
    ['Session._write_flow', hasSource(proto._write_flow, "'incoming_window':this.incoming.window,", 'this.incoming.max_transfer_id = fields.next_incoming_id + fields.incoming_window;')],
    ['Session.on_begin/on_flow/on_transfer/on_attach/remove_link', ['on_begin', 'on_flow', 'on_transfer', 'on_attach', 'remove_link'].every((k) => typeof proto[k] === 'function')],
    ['Link constructors', typeof links.Sender === 'function' && typeof links.Receiver === 'function' && (links.Sender as Fn).length === 4],
    ['Outgoing.on_flow', hasSource(outgoingProto.on_flow, 'this.remote_next_transfer_id = fields.next_incoming_id;')],
    ['Outgoing.process/Session._write_flow/write_dispositions use frames.*', hasSource(outgoingProto.process, 'frames.transfer({') && hasSource(proto._write_flow, 'this.output(frames.flow(fields));') && hasSource(outgoingProto.process, 'write_dispositions(this.pending_dispositions)')],
    ['frames.transfer/flow/disposition', ['transfer', 'flow', 'disposition'].every((k) => typeof (require('rhea/lib/frames.js') as Record<string, unknown>)[k] === 'function')],
    ['types.Reader', hasSource(Reader?.prototype?.read, 'var constructor = this.read_constructor();') && hasSource(Reader?.prototype?.read_array, 'this.read_array_items(limits.count')],
    // 12. rhea's remove_link frees link.remote.handle, which Link.on_attach sets from frame.handle: never
    // defined, so rhea frees nothing and cannot free a reused handle's new link by mistake.
    // 13. the outgoing window rhea counts down, and the one place it is set.
    ['Outgoing.window', hasSource(outgoingProto.process, 'this.window -= num_to_send;') && hasSource(outgoingProto.constructor, 'this.window = types.MAX_UINT;') && Object.getOwnPropertyDescriptor(probe.outgoing, 'window')?.writable === true],
    ['Link.on_attach', hasSource((links.Receiver as { prototype?: Record<string, unknown> } | undefined)?.prototype?.on_attach, 'if (!this.remote.handle) {', 'this.remote.handle = frame.handle;')],
  ];
  for (const [what, ok] of checks) if (!ok) fail(what);

  patchSerialLookup(bufferProto);
  patchDispositions(proto);
  patchWindow(proto);
  patchOutgoingSerials(proto, outgoingProto);
  patchTransfers(proto);
  patchAttach(proto, links as { Sender: LinkCtor; Receiver: LinkCtor });
  patchEcho(proto);
  patchHandleRelease(proto);
  keepOutgoingWindow(outgoingProto, probe.outgoing as unknown as Record<string, unknown>);
  guardNesting(Reader);
  Object.defineProperty(proto, APPLIED, { value: true });
}

/* ---------- 4. dispositions [AMQP 2.7.6] ---------- */

/** Delivery ids are serial numbers: find `id` at its distance from the head, modulo 2^32. */
function patchSerialLookup(bufferProto: Record<string, unknown>): void {
  bufferProto.by_id = function serialById(this: DeliveryBuffer, id: number) {
    if (this.size > 0 && typeof id === 'number') {
      const gap = (id - (this.entries[this.head] as Delivery).id) >>> 0;
      if (gap < this.size) return this.entries[(this.head + gap) % this.capacity];
    }
    return undefined;
  };
}

function patchDispositions(proto: SessionProto): void {
  const onDisposition = proto.on_disposition;
  proto.on_disposition = function guardedOnDisposition(this: Session, frame: any) {
    const p = frame.performative;
    const first = p?.first;
    const last = p?.last ? p.last : first; // rhea's reading: an absent (or 0) last is first
    // role true: the peer is the receiver, the range names our outgoing deliveries.
    const side = p?.role ? this.outgoing : this.incoming;
    // A range no wider than what is buffered (and not wrapping): rhea's own loop, bounded.
    if (typeof first !== 'number' || typeof last !== 'number' || (last >= first && last - first < side.deliveries.size)) {
      return onDisposition.call(this, frame);
    }
    // Wider (up to 2^32 ids) or wrapping past 2^32: visit the deliveries that exist, in order.
    const span = (last - first) >>> 0;
    // last before first is a range across 2^32 only as serial numbers define it, for a
    // distance under 2^31 [RFC 1982]; anything else names nothing (rhea's loop did nothing).
    if (last < first && span >= 0x80000000) return;
    const buf = side.deliveries;
    const hits: number[] = [];
    for (let i = 0; i < buf.size; i++) {
      const d = buf.entries[(buf.head + i) % buf.capacity];
      if (d !== undefined && typeof d.id === 'number' && ((d.id - first) >>> 0) <= span) hits.push(d.id);
    }
    for (const id of hits) side.on_disposition(Object.create(p, { first: { value: id }, last: { value: id } }));
    this.connection._register();
  };
}

/* ---------- 5. session window [AMQP 2.5.6] ---------- */

const isUint = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0 && v < TWO32;

/**
 * rhea counts the transfers it receives in `incoming.next_transfer_id` and sets
 * `incoming.max_transfer_id` (one past the last transfer our window allows) when it writes a
 * flow; it did not set it on begin (so the first window was wrong when the peer's
 * next-outgoing-id was not 0), nor wrap either at 2^32. Here both stay consistent: the
 * count is a uint (wrapped with the limit), the limit is set from our begin's window.
 */
function patchWindow(proto: SessionProto): void {
  const onBegin = proto.on_begin;
  proto.on_begin = function guardedOnBegin(this: Session, frame: any) {
    const r = onBegin.call(this, frame);
    const inc = this.incoming;
    if (!isUint(inc.next_transfer_id)) inc.next_transfer_id = 0; // a begin with a wrongly typed next-outgoing-id
    const w = this.local.begin.incoming_window;
    inc.max_transfer_id = inc.next_transfer_id + (typeof w === 'number' ? w : inc.window);
    return r;
  };
  const onFlow = proto.on_flow;
  proto.on_flow = function guardedOnFlow(this: Session, frame: any) {
    const inc = this.incoming;
    const before = inc.next_transfer_id;
    try {
      return onFlow.call(this, frame);
    } finally {
      if (!isUint(inc.next_transfer_id)) inc.next_transfer_id = before; // a flow with a wrongly typed next-outgoing-id
    }
  };
}

/* ---------- 9. our own ids past 2^32 ---------- */

/** A count as the uint a frame carries (serial numbers wrap at 2^32). */
export function wire32(v: unknown): unknown { return typeof v === 'number' && v >= TWO32 ? v % TWO32 : v; }

function patchOutgoingSerials(proto: SessionProto, outgoingProto: Record<string, unknown>): void {
  const frames = require('rhea/lib/frames.js') as Record<string, (fields: Record<string, unknown>) => unknown>;
  const wrapFields = (name: string, keys: readonly string[]) => {
    const make = frames[name];
    frames[name] = function wrappedIds(fields: Record<string, unknown>) {
      for (const k of keys) {
        const v = fields?.[k];
        if (typeof v === 'number' && v >= TWO32) { fields = { ...fields }; for (const k2 of keys) fields[k2] = wire32(fields[k2]); break; }
      }
      return make(fields);
    };
  };
  wrapFields('transfer', ['delivery_id']);
  wrapFields('flow', ['next_incoming_id', 'next_outgoing_id', 'delivery_count']);
  wrapFields('disposition', ['first', 'last']);
  // The peer's next-incoming-id is a uint: put it at its serial distance behind our count,
  // so rhea's `remote_window - (next_transfer_id - remote_next_transfer_id)` stays right.
  // A flow without next-incoming-id comes from a peer that has not read our begin yet: it
  // stands for our begin's next-outgoing-id [AMQP 2.7.4] (rhea took it as 0, which is right
  // only while that is 0, as the broker's always is; the test that starts near 2^32 is not).
  const onBegin = proto.on_begin;
  proto.on_begin = function initialOutgoingId(this: Session, frame: any) {
    const id = (this.local.begin as { next_outgoing_id?: unknown }).next_outgoing_id;
    if (typeof id === 'number') (this.outgoing as unknown as Outgoing)[INITIAL_OUTGOING_ID] = id;
    return onBegin.call(this, frame);
  };
  const onFlow = outgoingProto.on_flow as (this: Outgoing, f: { next_incoming_id?: unknown }) => unknown;
  outgoingProto.on_flow = function serialOnFlow(this: Outgoing, fields: { next_incoming_id?: unknown }) {
    const r = onFlow.call(this, fields);
    if ((fields?.next_incoming_id === undefined || fields.next_incoming_id === null) && this[INITIAL_OUTGOING_ID] !== undefined) {
      this.remote_next_transfer_id = this[INITIAL_OUTGOING_ID];
    }
    const theirs = this.remote_next_transfer_id;
    if (typeof theirs === 'number' && this.next_transfer_id >= TWO32) {
      const behind = (this.next_transfer_id - theirs) % TWO32;
      this.remote_next_transfer_id = this.next_transfer_id - (behind < 0 ? behind + TWO32 : behind);
    }
    return r;
  };
}

/** Transfer and delivery ids are serial numbers [RFC 1982]: keep rhea's counters below 2^32. */
function wrapCounters(inc: Incoming): void {
  if (inc.next_transfer_id >= TWO32) { inc.next_transfer_id -= TWO32; inc.max_transfer_id -= TWO32; }
  if (typeof inc.next_delivery_id === 'number' && inc.next_delivery_id >= TWO32) inc.next_delivery_id -= TWO32;
}

function windowViolation(session: Session): PeerError {
  const inc = session.incoming;
  return new PeerError('session', C.windowViolation,
    `transfer beyond the session's incoming window (the broker allowed transfers up to id ${(inc.max_transfer_id - 1) >>> 0}, ` +
    `this one is ${inc.next_transfer_id >>> 0}): wait for the broker's flow before sending more [AMQP 2.5.6]`, session);
}

/* ---------- 5. transfers [AMQP 2.6.7, 2.6.14, 2.7.5] ---------- */

function maxMessageSize(link: Link): number {
  const v = link.local?.attach?.max_message_size;
  return typeof v === 'number' && v > 0 ? v : 0;
}

/**
 * A transfer the broker does not process: it still took a transfer-id, and when it starts a
 * delivery, that delivery-id is used (the session's ids must stay in step with the peer's,
 * and rhea's buffer finds deliveries by their distance from the head: a settled placeholder
 * keeps the ids contiguous).
 */
function discard(session: Session, p: any, link: Link): void {
  const inc = session.incoming;
  inc.next_transfer_id++;
  const id = p.delivery_id;
  if (isUint(id) && (inc.next_delivery_id === undefined || id === inc.next_delivery_id)) {
    if (inc.deliveries.available() > 0) inc.deliveries.push({ id, settled: true, remote_settled: true, state: undefined, link });
    inc.next_delivery_id = id + 1;
  }
  wrapCounters(inc);
}

/** Drops what an incomplete delivery holds; it is settled and leaves the link. */
function dropIncomplete(link: Link, d: Delivery): void {
  d.frames = undefined;
  d[BYTES] = 0;
  d.incomplete = false;
  d.settled = true;
  d.remote_settled = true;
  if (link._incomplete === d) link._incomplete = undefined;
}

function patchTransfers(proto: SessionProto): void {
  const onTransfer = proto.on_transfer;
  proto.on_transfer = function guardedOnTransfer(this: Session, frame: any) {
    const p = frame?.performative;
    const link = p === undefined ? undefined : this.remote.handles[p.handle];
    if (link === undefined) return onTransfer.call(this, frame); // rhea: invalid handle (server.ts answers it first)
    const inc = this.incoming;
    const server = this.connection.is_server === true;
    if (server) {
      // Every transfer frame takes one unit of the incoming window we last advertised.
      if (!(inc.max_transfer_id - inc.next_transfer_id > 0)) throw windowViolation(this);
      if (!link.state.remote_open) {
        throw new PeerError('session', C.unattachedHandle, `transfer on handle ${String(p.handle)} after the client detached link "${link.name}" [AMQP 2.7.5]`, this);
      }
      // We detached it (an error, or a refused attach): what was in flight is discarded.
      if (!link.state.local_open) { discard(this, p, link); return; }
      if (!link.is_receiver()) {
        discard(this, p, link);
        throw new PeerError('link', C.notAllowed,
          `transfer on link "${link.name}", on which the client is the receiver: only a link's sender transfers messages [AMQP 2.7.5]`, link);
      }
      if (link._incomplete === undefined) {
        if (inc.deliveries.available() <= 0) throw windowViolation(this);
        if (!(link.credit > 0)) {
          discard(this, p, link);
          throw new PeerError('link', C.transferLimitExceeded,
            `transfer on link "${link.name}" without link credit: send only as many messages as the broker's flow allows [AMQP 2.6.7]`, link);
        }
      }
    }
    if (p.aborted === true) { abort(this, frame, link, onTransfer); return; }
    const before = link._incomplete;
    // [AMQP 2.7.5] a delivery is settled if any of its frames says so; rhea reads only the
    // first frame's flag, so one settled on a later frame was answered with a disposition.
    if (before !== undefined && p.settled === true) before.remote_settled = true;
    onTransfer.call(this, frame);
    wrapCounters(inc);
    const open = link._incomplete;
    if (open !== undefined) {
      // [AMQP 2.7.3] max-message-size: refuse a delivery as soon as it passes it, not after
      // buffering it whole (a complete message over the limit is rejected by server.ts).
      const bytes = (open[BYTES] ?? 0) + (Buffer.isBuffer(frame.payload) ? frame.payload.length : 0);
      open[BYTES] = bytes;
      const max = server ? maxMessageSize(link) : 0;
      if (max > 0 && bytes > max) tooLarge(link, open, bytes, max);
      if (max > 0) holdUnfinished(this.connection, link, open, max);
    } else {
      // A pre-settled delivery needs no disposition [AMQP 2.6.12]: free its window slot now.
      const d = before ?? inc.deliveries.get_tail();
      if (d !== undefined && d.remote_settled === true && !d.settled) d.settled = true;
    }
    // Frames keep arriving with nothing else to do (a long multi-frame delivery, pre-settled
    // messages): give rhea the chance to settle and widen the window, as it does after a
    // disposition, or a sender that waits for our flow would wait forever.
    // (Against the buffer's capacity: rhea's own test, against what is free now, shrinks with
    // every delivery not yet removed and never fires.)
    if (2 * (inc.max_transfer_id - inc.next_transfer_id) < inc.deliveries.capacity) this.connection._register();
  };
}

/** Per connection: the unfinished deliveries it holds, with their links. */
const UNFINISHED = Symbol('tidemark.unfinished');

/**
 * The bytes a connection's unfinished deliveries may hold together: twice the largest message.
 * max-message-size bounds one delivery, but a client may leave one unfinished per link and
 * session and never end them (heartbeats keep the connection): 30 sessions each holding a
 * 15 MB delivery grew the broker by 450 MB (session 22). Past the budget the link whose frame
 * went over is detached with amqp:resource-limit-exceeded and its delivery dropped.
 */
function holdUnfinished(conn: any, link: Link, d: Delivery, max: number): void {
  const held: Map<Delivery, Link> = (conn[UNFINISHED] ??= new Map());
  held.set(d, link);
  let total = 0;
  for (const [x, l] of held) {
    if (l._incomplete !== x || !l.state?.remote_open) { held.delete(x); continue; } // finished, dropped or detached
    total += x[BYTES] ?? 0;
  }
  if (total <= 2 * max) return;
  held.delete(d);
  dropIncomplete(link, d);
  throw new PeerError('link', C.resourceLimit,
    `unfinished messages on this connection hold ${total} bytes, over twice the max-message-size of ${max} bytes: ` +
    `the one on link "${link.name}" was dropped; finish a message before starting others`, link);
}

/** [AMQP 2.6.14, 2.7.5] An aborted delivery is discarded and implicitly settled; no disposition. */
function abort(session: Session, frame: any, link: Link, onTransfer: Fn): void {
  // rhea's own steps for a frame with more=true and no payload: checks the delivery-id
  // sequence and starts (first frame) or continues the delivery, so ids stay in step.
  const p = frame.performative;
  onTransfer.call(session, { ...frame, performative: Object.create(p, { more: { value: true } }), payload: undefined });
  wrapCounters(session.incoming);
  const d = link._incomplete;
  if (d === undefined) return;
  dropIncomplete(link, d);
  // The delivery used its credit and counts in the delivery-count, as the sender counted it.
  if (link.credit > 0) link.credit--;
  link.delivery_count++;
  link.dispatch(DELIVERY_ABORTED, link._context({ delivery: d }));
  session.connection._register();
}

function tooLarge(link: Link, d: Delivery, bytes: number, max: number): never {
  const head = d.frames?.[0];
  dropIncomplete(link, d);
  // Malformed beats too large: a message that already shows values nested beyond what any
  // decoder accepts is a decode error, as it would be below the limit (docs/robustness.md).
  if (Buffer.isBuffer(head) && nestedTooDeep(head, MAX_NESTING)) {
    throw new PeerError('connection', C.decodeError, `malformed message: values nested more than ${MAX_NESTING} levels deep (nested too deeply)`);
  }
  throw new PeerError('link', C.messageSizeExceeded,
    `message on link "${link.name}" is over the link's max-message-size of ${max} bytes (${bytes} bytes buffered and more to come): ` +
    'it was dropped; send messages of at most that size [AMQP 2.7.3]', link);
}

/* ---------- 6. attach [AMQP 2.6.1, 2.6.2, 2.7.3] ---------- */

type LinkCtor = new (session: Session, name: string, handle: number, opts: unknown) => Link;

function patchAttach(proto: SessionProto, links: { Sender: LinkCtor; Receiver: LinkCtor }): void {
  const onAttach = proto.on_attach;
  proto.on_attach = function guardedOnAttach(this: Session, frame: any) {
    const p = frame?.performative;
    if (this.connection.is_server !== true || p === undefined) return onAttach.call(this, frame);
    // [AMQP 2.6.2, 2.8.17] a handle is bound to one link until that link's detach arrives.
    const holder = this.remote.handles[p.handle];
    if (holder !== undefined && holder.state?.remote_open) {
      throw new PeerError('session', C.handleInUse,
        `attach of link "${String(p.name)}" on handle ${String(p.handle)}, which link "${holder.name}" still uses: a handle is free again only after its detach [AMQP 2.6.2]`, this);
    }
    // [AMQP 2.6.1] a link name is unique among the links of one direction: a second attach of
    // an attached (name, role) is refused on its own. (Not amqp:link:stolen: that condition
    // is for the existing attachment when a new one takes it over, and the one attached here
    // keeps working.)
    const weSend = p.role === true;
    const byName = this.links[p.name];
    const same = byName !== undefined && byName.is_sender() === weSend ? byName : this.links[roleKey(p.name, weSend)];
    if (same !== undefined && same.state?.remote_open) {
      refuseAttach(this, frame, links,
        `link name "${String(p.name)}" is already attached on this session as a ${weSend ? 'receiver' : 'sender'} (client side); ` +
        'link names must be unique per direction: detach the first link or pick another name [AMQP 2.6.1]');
      return;
    }
    return onAttach.call(this, frame);
  };
  const removeLink = proto.remove_link;
  proto.remove_link = function guardedRemoveLink(this: Session, link: Link) {
    const r = removeLink.call(this, link);
    const key = link?.[REFUSED_KEY];
    if (key !== undefined && this.links[key] === link) delete this.links[key];
    return r;
  };
}

/**
 * Answers an attach without opening a link [AMQP 2.6.3]: an attach with a null terminus, then
 * a detach with the error. The link object exists only for rhea to write those two frames and
 * to take the peer's detach; it is kept under a key of its own (`links[name]` stays the
 * attached link) and never reaches the broker.
 */
function refuseAttach(session: Session, frame: any, links: { Sender: LinkCtor; Receiver: LinkCtor }, description: string): void {
  const p = frame.performative;
  const weSend = p.role === true;
  let handle = 0;
  while (session.local.handles[handle]) handle++;
  const Ctor = weSend ? links.Sender : links.Receiver;
  const link = new Ctor(session, p.name, handle, session.get_option(weSend ? 'sender_options' : 'receiver_options', {}));
  const key = `\u0000tidemark:refused:${handle}`;
  link[REFUSED_KEY] = key;
  session.links[key] = link;
  session.local.handles[handle] = link;
  session.remote.handles[p.handle] = link;
  link.state.remote_opened();
  link.remote.attach = p;
  link.local.attach.source = null;
  link.local.attach.target = null;
  link.open();
  link.close({ condition: C.invalidField, description });
}

/* ---------- 10. echo [AMQP 2.7.4] ---------- */

function patchEcho(proto: SessionProto): void {
  const onFlow = proto.on_flow;
  proto.on_flow = function echoingOnFlow(this: Session, frame: any) {
    const r = onFlow.call(this, frame);
    if (frame?.performative?.echo === true) answerEcho(this, frame.performative.handle);
    return r;
  };
}

function answerEcho(session: Session, handle: unknown): void {
  // Only over a begin (and attach) already written and not yet ended (detached): a flow on
  // an endpoint the peer has not seen from us would break the protocol, and one we closed
  // has no state to report.
  const written = (s: Endpoint | undefined) => !!s?.local_open && !s.open_requests;
  if (!written(session.state)) return;
  let link: Link | undefined;
  if (handle !== undefined && handle !== null) {
    link = session.remote.handles[String(handle)];
    if (!link || !written(link.state)) return;
  }
  // _write_flow reads these fields of a link; a stand-in keeps rhea's drain bookkeeping out
  // of it (_get_drain would end a drain in progress).
  session._write_flow(link ? { _get_drain: () => false, delivery_count: link.delivery_count, credit: link.credit, local: { handle: link.local.handle } } : undefined);
}

/* ---------- 12. a detached link's handle is freed [AMQP 2.6.2] ---------- */

/**
 * rhea frees a link's handle in `remove_link` (after the detach exchange) by
 * `link.remote.handle`, which `Link.on_attach` sets from `frame.handle`: always undefined (the
 * handle is `frame.performative.handle`). So the handle stayed bound to the dead link: a flow
 * on it went to that link instead of ending the session (unattached-handle), a second detach
 * closed the connection ("Detach already received"), and every link attached on a new handle
 * stayed in memory until the session ended. The handle the peer attached with is freed here,
 * only if it still names this link: a peer may attach a new link on it before we remove the old
 * one (rhea removes two ticks after the detach).
 */
function patchHandleRelease(proto: SessionProto): void {
  const removeLink = proto.remove_link;
  proto.remove_link = function releasingRemoveLink(this: Session, link: Link) {
    const r = removeLink.call(this, link);
    const handle = (link?.remote?.attach as { handle?: unknown } | undefined)?.handle;
    if (handle !== undefined && handle !== null && this.remote.handles[String(handle)] === link) delete this.remote.handles[String(handle)];
    return r;
  };
}

/* ---------- 13. a constant outgoing window [AMQP 2.5.6] ---------- */

/** The outgoing-window every session of the process announces, in begin and in every flow. */
export const OUTGOING_WINDOW = 0xffffffff;

/**
 * rhea starts a session's `outgoing.window` at 2^32-1 and takes one off per transfer frame it
 * writes (Outgoing.process); nothing gives it back. It only fills the outgoing-window of our
 * begin and flows, which is ours to choose [AMQP 2.5.6]: rhea sends as the peer's incoming
 * window allows, whatever it announces. So flows announced a window shrinking with every
 * transfer, and after 2^32-1 transfers on one session a negative one: rhea's encoder threw on
 * every flow of that session and the connection was closed. The window is now a constant:
 * an accessor on Outgoing's prototype that ignores rhea's writes (its constructor's included).
 */
function keepOutgoingWindow(outgoingProto: Record<string, unknown>, probe: Record<string, unknown>): void {
  delete probe.window; // the probe's own property, set before the accessor existed
  Object.defineProperty(outgoingProto, 'window', {
    get: () => OUTGOING_WINDOW,
    set: () => { /* the outgoing window does not run down (see above) */ },
    configurable: true,
  });
}

/* ---------- 7. nesting depth ---------- */

function tooDeepError(): Error {
  const { ProtocolError } = require('rhea/lib/errors.js') as { ProtocolError: new (m: string) => Error };
  return Object.assign(new ProtocolError(`malformed value: nested more than ${MAX_NESTING} levels deep (nested too deeply)`), { condition: C.decodeError });
}

/**
 * rhea's Reader reads compounds, arrays and descriptors by recursion, and unwraps what it read
 * by recursion again: deep enough nesting overflows the stack (a RangeError thrown from
 * anywhere, reported as an internal error). Refuse more than MAX_NESTING levels as a decode
 * error instead. Global (the Reader is shared), idempotent.
 */
function guardNesting(Reader: any): void {
  const proto = Reader.prototype;
  if (proto[APPLIED]) return;
  const read = proto.read;
  const readArray = proto.read_array;
  const enter = (r: any): void => {
    const d = (r[DEPTH] ?? 0) + 1;
    if (d > MAX_NESTING) throw tooDeepError();
    r[DEPTH] = d;
  };
  proto.read = function guardedRead(this: any) {
    enter(this);
    try { return read.call(this); } finally { this[DEPTH]--; }
  };
  proto.read_array = function guardedReadArray(this: any, type: unknown) {
    enter(this);
    try { return readArray.call(this, type); } finally { this[DEPTH]--; }
  };
  proto[APPLIED] = true;
}

/**
 * True when the AMQP values at the start of `b` (a prefix: it may end anywhere) open more
 * than `limit` lists or maps inside one another, or chain more than `limit` descriptors.
 * Iterative and bounded by `b.length`; an unknown constructor ends the scan (false).
 */
export function nestedTooDeep(b: Buffer, limit: number): boolean {
  const ends: number[] = [];
  let described = 0;
  let pos = 0;
  const n = b.length;
  while (pos < n) {
    while (ends.length > 0 && pos >= ends[ends.length - 1]) ends.pop();
    const code = b[pos++];
    if (code === 0x00) { if (++described > limit) return true; continue; }
    described = 0;
    if (code >= 0x40 && code <= 0x45) continue;
    if (code >= 0x50 && code <= 0x56) { pos += 1; continue; }
    if (code === 0x60 || code === 0x61) { pos += 2; continue; }
    if (code >= 0x70 && code <= 0x74) { pos += 4; continue; }
    if (code >= 0x80 && code <= 0x84) { pos += 8; continue; }
    if (code === 0x94 || code === 0x98) { pos += 16; continue; }
    if (code === 0xa0 || code === 0xa1 || code === 0xa3) { if (pos >= n) return false; pos += 1 + b[pos]; continue; }
    if (code === 0xb0 || code === 0xb1 || code === 0xb3) { if (pos + 4 > n) return false; pos += 4 + b.readUInt32BE(pos); continue; }
    if (code === 0xc0 || code === 0xc1) { if (pos >= n) return false; ends.push(pos + 1 + b[pos]); pos += 2; }
    else if (code === 0xd0 || code === 0xd1) { if (pos + 4 > n) return false; ends.push(pos + 4 + b.readUInt32BE(pos)); pos += 8; }
    else if (code === 0xe0) { if (pos >= n) return false; pos += 1 + b[pos]; continue; }
    else if (code === 0xf0) { if (pos + 4 > n) return false; pos += 4 + b.readUInt32BE(pos); continue; }
    else return false;
    if (ends.length > limit) return true;
  }
  return false;
}
