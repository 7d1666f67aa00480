/**
 * A peer broke a protocol rule with frames that decoded fine. Thrown by the guards on rhea
 * (rhea-guards.ts) from inside rhea's frame handlers; server.ts catches it where the frame
 * enters the connection and ends exactly the endpoint named by `scope` with `condition`
 * and `description` [AMQP 2.8.15-2.8.18]: the link (detach), the session (end) or the
 * connection (close). Everything else on the connection carries on.
 *
 * Without it any throw from a frame handler reached rhea's input loop, which ended the whole
 * connection as a decode error ("malformed frame: ..."), whatever the peer had done.
 */

/** AMQP error conditions for protocol-rule violations [AMQP 2.8.15-2.8.18]. */
export const PeerConditions = {
  notAllowed: 'amqp:not-allowed',
  invalidField: 'amqp:invalid-field',
  decodeError: 'amqp:decode-error',
  windowViolation: 'amqp:session:window-violation',
  handleInUse: 'amqp:session:handle-in-use',
  unattachedHandle: 'amqp:session:unattached-handle',
  transferLimitExceeded: 'amqp:link:transfer-limit-exceeded',
  messageSizeExceeded: 'amqp:link:message-size-exceeded',
  resourceLimit: 'amqp:resource-limit-exceeded',
} as const;

export type PeerErrorScope = 'link' | 'session' | 'connection';

/** Brand shared by every copy of this module (a test runner may load two). */
const BRAND = Symbol.for('tidemark.peer-error');

export class PeerError extends Error {
  /** Which endpoint ends: the link (detach), the session (end) or the connection (close). */
  readonly scope: PeerErrorScope;
  /** The AMQP error condition sent with the detach/end/close. */
  readonly condition: string;
  /** The rhea link (scope 'link') or session (scope 'session') to end; unused for 'connection'. */
  readonly endpoint: unknown;

  constructor(scope: PeerErrorScope, condition: string, description: string, endpoint?: unknown) {
    super(description);
    this.name = 'PeerError';
    this.scope = scope;
    this.condition = condition;
    this.endpoint = endpoint;
    (this as unknown as Record<symbol, boolean>)[BRAND] = true;
  }

  /** True for a PeerError from any copy of this module. */
  static is(err: unknown): err is PeerError {
    return typeof err === 'object' && err !== null && (err as Record<symbol, unknown>)[BRAND] === true;
  }

  /** The error as rhea's detach/end/close takes it. */
  get amqpError(): { condition: string; description: string } { return { condition: this.condition, description: this.message }; }
}
