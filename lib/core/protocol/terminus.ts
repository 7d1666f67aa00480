/** Reading what a peer put in a source/target terminus (wire.md 2.1, 4). */
import rhea from 'rhea';
import { AddressSyntaxError, addressToLinkOptions, parseAddress, QPID_OPTIONS } from '../../address/index.js';
import { TidemarkError, Conditions } from '../errors.js';

/**
 * Sets an own entry: a key from the peer or an address may be `__proto__`, which assignment
 * turns into the object's prototype (the entry vanished, and its value's fields were inherited).
 */
function setOwn(o: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(o, key, { value, enumerable: true, writable: true, configurable: true });
}

/**
 * A terminus whose address is a whole Qpid address with options (`q; {create: always, ...}`),
 * as a plain AMQP client (rhea, Proton) sends it when given the string our docs show: read as
 * qpid::messaging would have put it in the attach (docs/addresses.md "Sent by a plain
 * client"). The options' fields replace the terminus's, the rest is kept, and `qpidAddress`
 * holds the string for the reply. Before, such a
 * client got a queue named after the whole string, without its arguments. `role` is the
 * client's: 'sender' reads a target, 'receiver' a source. Any other terminus is returned as is.
 */
export function expandQpidAddress(t: any, role: 'sender' | 'receiver', isQueueName: (name: string) => boolean = () => false): any {
  const address = t?.address;
  if (typeof address !== 'string' || !QPID_OPTIONS.test(address)) return t;
  // A queue that has this very name (made before the broker read such addresses; new ones
  // are refused, node-registry.ts) is that queue: the console and tools attach by name.
  if (isQueueName(address)) return t;
  let derived: Record<string, unknown> | undefined;
  try {
    const parsed = parseAddress(address);
    if (role === 'sender' && parsed.subject !== undefined) {
      // qpid::messaging puts a sender's subject on each message it sends; the broker cannot
      // (it keeps messages as they came), and dropping it would lose what receivers filter on.
      throw new TidemarkError(Conditions.invalidField, `address ${JSON.stringify(address)}: a subject in a sender's address (/${parsed.subject}) is set on each message by clients that read Qpid addresses (spout does); from this client set the message's subject and attach to ${JSON.stringify(address.replace('/' + parsed.subject, ''))}`);
    }
    const opts = addressToLinkOptions(parsed, role);
    derived = role === 'sender' ? opts.target : opts.source;
  } catch (e) {
    if (!(e instanceof AddressSyntaxError)) throw e;
    throw new TidemarkError(Conditions.invalidField, `address ${JSON.stringify(address)} holds Qpid address options the broker cannot read: ${e.message}`);
  }
  // A plain copy of the decoded fields (rhea's terminus keeps them in one array behind
  // accessors, which the peer's attach still shares).
  const out: any = {};
  for (const k in t) if (k !== 'value' && typeof t[k] !== 'function') out[k] = t[k];
  out.address = undefined;
  // The reply names the address as the client gave it: Proton's blocking client closes a link
  // whose reply address differs from the one it asked for ("target does not match").
  out.qpidAddress = address;
  for (const [k, v] of Object.entries(derived ?? {})) {
    if (k === 'filter') {
      const f: Record<string, unknown> = {};
      for (const [name, d] of Object.entries(v as Record<string, { descriptor: number | string; value: unknown }>)) setOwn(f, name, rhea.types.wrap_described(d.value, d.descriptor));
      out.filter = f;
    } else {
      out[k] = v;
    }
  }
  return out;
}

/** Capabilities as a list, whether the peer sent one symbol or an array. */
export function capabilities(t: any): string[] {
  const c = t?.capabilities;
  if (c === undefined || c === null) return [];
  return (Array.isArray(c) ? c : [c]).map((x) => String(x?.value ?? x));
}

/** Node properties as a plain map with plain values. */
export function nodeProperties(t: any): Record<string, unknown> {
  const p = t?.dynamic_node_properties;
  if (!p || typeof p !== 'object') return {};
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(p)) setOwn(out, k, plainValue(v));
  return out;
}

export function plainValue(v: any): unknown {
  if (v === null || v === undefined) return v;
  if (typeof v === 'object' && 'value' in v && v.type !== undefined && typeof v.toRheaTyped === 'function') return plainValue(v.value);
  if (Array.isArray(v)) return v.map(plainValue);
  return v;
}

export interface RawFilter {
  /** Key in the peer's filter map (echoed back). */
  key: string;
  /** Descriptor as a symbol string, or the ulong as a decimal string. */
  descriptor: string;
  /** Filter value. */
  value: unknown;
  /** The value exactly as received, to echo. */
  raw: unknown;
}

/** The entries of a source filter map with their descriptors. */
export function filters(source: any): RawFilter[] {
  const f = source?.filter;
  if (!f || typeof f !== 'object') return [];
  const out: RawFilter[] = [];
  for (const [key, raw] of Object.entries<any>(f)) {
    let descriptor = '';
    let value: unknown = raw;
    if (raw && typeof raw === 'object' && raw.descriptor !== undefined) {
      const d = raw.descriptor;
      const dv = d?.value ?? d;
      descriptor = typeof dv === 'bigint' ? dv.toString() : typeof dv === 'number' ? String(dv) : Buffer.isBuffer(dv) ? BigInt('0x' + dv.toString('hex')).toString() : String(dv);
      // rhea keeps the described value as the typed value itself with a `descriptor` field.
      value = typeof raw.toRheaTyped === 'function' ? unwrapValue(raw) : unwrapValue(raw.value);
    }
    out.push({ key, descriptor, value, raw });
  }
  return out;
}

/** Plain JS value from a possibly typed rhea value (maps with symbol keys become objects). */
export function unwrapValue(v: any): unknown {
  if (v === null || v === undefined) return v;
  if (Buffer.isBuffer(v)) return v;
  if (Array.isArray(v)) return v.map(unwrapValue);
  if (typeof v === 'object' && typeof v.toRheaTyped === 'function') {
    // Typed: maps arrive as a flat [k, v, k, v] list.
    if (v.type?.name?.startsWith('Map') && Array.isArray(v.value)) {
      const o: Record<string, unknown> = {};
      for (let i = 0; i + 1 < v.value.length; i += 2) setOwn(o, String(unwrapValue(v.value[i])), unwrapValue(v.value[i + 1]));
      return o;
    }
    return unwrapValue(v.value);
  }
  if (typeof v === 'object' && !(v instanceof Date)) {
    const o: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) setOwn(o, k, unwrapValue(x));
    return o;
  }
  return v;
}
