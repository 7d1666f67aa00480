/**
 * Run-time fixes for two server-side bugs in rhea 3.0.5 (see docs/rhea-patches.md).
 *
 * 1. Disposition ranges carry the wrong outcome (AMQP 1.0 [2.7.6]).
 *    session.js `write_dispositions()` coalesces the deliveries settled in one tick into
 *    `disposition(first..last, state)` frames. It only compares outcomes once a range holds
 *    two or more deliveries (`first !== last && !are_outcomes_equivalent(...)`), so the
 *    second delivery of every range is merged regardless of its outcome: accept+release
 *    goes out as one `accepted` range, reject+release as one `rejected` range. A
 *    disposition range asserts ONE state for every delivery in [first, last], so this is a
 *    wrong outcome on the wire. `write_dispositions` is module-private; its only way out is
 *    `Session.prototype.output`, so the fix sits there: a disposition frame covering more
 *    than one delivery is checked against the per-delivery state rhea itself holds (the
 *    same `delivery.state`/`delivery.settled` write_dispositions read) and, only when
 *    they differ, split into ranges of equal outcome. Frames that are already right are
 *    written untouched.
 *
 * 2. Links are keyed by name only (AMQP 1.0 [2.6.1]).
 *    A link name is unique only among links of the same direction between two containers,
 *    so a link is identified by (name, role). rhea's `Session.links` map is keyed by name:
 *    an incoming attach finds the opposite-role link with that name and fails with
 *    `Attach already received`, and creating the second link would overwrite the first in
 *    the map (which rhea iterates to process links). Proton names links
 *    `<container>-<address>`, so its sender and receiver on one address in one session hit
 *    this. The fix keeps `Session.links` keyed by name for the normal case and stores the
 *    second link of a colliding (name, opposite role) pair under a role-qualified key;
 *    attach lookup, link creation and link removal are made role-aware.
 *
 * 3. rhea does not know the transaction types of AMQP 1.0 part 4 (used by transactions.ts).
 *    A `coordinator` target [4.5.1] is dropped by terminus.unwrap (it becomes a typed null,
 *    descriptor lost, with a console warning), and the `declared` [4.5.4] and
 *    `transactional-state` [4.5.5] delivery states make message.unwrap_outcome print
 *    'unrecognised outcome'. The fix wraps both decoders (module functions rhea calls through
 *    the module object) to return composites for those descriptors; every other descriptor
 *    goes to rhea's own code. A transactional-state disposition on an outgoing delivery is
 *    then dispatched by rhea as a `transactional_state` event (its composite_type). A
 *    transfer's own `state` field is typed `delivery_state`, which rhea unwraps to a bare
 *    list (descriptor lost), so `Session.on_transfer` hands rhea a view of a transfer whose
 *    raw state is a transactional-state with that state decoded (other transfers untouched).
 *
 * The patch checks the rhea version and the shape of everything it touches before it
 * changes anything, and throws if they differ: it was verified against rhea 3.0.5 only.
 * It is idempotent. Tests: spec/integration/rhea-patches.spec.ts.
 */
import { onTransfer as leanOnTransfer } from './incoming-delivery.js';
import { createRequire } from 'node:module';
import rhea from 'rhea';

/** rhea version the patch was written and verified against. */
export const PATCHED_RHEA_VERSION = '3.0.5';

const APPLIED = Symbol.for('tidemark.rhea-patches.applied');
/** Numeric descriptor of the AMQP disposition performative. */
const DISPOSITION_CODE = 0x15;

/* Minimal views of the rhea internals touched here (rhea's typings do not describe them). */
interface RheaDelivery {
  id: number;
  state: unknown;
  settled: boolean;
}
interface DeliveryBuffer {
  by_id(id: number): RheaDelivery | undefined;
  readonly size: number;
}
interface RheaLink {
  name: string;
  is_sender(): boolean;
  on_attach(frame: AttachFrame): void;
  remote: { attach?: unknown };
}
interface AttachFrame {
  performative: { name: string; role: boolean; handle: number };
}
interface DispositionFields {
  role: boolean;
  first: number;
  last: number;
  settled: boolean;
  state: unknown;
}
interface FrameClass {
  descriptor?: { numeric?: number };
  create(fields: DispositionFields): unknown;
}
interface RheaSession {
  links: Record<string, RheaLink>;
  remote: { handles: Record<number, RheaLink> };
  incoming: { deliveries: DeliveryBuffer };
  outgoing: { deliveries: DeliveryBuffer };
  create_sender(name: string): RheaLink;
  create_receiver(name: string): RheaLink;
}
type Fn = (this: RheaSession, ...args: any[]) => any;
type SessionProto = Record<string, Fn> & { [APPLIED]?: true };

/**
 * Key under which the second link of a (name, role) pair is stored when the plain name is
 * already taken by the link of the opposite role. Begins with NUL, which no real link name
 * in practice does.
 */
export function roleKey(name: string, sender: boolean): string {
  return `\u0000tidemark:${sender ? 'sender' : 'receiver'}:${name}`;
}

function fail(what: string, version: string): never {
  throw new Error(
    `applyRheaPatches: rhea internals changed (${what}); the patch was verified against rhea ` +
      `${PATCHED_RHEA_VERSION}, found ${version}. Re-check the two bugs in docs/rhea-patches.md ` +
      `against this version, then update or drop lib/core/protocol/rhea-patches.ts.`,
  );
}

/** Source fingerprints of the rhea 3.0.5 code the patch relies on (whitespace-insensitive). */
function hasSource(fn: unknown, ...snippets: string[]): boolean {
  if (typeof fn !== 'function') return false;
  const src = Function.prototype.toString.call(fn).replace(/\s+/g, '');
  return snippets.every((s) => src.includes(s.replace(/\s+/g, '')));
}

export function applyRheaPatches(): void {
  // A throw-away session (no socket, nothing registered) to reach rhea's prototypes through
  // its public API, so the patch works on the very module instances `import rhea` loads.
  const probe = rhea.create_connection({ id: 'tidemark-rhea-patch-probe', host: '127.0.0.1', port: 0 }).create_session() as unknown as RheaSession;
  const proto = Object.getPrototypeOf(probe) as SessionProto;
  if (proto[APPLIED]) return;

  const version = String((createRequire(import.meta.url)('rhea/package.json') as { version?: unknown }).version);
  if (version !== PATCHED_RHEA_VERSION) fail('version', version);

  const incomingProto = Object.getPrototypeOf(probe.incoming) as Record<string, unknown>;
  const outgoingProto = Object.getPrototypeOf(probe.outgoing) as Record<string, unknown>;
  const checks: Array<[string, boolean]> = [
    ['Session.output', hasSource(proto.output, 'this.connection._write_frame(this.local.channel, frame, payload)')],
    ['Incoming.process', hasSource(incomingProto.process, 'write_dispositions(this.updated)', 'pop_if')],
    ['Outgoing.process', hasSource(outgoingProto.process, 'write_dispositions(this.pending_dispositions)', 'pop_if')],
    ['delivery buffers', typeof probe.incoming.deliveries?.by_id === 'function' && typeof probe.outgoing.deliveries?.by_id === 'function'],
    ['message.are_outcomes_equivalent', typeof rhea.message?.are_outcomes_equivalent === 'function'],
    ['Session.links', typeof probe.links === 'object' && probe.links !== null],
    ['Session.on_attach', hasSource(proto.on_attach, 'var link = this.links[name];', 'this.remote.handles[frame.performative.handle] = link;', 'link.on_attach(frame);')],
    ['Session.create_link', hasSource(proto.create_link, 'this.links[name] = l;')],
    ['Session.remove_link', hasSource(proto.remove_link, 'delete this.links[link.name];')],
    ['Session.create_sender/create_receiver', typeof proto.create_sender === 'function' && typeof proto.create_receiver === 'function'],
    // 3. transactions (lib/core/protocol/transactions.ts): the decoders the patch wraps.
    ['terminus.unwrap', hasSource(rheaTerminus().unwrap, 'var c = by_descriptor[field.descriptor.value];', 'return null;')],
    ['Link.on_attach', hasSource(rheaLink().Receiver?.prototype?.on_attach, 'frame.performative.target = terminus.unwrap(frame.performative.target);')],
    ['message.unwrap_outcome', hasSource((rhea as any).message?.unwrap_outcome, 'var c = outcomes[outcome.descriptor.value];', 'unrecognised outcome')],
    ['Outgoing.process dispatch', hasSource(outgoingProto.process, 'd.link.dispatch(d.remote_state.constructor.composite_type')],
    ['Session.on_transfer', hasSource(proto.on_transfer, 'this.incoming.on_transfer(frame, this._get_link(frame));')],
    // (rhea-tuning may have put incoming-delivery.ts's equivalent in its place: it installs
    // itself only over the rhea code it mirrors, which passes the state through the same way.)
    ['Incoming.on_transfer', incomingProto.on_transfer === leanOnTransfer || hasSource(incomingProto.on_transfer, "'remote_state': frame.performative.state,")],
    ['transfer.state field', transferStateIndex() === TRANSFER_STATE_INDEX],
    // 8. typed maps in map fields (error info)
    ['types.wrap_map', hasSource(rheaTypes().wrap_map, 'for (var k in m) {', 'return types.Map32(items);')],
  ];
  for (const [what, ok] of checks) if (!ok) fail(what, version);

  patchDispositionRanges(proto);
  patchLinkIdentity(proto);
  patchTransactionTypes(proto);
  patchTypedMapFields();
  Object.defineProperty(proto, APPLIED, { value: true });
}

/* ---------- 1. disposition ranges [2.7.6] ---------- */

function sameOutcome(a: RheaDelivery, b: RheaDelivery): boolean {
  // rhea's own notion of "same outcome" (accepted, or both without state), plus identity.
  return a.settled === b.settled && (a.state === b.state || rhea.message.are_outcomes_equivalent(a.state, b.state));
}

function patchDispositionRanges(proto: SessionProto): void {
  const output = proto.output;
  proto.output = function patchedOutput(this: RheaSession, frame: any, payload?: unknown) {
    // Only rhea's write_dispositions emits disposition frames; ranges of one are always right.
    const cls = frame?.constructor as FrameClass | undefined;
    if (payload !== undefined || cls?.descriptor?.numeric !== DISPOSITION_CODE) return output.call(this, frame, payload);
    const first = frame.first as number;
    const last = frame.last as number | undefined;
    if (last === undefined || last === null || last === first) return output.call(this, frame, payload);

    // role true = we are the receiver: the range names incoming deliveries.
    const buffer = frame.role ? this.incoming.deliveries : this.outgoing.deliveries;
    // Ids are serial numbers (a range may cross 2^32: 0xffffffff..1); rhea's counters may be past it.
    const count = ((last - first) >>> 0) + 1;
    if (count > buffer.size) return output.call(this, frame, payload);
    const range: RheaDelivery[] = [];
    for (let i = 0; i < count; i++) {
      const d = buffer.by_id(first + i);
      // Cannot resolve (should not happen: rhea writes before it drops settled deliveries):
      // leave rhea's frame as it is rather than guess.
      if (d === undefined || ((d.id - (first + i)) >>> 0) !== 0) return output.call(this, frame, payload);
      range.push(d);
    }
    if (range.every((d) => sameOutcome(range[0], d))) return output.call(this, frame, payload);

    let start = 0;
    for (let i = 1; i <= range.length; i++) {
      if (i === range.length || !sameOutcome(range[start], range[i])) {
        const head = range[start];
        output.call(
          this,
          cls.create({ role: frame.role, first: head.id >>> 0, last: range[i - 1].id >>> 0, settled: head.settled, state: head.state }),
        );
        start = i;
      }
    }
  };
}

/* ---------- 2. link identity is (name, role) [2.6.1] ---------- */

function patchLinkIdentity(proto: SessionProto): void {
  const onAttach = proto.on_attach;
  const createLink = proto.create_link;
  const removeLink = proto.remove_link;

  // Invariant: links[name] holds the first link of that name; links[roleKey(name, role)]
  // holds the link of the other role only while links[name] is taken.

  proto.on_attach = function patchedOnAttach(this: RheaSession, frame: AttachFrame) {
    const name = frame.performative.name;
    const weSend = frame.performative.role === true; // peer is receiver => our end is a sender
    const byName = this.links[name];
    if (byName === undefined || byName.is_sender() === weSend) return onAttach.call(this, frame);
    // The name belongs to our link of the other role: this attach is a different link.
    // Same steps as rhea's on_attach, on the role-aware lookup.
    const link = this.links[roleKey(name, weSend)] ?? (weSend ? this.create_sender(name) : this.create_receiver(name));
    this.remote.handles[frame.performative.handle] = link;
    link.on_attach(frame);
    link.remote.attach = frame.performative;
  };

  proto.create_link = function patchedCreateLink(this: RheaSession, name: string, ctor: unknown, opts: unknown) {
    const prior = this.links[name];
    const link = createLink.call(this, name, ctor, opts) as RheaLink; // sets links[name] = link
    if (prior !== undefined && prior !== link && prior.is_sender() !== link.is_sender()) {
      this.links[name] = prior;
      this.links[roleKey(name, link.is_sender())] = link;
    }
    return link;
  };

  proto.remove_link = function patchedRemoveLink(this: RheaSession, link: RheaLink) {
    const name = link.name;
    const byName = this.links[name];
    removeLink.call(this, link); // drops the handles and links[name]
    if (byName !== undefined && byName !== link) this.links[name] = byName; // links[name] was not this link
    const own = roleKey(name, link.is_sender());
    if (this.links[own] === link) delete this.links[own];
    const other = roleKey(name, !link.is_sender());
    if (this.links[name] === undefined && this.links[other] !== undefined) {
      this.links[name] = this.links[other];
      delete this.links[other];
    }
  };
}

/* ---------- 3. transaction types: coordinator terminus, declared, transactional-state [AMQP 4.5] ---------- */

const rheaRequire = createRequire(import.meta.url);
function rheaTerminus(): { unwrap: (field: any) => unknown } { return rheaRequire('rhea/lib/terminus.js'); }
function rheaTypes(): { wrap_map: (m: any, keyWrapper?: unknown) => unknown } { return rheaRequire('rhea/lib/types.js'); }
function rheaLink(): { Receiver?: { prototype?: Record<string, unknown> } } { return rheaRequire('rhea/lib/link.js'); }

/** Descriptor codes and symbols of the transaction types [AMQP 4.5]. */
export const TX_TYPES = {
  coordinator: { code: 0x30, symbol: 'amqp:coordinator:list' },
  declare: { code: 0x31, symbol: 'amqp:declare:list' },
  discharge: { code: 0x32, symbol: 'amqp:discharge:list' },
  declared: { code: 0x33, symbol: 'amqp:declared:list' },
  transactionalState: { code: 0x34, symbol: 'amqp:transactional-state:list' },
} as const;

const T: any = (rhea as any).types;

/**
 * rhea composites for the transaction types (encode with `X.create(fields).described()`).
 * Defined once per process and shared: rhea keeps one decoder per descriptor, so a second
 * definition (a second instance of this module, as test runners can load) would make decoded
 * values instances of another class.
 */
const TX_CLASSES: { Coordinator: any; Declared: any; TransactionalState: any } = ((globalThis as any)[Symbol.for('tidemark.rhea-tx-types')] ??= (() => {
  const Coordinator = T.define_composite({ name: 'coordinator', code: TX_TYPES.coordinator.code, fields: [{ name: 'capabilities', type: 'symbol', multiple: true }] });
  const Declared = T.define_composite({ name: 'declared', code: TX_TYPES.declared.code, fields: [{ name: 'txn_id', type: 'binary', mandatory: true }] });
  const TransactionalState = T.define_composite({
    name: 'transactional_state', code: TX_TYPES.transactionalState.code,
    fields: [{ name: 'txn_id', type: 'binary', mandatory: true }, { name: 'outcome', type: '*' }],
  });
  Declared.composite_type = 'declared';
  TransactionalState.composite_type = 'transactional_state';
  return { Coordinator, Declared, TransactionalState };
})());
export const Coordinator: any = TX_CLASSES.Coordinator;
export const Declared: any = TX_CLASSES.Declared;
export const TransactionalState: any = TX_CLASSES.TransactionalState;

/** True when a descriptor value (numeric or symbolic) names the given transaction type. */
export function isTxDescriptor(value: unknown, type: { code: number; symbol: string }): boolean {
  if (typeof value === 'string') return value === type.symbol;
  if (typeof value === 'number' || typeof value === 'bigint') return Number(value) === type.code;
  return false;
}

/** Index of `state` in the transfer performative's field list [AMQP 2.7.5]. */
const TRANSFER_STATE_INDEX = 7;
function transferStateIndex(): number {
  const proto = Object.getPrototypeOf(rheaRequire('rhea/lib/frames.js').transfer({ handle: 0 }));
  const fields = Object.getOwnPropertyNames(proto).filter((n) => !['constructor', 'dispatch', 'toJSON', 'described'].includes(n));
  return fields.indexOf('state');
}

function patchTransactionTypes(proto: SessionProto): void {
  const onTransfer = proto.on_transfer;
  proto.on_transfer = function patchedOnTransfer(this: RheaSession, frame: any) {
    const raw = frame?.performative?.value?.[TRANSFER_STATE_INDEX];
    if (raw?.descriptor && isTxDescriptor(raw.descriptor.value, TX_TYPES.transactionalState)) {
      const state = new TransactionalState(raw.value ?? []);
      frame = { ...frame, performative: Object.create(frame.performative, { state: { value: state } }) };
    }
    return onTransfer.call(this, frame);
  };

  const terminus = rheaTerminus();
  const unwrapTerminus = terminus.unwrap;
  terminus.unwrap = function patchedTerminusUnwrap(field: any) {
    if (field?.descriptor && isTxDescriptor(field.descriptor.value, TX_TYPES.coordinator)) return new Coordinator(field.value);
    return unwrapTerminus.call(this, field);
  };
  const message: any = (rhea as any).message;
  const unwrapOutcome = message.unwrap_outcome;
  message.unwrap_outcome = function patchedUnwrapOutcome(outcome: any) {
    const d = outcome?.descriptor?.value;
    if (d !== undefined && !(outcome instanceof Declared) && !(outcome instanceof TransactionalState)) {
      if (isTxDescriptor(d, TX_TYPES.declared)) return new Declared(outcome.value);
      if (isTxDescriptor(d, TX_TYPES.transactionalState)) return new TransactionalState(outcome.value);
    }
    return unwrapOutcome.call(this, outcome);
  };
}

/* ---------- 8. typed maps in map fields (error info) ---------- */

/**
 * A composite field of type `map` (the `info` of an error [AMQP 2.8.15], a `fields` map:
 * symbol keys) is always set through `types.wrap_map(value)`, which walks the value's
 * enumerable properties as string keys. Given a map that is already typed (symbol keys, ulong
 * SCNs, as errors.ts amqpInfo builds it) it encoded the Typed object itself: keys `type`,
 * `value`, `toString`…, the entries buried under `value`, so a client read no `oldest-scn`.
 * A typed AMQP map is now kept as it is; anything else goes to rhea's own code.
 */
function patchTypedMapFields(): void {
  const types = rheaTypes();
  const wrapMap = types.wrap_map;
  types.wrap_map = function patchedWrapMap(m: any, keyWrapper?: unknown) {
    if (m !== null && typeof m === 'object' && typeof m.toRheaTyped === 'function' && /^Map(8|32)$/.test(String(m.type?.name))) return m;
    return wrapMap.call(this, m, keyWrapper);
  };
}
