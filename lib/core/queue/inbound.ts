/** A message arriving from a producer, before it is stored. */
export interface InboundMessage {
  /** The original encoded AMQP message (stored as is). */
  readonly bytes: Buffer;
  /** rhea's decoded view: header fields, properties, application_properties, body, message_annotations. */
  readonly message: any;
  /** Broker receive time, ms. */
  receivedAt: number;
  /** Absolute expiry, ms (set by the TTL extension from header.ttl). */
  expiresAt?: number;
  /** Annotations extensions want to keep with the event (op, key, ...). */
  attrs: Record<string, unknown>;
}
