/**
 * The value lookup filters evaluate against (same shape as lib/filter's FilterEnv), built over
 * a decoded message. The JSON view of the body is parsed at most once per message and cached
 * on the message view, whatever the number of subscribers.
 */
import { jsonBody } from '../../codec/json-body.js';
import { lookupJsonPath } from '../../filter/json-path.js';

export interface FilterEnv {
  bodyPath(path: readonly (string | number)[]): unknown;
  property(name: string): unknown;
}

const HEADER_FIELDS: Record<string, (m: any) => unknown> = {
  subject: (m) => m.subject,
  priority: (m) => m.priority ?? 4,
  message_id: (m) => m.message_id,
  user_id: (m) => (m.user_id ? Buffer.from(m.user_id).toString('utf8') : undefined),
  to: (m) => m.to,
  reply_to: (m) => m.reply_to,
  correlation_id: (m) => m.correlation_id,
  content_type: (m) => m.content_type,
  content_encoding: (m) => m.content_encoding,
  creation_time: (m) => (m.creation_time instanceof Date ? m.creation_time.getTime() : m.creation_time),
  absolute_expiry_time: (m) => (m.absolute_expiry_time instanceof Date ? m.absolute_expiry_time.getTime() : m.absolute_expiry_time),
  group_id: (m) => m.group_id,
  group_sequence: (m) => m.group_sequence,
  durable: (m) => m.durable ?? false,
  ttl: (m) => m.ttl,
  delivery_count: (m) => m.delivery_count ?? 0,
  first_acquirer: (m) => m.first_acquirer ?? false,
  JMSPriority: (m) => m.priority ?? 4,
  JMSMessageID: (m) => m.message_id,
  JMSCorrelationID: (m) => m.correlation_id,
  JMSDeliveryMode: (m) => (m.durable ? 'PERSISTENT' : 'NON_PERSISTENT'),
  JMSType: (m) => m.subject,
  JMSTimestamp: (m) => (m.creation_time instanceof Date ? m.creation_time.getTime() : m.creation_time),
  JMSExpiration: (m) => (m.absolute_expiry_time instanceof Date ? m.absolute_expiry_time.getTime() : m.absolute_expiry_time),
  JMSRedelivered: (m) => (m.delivery_count ?? 0) > 0,
};

const NOT_JSON = Symbol('not-json');

/** A FilterEnv over a rhea-decoded message; reuse one per message. */
export class MessageEnv implements FilterEnv {
  readonly message: any;
  #json: unknown = undefined;
  #parsed = false;
  constructor(message: any) { this.message = message; }

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
  bodyPath(path: readonly (string | number)[]): unknown {
    return lookupJsonPath(this.json(), path);
  }

  property(name: string): unknown {
    const ap = this.message.application_properties;
    if (ap && Object.prototype.hasOwnProperty.call(ap, name)) return ap[name];
    const f = HEADER_FIELDS[name];
    return f ? f(this.message) : undefined;
  }
}
