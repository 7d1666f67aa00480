/**
 * rhea's handling of an incoming transfer, with deliveries that share their methods.
 *
 * rhea 3.0.5's `Incoming.on_transfer` builds every delivery as an object literal with five
 * closures of its own (update, accept, release, reject, modified): ~10 % of a receiving
 * client's time streaming a snapshot, and the same per publish in the broker. Here a
 * delivery is an IncomingDelivery whose methods live on its prototype; everything else
 * (the checks and their error texts, the window and credit bookkeeping, the message
 * dispatch) is rhea's code, step for step. One difference a caller could see: a finished
 * delivery's `frames` is undefined where rhea deletes the property.
 * Equality with rhea's own function is checked in spec/unit/protocol/incoming-delivery.spec.ts.
 * What rhea's function does not do (aborted deliveries, the session window, link direction,
 * credit and max-message-size, delivery-ids past 2^32) is done around it, for either
 * version, by rhea-guards.ts (Session.on_transfer), so this stays rhea's steps exactly.
 */

interface RheaMessageModule {
  decode(b: Buffer): unknown;
  accepted(): { described(): unknown };
  released(): { described(): unknown };
  rejected(o: unknown): { described(): unknown };
  modified(o: unknown): { described(): unknown };
}

interface IncomingState {
  next_transfer_id: number;
  next_delivery_id: number | undefined;
  deliveries: { push(d: unknown): void };
  update(d: IncomingDelivery, settled: unknown, state: unknown): void;
}

let message: RheaMessageModule;
/** The session's Incoming, kept under a symbol: not one of the delivery's own fields in rhea. */
const INCOMING = Symbol('tidemark.incoming');

export class IncomingDelivery {
  settled: unknown = false;
  state: unknown = undefined;
  incomplete: unknown = undefined;
  frames: unknown[] | undefined;

  [INCOMING]: IncomingState;

  constructor(
    incoming: IncomingState,
    public id: number,
    public tag: unknown,
    public format: unknown,
    public link: any,
    public remote_settled: unknown,
    public remote_state: unknown,
    payload: unknown,
  ) {
    this.frames = [payload];
    this[INCOMING] = incoming;
  }

  update(settled?: unknown, state?: unknown): void {
    let s = settled;
    if (s === undefined) s = this.link.local.attach.rcv_settle_mode !== 1;
    this[INCOMING].update(this, s, state);
  }

  accept(): void { this.update(undefined, message.accepted().described()); }
  release(params?: unknown): void {
    if (params) this.update(undefined, message.modified(params).described());
    else this.update(undefined, message.released().described());
  }
  reject(error?: unknown): void { this.update(undefined, message.rejected({ error }).described()); }
  modified(params?: unknown): void { this.update(undefined, message.modified(params).described()); }
}

const isDefined = (v: unknown) => v !== undefined && v !== null;

/** rhea's Incoming.on_transfer with IncomingDelivery objects (`this` is the session's Incoming). */
export function onTransfer(this: IncomingState, frame: any, receiver: any): void {
  this.next_transfer_id++;
  if (!receiver.is_remote_open()) throw Error('transfer after detach');
  const p = frame.performative;
  if (this.next_delivery_id === undefined) this.next_delivery_id = p.delivery_id;
  let current: IncomingDelivery;
  if (receiver._incomplete) {
    current = receiver._incomplete;
    if (isDefined(p.delivery_id) && current.id !== p.delivery_id) {
      throw Error('frame sequence error: delivery ' + current.id + ' not complete, got ' + p.delivery_id);
    }
    if (frame.payload) current.frames!.push(frame.payload);
  } else if (this.next_delivery_id === p.delivery_id) {
    current = new IncomingDelivery(this, p.delivery_id, p.delivery_tag, p.message_format, receiver,
      p.settled === undefined ? false : p.settled, p.state, frame.payload);
    this.deliveries.push(current);
    this.next_delivery_id = (this.next_delivery_id as number) + 1;
  } else {
    throw Error('frame sequence error: expected ' + this.next_delivery_id + ', got ' + p.delivery_id);
  }
  current.incomplete = p.more;
  if (current.incomplete) {
    receiver._incomplete = current;
    return;
  }
  receiver._incomplete = undefined;
  const frames = current.frames!;
  const data = frames.length === 1 ? frames[0] : Buffer.concat(frames as Buffer[]);
  current.frames = undefined;
  if (receiver.credit > 0) receiver.credit--;
  else console.error('Received transfer when credit was %d', receiver.credit);
  receiver.delivery_count++;
  const ctx = current.format === 0 ? { message: message.decode(data as Buffer), delivery: current } : { message: data, delivery: current, format: current.format };
  receiver.dispatch('message', receiver._context(ctx));
}

/** rhea's own Incoming.on_transfer, as it was before install (the tests compare against it). */
export let rheaOnTransfer: ((this: unknown, frame: unknown, receiver: unknown) => void) | undefined;

/** Source fingerprints of rhea 3.0.5's Incoming.on_transfer (whitespace-insensitive). */
const FINGERPRINT = [
  "this.next_transfer_id++;",
  "if (receiver._incomplete) {",
  "'remote_settled': frame.performative.settled === undefined ? false : frame.performative.settled,",
  "current.update = function (settled, state) {",
  "settled_ = receiver.local.attach.rcv_settle_mode !== 1;",
  "current.reject = function (error) { this.update(undefined, message.rejected({'error':error}).described()); };",
  "const data = current.frames.length === 1 ? current.frames[0] : Buffer.concat(current.frames);",
  "var msgctxt = current.format === 0 ? {'message':message.decode(data), 'delivery':current} : {'message':data, 'delivery':current, 'format':current.format};",
  "throw Error('transfer after detach');",
];

/**
 * Installs onTransfer on rhea's Incoming prototype when its on_transfer is the code this
 * mirrors; returns false (and changes nothing) otherwise.
 */
export function installIncomingDeliveries(incomingProto: Record<string, unknown>, messageModule: RheaMessageModule): boolean {
  const orig = incomingProto.on_transfer;
  if (typeof orig !== 'function') return false;
  const src = Function.prototype.toString.call(orig).replace(/\s+/g, '');
  if (!FINGERPRINT.every((s) => src.includes(s.replace(/\s+/g, '')))) return false;
  message = messageModule;
  rheaOnTransfer = orig as typeof rheaOnTransfer;
  incomingProto.on_transfer = onTransfer;
  return true;
}
