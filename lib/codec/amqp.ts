/**
 * rhea's AMQP type system used as a pure library (encoder/decoder, no networking). The
 * protocol layer is the only user of rhea's connections; codec/ only uses its types.
 */
import rhea from 'rhea';

export const amqpTypes: any = (rhea as any).types;
export const amqpMessage: any = (rhea as any).message;

/** Typed AMQP values for places where JS values would be encoded with the wrong type. */
export const typed = {
  symbol: (s: string) => amqpTypes.wrap_symbol(s),
  ulong: (n: number | bigint) => amqpTypes.wrap_ulong(typeof n === 'bigint' ? Number(n) : n),
  /** A Buffer is the long's 8 bytes (a value beyond 2^53). */
  long: (n: number | Buffer) => amqpTypes.wrap_long(n),
  uint: (n: number) => amqpTypes.wrap_uint(n),
  int: (n: number) => amqpTypes.wrap_int(n),
  timestamp: (ms: number) => amqpTypes.wrap_timestamp(ms),
  string: (s: string) => amqpTypes.wrap_string(s),
  boolean: (b: boolean) => amqpTypes.wrap_boolean(b),
  symbolicMap: (m: Record<string, unknown>) => amqpTypes.wrap_symbolic_map(m),
  map: (m: Record<string, unknown>) => amqpTypes.wrap_map(m),
  list: (l: unknown[]) => amqpTypes.wrap_list(l),
};
