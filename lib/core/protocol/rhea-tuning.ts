/**
 * Run-time performance tuning of rhea 3.0.5 (not bug fixes: those are rhea-patches.ts).
 * Both were found by profiling the publish and consume paths (docs/performance.md).
 *
 * 1. Quiet logging. rhea logs through `debug` channels (rhea:frames, rhea:events, …) on
 *    every frame and event. A disabled `debug` logger still gathers its arguments into an
 *    array and re-checks the DEBUG namespaces on each call (~7% of the broker's allocations
 *    when publishing). Channels disabled when the broker starts become no-ops;
 *    `DEBUG=rhea:*` set before start keeps them all working.
 * 2. Pooled encode buffers. rhea's `types.Writer` starts every frame (and every section it
 *    encodes) in a fresh zero-filled 1 KiB `Buffer.alloc`, outside Node's buffer pool: one
 *    ArrayBuffer per frame. The Writer constructor now starts in `Buffer.allocUnsafe(1024)`,
 *    which takes it from the pool. Writer only hands out `slice(0, position)` of bytes it
 *    wrote (size placeholders it skips are filled before the frame leaves), so nothing
 *    changes on the wire. One exception, closed in codec/amqp.ts: a fixed-width value given
 *    as a shorter Buffer (a uuid of 3 bytes) leaves the rest of its width unwritten, which
 *    rhea's zero-filled buffer padded with zeros and the pooled one filled with stale memory
 *    (session 22); the Writer now zeroes it.
 * 3. Hand-encoded outgoing transfers. The six-field transfers rhea's Outgoing.process
 *    creates (`frames.transfer`) become a plain OutgoingTransfer, and `frames.write_frame`
 *    writes those directly (transfer-frame.ts), byte for byte as rhea would. Every other
 *    frame, any transfer with other fields, and any transfer that code handled as rhea's
 *    composite (its `value`, e.g. to add a transactional state) goes through rhea's own code.
 * 4. Hand-read incoming transfers. `frames.read_frame` reads a transfer frame without a
 *    delivery state directly (transfer-frame.ts) into an object with the values rhea's
 *    composite would give; any other frame or encoding is read by rhea.
 * 5. Hand-read messages. `message.decode` reads the common section and value encodings
 *    directly (message-decode.ts) into the same Message rhea builds; a described value,
 *    an unknown section or anything malformed is decoded by rhea's own code.
 * 6. Incoming deliveries with shared methods. rhea's `Incoming.on_transfer` gives every
 *    delivery five closures of its own; incoming-delivery.ts does the same steps with
 *    deliveries whose methods are on a prototype.
 */
import { createRequire } from 'node:module';
import { OutgoingTransfer, outgoingTransfer, encodeTransferFrame, readTransferFrame } from './transfer-frame.js';
import { decodeMessage, type RheaMessageClasses } from './message-decode.js';
import { installIncomingDeliveries } from './incoming-delivery.js';
import '../../codec/amqp.js'; // zero-fills short fixed-width values before any pooled Writer exists

const TUNED = Symbol.for('tidemark.rhea-tuning');

type Logger = ((...args: unknown[]) => void) & { enabled?: boolean };
type WriterCtor = ((this: unknown, buffer?: Buffer) => void) & { prototype: object };

export function tuneRhea(): void {
  const req = createRequire(import.meta.url);
  const log = req('rhea/lib/log.js') as Record<string | symbol, Logger | true>;
  if (log[TUNED]) return;
  for (const name of Object.keys(log)) {
    const fn = log[name] as Logger;
    if (typeof fn === 'function' && !fn.enabled) { // (undefined until DEBUG was consulted)
      const noop: Logger = () => {};
      noop.enabled = false;
      log[name] = noop;
    }
  }
  // Only the Writer's own start buffer: rhea's other allocate_buffer callers (SASL responses)
  // keep their zero-filled buffers.
  const types = req('rhea/lib/types.js') as { Writer?: WriterCtor };
  const Writer = types.Writer;
  if (typeof Writer === 'function' && Writer.length === 1) {
    const Pooled = function (this: unknown, buffer?: Buffer) { Writer.call(this, buffer ?? Buffer.allocUnsafe(1024)); } as unknown as WriterCtor;
    Pooled.prototype = Writer.prototype;
    types.Writer = Pooled;
  }
  const frames = req('rhea/lib/frames.js') as { transfer?: (f: Record<string, unknown>) => unknown; write_frame?: (f: RheaFrame) => Buffer; read_frame?: (b: Buffer) => unknown };
  const transfer = frames.transfer;
  const writeFrame = frames.write_frame;
  if (typeof transfer === 'function' && typeof writeFrame === 'function') {
    OutgoingTransfer.rheaCreate = transfer as NonNullable<typeof OutgoingTransfer.rheaCreate>;
    frames.transfer = (fields) => outgoingTransfer(fields) ?? transfer(fields);
    frames.write_frame = (frame) => {
      const p = frame.performative;
      if (!(p instanceof OutgoingTransfer) || frame.type !== 0) return writeFrame(frame);
      // Something inspected or edited it as rhea's composite: write what it now holds.
      if (p.materialized) return writeFrame({ ...frame, performative: p.materialized });
      return encodeTransferFrame(frame.channel, p, frame.payload);
    };
  }
  const readFrame = frames.read_frame;
  if (typeof readFrame === 'function') frames.read_frame = (b) => readTransferFrame(b) ?? readFrame(b);
  const message = req('rhea/lib/message.js') as RheaMessageModule;
  const decode = message.decode;
  if (typeof decode === 'function' && typeof message.data_section === 'function') {
    const classes: RheaMessageClasses = {
      messageProto: Object.getPrototypeOf(decode.call(message, Buffer.alloc(0))) as object,
      Section: (message.data_section(Buffer.alloc(0)) as { constructor: RheaMessageClasses['Section'] }).constructor,
    };
    rheaMessageDecode = (b) => decode.call(message, b);
    message.decode = function (this: unknown, b: Buffer) { return decodeMessage(b, classes) ?? decode.call(this, b); };
  }
  // A throw-away session (no socket) reaches the Incoming prototype, which rhea does not export.
  const rhea = req('rhea') as { create_connection(o: object): { create_session(): { incoming: object } } };
  const incomingProto = Object.getPrototypeOf(rhea.create_connection({ id: 'tidemark-rhea-tuning-probe', host: '127.0.0.1', port: 0 }).create_session().incoming) as Record<string, unknown>;
  installIncomingDeliveries(incomingProto, message as unknown as Parameters<typeof installIncomingDeliveries>[1]);
  log[TUNED] = true;
}

interface RheaMessageModule { decode: (b: Buffer) => unknown; data_section: (b: Buffer) => unknown }

/** rhea's own message decoder as it was before tuning (the tests compare against it). */
export let rheaMessageDecode: ((b: Buffer) => unknown) | undefined;

interface RheaFrame { type: number; channel: number; performative?: unknown; payload?: Buffer }
