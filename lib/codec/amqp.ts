/**
 * rhea's AMQP type system used as a pure library (encoder/decoder, no networking). The
 * protocol layer is the only user of rhea's connections; codec/ only uses its types.
 */
import rhea from 'rhea';

export const amqpTypes: any = (rhea as any).types;
export const amqpMessage: any = (rhea as any).message;

const ZERO_FILLED = Symbol.for('tidemark.fixed-width-zero-fill');

/**
 * rhea's Writer copies a fixed-width value given as a Buffer (uuid, decimal, a ulong or long
 * past 2^53) with `copy`, which writes only the bytes the Buffer has: in rhea's own zero-filled
 * buffers a short one was padded with zeros, in the pooled buffers the broker encodes into
 * (rhea-tuning.ts, message-bytes.ts) the rest of the width was stale memory, sent on the wire
 * (a 3-byte binary message-id echoed as a uuid carried 13 bytes of other clients' messages,
 * session 22). The rest of the width is zeroed, as rhea's buffers had it. Once per process.
 */
function zeroFillShortFixedWidth(types: any): void {
  const proto = types.Writer.prototype;
  if (proto[ZERO_FILLED]) return;
  const write = proto.write_fixed_width;
  proto.write_fixed_width = function (this: { position: number; buffer: Buffer }, type: { width: number }, value: unknown) {
    const at = this.position;
    write.call(this, type, value);
    if (Buffer.isBuffer(value) && value.length < type.width) this.buffer.fill(0, at + value.length, at + type.width);
  };
  proto[ZERO_FILLED] = true;
}
zeroFillShortFixedWidth(amqpTypes);

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
