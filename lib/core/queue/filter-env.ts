/**
 * The value lookup filters evaluate against (same shape as lib/filter's FilterEnv), built over
 * a decoded message, or over stored bytes decoded only as far as the filter reads: the head
 * (properties, application properties) for a selector, the body too for a body path. The JSON
 * view of the body is parsed at most once per env.
 */
import { jsonBody } from '../../codec/json-body.js';
import { readApplicationProperties } from '../../codec/app-properties.js';
import { sourceBytes, decodeMessage } from '../../codec/message-bytes.js';
import { headLength } from '../../codec/message-head.js';
import { lookupJsonPath } from '../../filter/json-path.js';
import type { Budget } from '../../filter/search.js';

export interface FilterEnv {
  bodyPath(path: readonly (string | number)[], budget?: Budget): unknown;
  property(name: string): unknown;
  /** The message's `properties.subject` (legacy subject bindings: never an application property). */
  subject(): unknown;
}

/**
 * Header and properties fields by name, on an object without a prototype: a property name is
 * the client's, and `valueOf` or `constructor` looked up on a plain object found
 * Object.prototype's functions (which threw, or matched, when called on the message). A literal
 * given a null prototype stays a fast object (a Map cost ~10 ns more per lookup).
 */
const HEADER_FIELDS: Readonly<Record<string, ((m: any) => unknown) | undefined>> = Object.setPrototypeOf({
  subject: (m: any) => m.subject,
  priority: (m: any) => m.priority ?? 4,
  message_id: (m: any) => m.message_id,
  user_id: (m: any) => (m.user_id ? Buffer.from(m.user_id).toString('utf8') : undefined),
  to: (m: any) => m.to,
  reply_to: (m: any) => m.reply_to,
  correlation_id: (m: any) => m.correlation_id,
  content_type: (m: any) => m.content_type,
  content_encoding: (m: any) => m.content_encoding,
  creation_time: (m: any) => (m.creation_time instanceof Date ? m.creation_time.getTime() : m.creation_time),
  absolute_expiry_time: (m: any) => (m.absolute_expiry_time instanceof Date ? m.absolute_expiry_time.getTime() : m.absolute_expiry_time),
  group_id: (m: any) => m.group_id,
  group_sequence: (m: any) => m.group_sequence,
  durable: (m: any) => m.durable ?? false,
  ttl: (m: any) => m.ttl,
  delivery_count: (m: any) => m.delivery_count ?? 0,
  first_acquirer: (m: any) => m.first_acquirer ?? false,
  JMSPriority: (m: any) => m.priority ?? 4,
  JMSMessageID: (m: any) => m.message_id,
  JMSCorrelationID: (m: any) => m.correlation_id,
  JMSDeliveryMode: (m: any) => (m.durable ? 'PERSISTENT' : 'NON_PERSISTENT'),
  JMSType: (m: any) => m.subject,
  JMSTimestamp: (m: any) => (m.creation_time instanceof Date ? m.creation_time.getTime() : m.creation_time),
  JMSExpiration: (m: any) => (m.absolute_expiry_time instanceof Date ? m.absolute_expiry_time.getTime() : m.absolute_expiry_time),
  JMSRedelivered: (m: any) => (m.delivery_count ?? 0) > 0,
}, null);

/**
 * Whether rhea's value of an application property may not be what was sent: rhea reads a
 * long/ulong past 2^53 rounded, and past 2^53 + 2^32 as its 8 bytes (types.js read_long).
 * A double that large, or a binary of 8 bytes, is checked too (and comes back as it was).
 */
function mayBeInexactLong(v: unknown): boolean {
  return typeof v === 'number' ? v >= 9007199254740992 || v <= -9007199254740992
    : typeof v === 'object' && v !== null && v instanceof Uint8Array && v.length === 8;
}

const NOT_JSON = Symbol('not-json');

/**
 * Stored bytes a filter could not decode. The message's fault, not the filter's: a consumer
 * takes such a message as not matching (list-structure.ts), rather than its link failing.
 */
export class UnreadableMessage extends Error {
  constructor(cause: unknown) {
    super(`message cannot be decoded: ${(cause as Error)?.message ?? String(cause)}`);
    this.name = 'UnreadableMessage';
  }
}

/** A FilterEnv over a rhea-decoded message (or stored bytes: ofBytes); reuse one per message. */
export class MessageEnv implements FilterEnv {
  /** The whole decoded message, body included: given, or decoded on the first body read. */
  #full: any;
  /** Decoded without the body (ofBytes, before any body read): what property() and subject() read. */
  #head: any = undefined;
  /** Stored bytes still to decode (ofBytes). */
  #bytes: Buffer | undefined = undefined;
  #json: unknown = undefined;
  #parsed = false;
  /** Application properties read from the bytes with their types, once, when needed. */
  #exact: Map<string, unknown> | null | undefined = undefined;
  constructor(message: any) { this.#full = message; }

  /**
   * An env over stored bytes that decodes nothing until a filter reads a value, then only the
   * sections before the body unless it reads the body. Decode failures throw UnreadableMessage.
   */
  static ofBytes(bytes: Buffer): MessageEnv {
    const env = new MessageEnv(undefined);
    env.#bytes = bytes;
    return env;
  }

  /** The whole decoded message (body included). */
  get message(): any {
    if (this.#full === undefined && this.#bytes !== undefined) this.#full = decodeStored(this.#bytes);
    return this.#full;
  }

  /** The decoded fields outside the body: the whole message when decoded already, else its head. */
  #fields(): any {
    if (this.#full !== undefined || this.#bytes === undefined) return this.#full;
    if (this.#head === undefined) {
      const n = headLength(this.#bytes);
      this.#head = decodeStored(n < 0 || n === this.#bytes.length ? this.#bytes : this.#bytes.subarray(0, n));
      // No body: the head is the whole message.
      if (n === this.#bytes.length) this.#full = this.#head;
    }
    return this.#head;
  }

  /** The body as JSON, or undefined when it is not JSON. Parsed once. */
  json(): unknown {
    if (!this.#parsed) {
      this.#parsed = true;
      const r = jsonBody(this.message);
      this.#json = r.ok ? r.value : NOT_JSON;
    }
    return this.#json === NOT_JSON ? undefined : this.#json;
  }

  /** The value at a body path, as lookupJsonPath reads it (a name across an array collects the elements' values). */
  bodyPath(path: readonly (string | number)[], budget?: Budget): unknown {
    return lookupJsonPath(this.json(), path, budget);
  }

  property(name: string): unknown {
    const m = this.#fields();
    const ap = m.application_properties;
    if (ap && Object.prototype.hasOwnProperty.call(ap, name)) {
      const v = ap[name];
      return mayBeInexactLong(v) ? this.#exactProperty(name, v) : v;
    }
    const f = HEADER_FIELDS[name];
    if (f !== undefined) return f(m);
    // rhea's decode drops an application property called __proto__ (it sets the prototype).
    return name === '__proto__' ? this.#exactProperty(name, undefined) : undefined;
  }

  subject(): unknown {
    return this.#fields().subject;
  }

  /** The property as the bytes hold it (exact longs), or `fallback` when the bytes are not at hand. */
  #exactProperty(name: string, fallback: unknown): unknown {
    if (this.#exact === undefined) {
      const bytes = this.#bytes ?? sourceBytes(this.#full);
      this.#exact = bytes ? readApplicationProperties(bytes) : null;
    }
    return this.#exact !== null && this.#exact.has(name) ? this.#exact.get(name) : fallback;
  }
}

function decodeStored(bytes: Buffer): any {
  try { return decodeMessage(bytes); } catch (err) { throw new UnreadableMessage(err); }
}
