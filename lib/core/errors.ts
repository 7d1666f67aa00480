/**
 * Typed, coded errors. Every failure the broker reports to a client is a TidemarkError whose
 * `condition` is the AMQP error condition it becomes at the protocol boundary (wire.md 8).
 * Anything else that escapes is an internal error: logged with its cause, reported as
 * `amqp:internal-error`, and never takes the broker down (architecture invariant 6).
 */
export const Conditions = {
  notFound: 'amqp:not-found',
  invalidField: 'amqp:invalid-field',
  preconditionFailed: 'amqp:precondition-failed',
  unauthorized: 'amqp:unauthorized-access',
  resourceLimit: 'amqp:resource-limit-exceeded',
  decodeError: 'amqp:decode-error',
  internal: 'amqp:internal-error',
  notAllowed: 'amqp:not-allowed',
  notImplemented: 'amqp:not-implemented',
  scnNotFound: 'tidemark:scn-not-found',
} as const;
export type Condition = (typeof Conditions)[keyof typeof Conditions];

export class TidemarkError extends Error {
  /** AMQP error condition this error becomes on the wire. */
  readonly condition: Condition;
  /** Extra `info` map for the AMQP error (e.g. oldest-scn for scn-not-found). */
  readonly info?: Record<string, unknown>;
  constructor(condition: Condition, message: string, opts?: { info?: Record<string, unknown>; cause?: unknown }) {
    super(message, opts?.cause !== undefined ? { cause: opts.cause } : undefined);
    this.name = 'TidemarkError';
    this.condition = condition;
    this.info = opts?.info;
  }
}

export const invalidField = (msg: string, cause?: unknown) => new TidemarkError(Conditions.invalidField, msg, { cause });
export const notFound = (msg: string) => new TidemarkError(Conditions.notFound, msg);

/** The AMQP error a client sees for any thrown value. */
export function toAmqpError(err: unknown): { condition: string; description: string; info?: Record<string, unknown> } {
  if (err instanceof TidemarkError) return { condition: err.condition, description: err.message, info: err.info };
  return { condition: Conditions.internal, description: 'internal error: ' + (err instanceof Error ? err.message : String(err)) };
}
