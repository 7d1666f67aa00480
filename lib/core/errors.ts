/**
 * Typed, coded errors. Every failure the broker reports to a client is a TidemarkError whose
 * `condition` is the AMQP error condition it becomes at the protocol boundary (wire.md 8).
 * Anything else that escapes is an internal error: logged with its cause, reported as
 * `amqp:internal-error`, and never takes the broker down (architecture invariant 6).
 */
import { typed } from '../codec/amqp.js';

export const Conditions = {
  notFound: 'amqp:not-found',
  invalidField: 'amqp:invalid-field',
  preconditionFailed: 'amqp:precondition-failed',
  unauthorized: 'amqp:unauthorized-access',
  resourceLimit: 'amqp:resource-limit-exceeded',
  resourceDeleted: 'amqp:resource-deleted',
  linkStolen: 'amqp:link:stolen',
  messageSizeExceeded: 'amqp:link:message-size-exceeded',
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

/**
 * An error's `info` as AMQP has it: `fields`, a map with symbol keys [AMQP 2.8.14, 1.6.5];
 * SCNs and counts as ulong, as x-opt-tm-scn is (wire.md 5, `oldest-scn`, `requested-scn`).
 */
export function amqpInfo(info: Record<string, unknown> | undefined): unknown {
  if (!info) return undefined;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(info)) out[k] = typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? typed.ulong(v) : v;
  return typed.symbolicMap(out);
}

/** The AMQP error a client sees for any thrown value. */
export function toAmqpError(err: unknown): { condition: string; description: string; info?: unknown } {
  if (err instanceof TidemarkError) return { condition: err.condition, description: err.message, info: amqpInfo(err.info) };
  return { condition: Conditions.internal, description: 'internal error: ' + (err instanceof Error ? err.message : String(err)) };
}
