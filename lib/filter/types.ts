export type { Dialect } from './parser.js';
import type { Dialect } from './parser.js';
import type { Budget } from './search.js';

/** What a filter reads values from; implemented by the broker per message. */
export interface FilterEnv {
  /**
   * Value at a JSON body path, e.g. ['a','b',0] for /a/b[0]; undefined when missing or the
   * body is not JSON. Called lazily, only when the expression needs it, and possibly more
   * than once per evaluation for the same path (cache in the env if lookups are costly).
   * The array is created at compile time and must not be mutated.
   * `budget` is the evaluation's work budget: a lookup that crosses arrays by name should
   * take one step per element it visits and be undefined when it cannot pay (as
   * lookupJsonPath does when given it); lookups that cross none may ignore it.
   */
  bodyPath(path: readonly (string | number)[], budget?: Budget): unknown;
  /**
   * Application property by name, or a header/properties field ('subject','priority',
   * 'message_id','user_id','to','reply_to','correlation_id','content_type','creation_time',
   * 'durable','ttl', and JMS names JMSPriority, JMSMessageID, JMSCorrelationID,
   * JMSDeliveryMode ('PERSISTENT'/'NON_PERSISTENT'), JMSType (subject), JMSTimestamp);
   * undefined when absent.
   */
  property(name: string): unknown;
}

/** A compiled filter: immutable, reusable, safe to share between links. */
export interface Filter {
  /** The expression text as given. */
  readonly text: string;
  /** The dialect it was compiled in. */
  readonly dialect: Dialect;
  /** true when the expression reads the JSON body (so the broker must parse it). */
  readonly usesBody: boolean;
  /** true only when the expression is TRUE for this message (FALSE and NULL do not match). */
  matches(env: FilterEnv): boolean;
}
