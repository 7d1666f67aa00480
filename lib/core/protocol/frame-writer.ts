/**
 * The outgoing frames of one connection, gathered into one buffer per tick.
 *
 * rhea writes every frame with its own `socket.write`: a Buffer allocated per frame, and
 * per frame the Writable's bookkeeping (a buffered-chunk entry, then one iovec of a writev
 * when the socket is uncorked). Streaming a snapshot that was ~15 % of the broker's time
 * (docs/performance.md). Here the AMQP transport's `write` puts each frame into a shared
 * 64 KiB slab instead (outgoing transfers are encoded straight into it), and the bytes
 * gathered leave with one `socket.write` at the end of the tick, or as soon as a slab is full.
 *
 * Order is kept: every frame of the connection, rhea's and ours (`transfer`, the presettled
 * fast path in sink.ts), goes through the one buffer in the order written. rhea decides to
 * end the socket when its transport has nothing pending, which is now true while bytes still
 * wait here, so `socket.end` flushes first.
 */
import type net from 'node:net';
import { OutgoingTransfer, encodeTransferFrameInto, encodeTransferHeadInto, transferFrameSize } from './transfer-frame.js';
import type { SplitMessage } from '../../codec/message-bytes.js';

const SLAB = 64 * 1024;
const WRITER = Symbol.for('tidemark.frame-writer');

interface RheaTransport {
  header_sent?: unknown;
  protocol_id: number;
  pending: Array<{ type: number; channel: number; performative?: unknown; payload?: Buffer }>;
  write(socket: net.Socket): void;
}

interface RheaFrames {
  write_frame(frame: unknown): Buffer;
  write_header(buffer: Buffer, header: unknown): void;
}

export class FrameWriter {
  readonly #socket: net.Socket;
  #slab = Buffer.allocUnsafe(SLAB);
  /** Bytes of the slab already handed to the socket end here. */
  #start = 0;
  #at = 0;
  #scheduled = false;
  #closed = false;
  readonly #flushTick = () => { this.#scheduled = false; this.flush(); };
  /** Called once when the socket next drains (sinks waiting for a client that stopped reading). */
  readonly #drainWaiters = new Set<() => void>();
  readonly #onDrain = () => {
    const waiting = [...this.#drainWaiters];
    this.#drainWaiters.clear();
    for (const fn of waiting) { try { fn(); } catch { /* a waiter's failure is its own */ } }
  };

  constructor(socket: net.Socket) { this.#socket = socket; }

  /**
   * Runs `fn` once when the socket has handed everything it held to the kernel ('drain').
   * One socket listener however many links wait. Nothing runs if the socket closes first.
   */
  whenDrained(fn: () => void): void {
    if (this.#drainWaiters.size === 0) this.#socket.once('drain', this.#onDrain);
    this.#drainWaiters.add(fn);
  }

  /**
   * Room for `n` more bytes at #at. A full slab leaves at once rather than at the end of the
   * tick: the peer can start on it while this tick goes on producing (a snapshot streams
   * faster that way than in one write per tick).
   */
  #reserve(n: number): void {
    if (this.#at + n <= this.#slab.length) return;
    this.#writeOut();
    if (this.#at + n <= this.#slab.length) return; // the socket took the slab's bytes: reused
    this.#slab = Buffer.allocUnsafe(Math.max(SLAB, n));
    this.#start = this.#at = 0;
  }

  /**
   * Hands the bytes gathered since the last write to the socket. When the socket holds none
   * of them afterwards (the kernel took them all at once, the usual case), the slab is
   * filled again from its start: a snapshot then writes through one slab, not a fresh 64 KiB
   * per write. Bytes the socket still holds are never overwritten: the slab is left to it.
   */
  #writeOut(): void {
    if (this.#at === this.#start) return;
    const b = this.#slab.subarray(this.#start, this.#at);
    this.#start = this.#at;
    const s = this.#socket;
    if (!s.destroyed && s.writable) s.write(b);
    if (s.writableLength === 0) this.#start = this.#at = 0;
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    process.nextTick(this.#flushTick);
  }

  /** Appends bytes already encoded. */
  append(b: Buffer): void {
    if (this.#closed) return;
    this.#reserve(b.length);
    if (b.length > 64) b.copy(this.#slab, this.#at);
    else for (let i = 0; i < b.length; i++) this.#slab[this.#at + i] = b[i];
    this.#at += b.length;
    this.#schedule();
  }

  /** Appends one transfer frame, encoded in place. */
  transfer(channel: number, handle: number, deliveryId: number, tag: Buffer, format: number, settled: boolean, more: boolean, payload: Buffer | undefined): void {
    if (this.#closed) return;
    this.#reserve(transferFrameSize(handle, deliveryId, tag, format, payload));
    this.#at = encodeTransferFrameInto(this.#slab, this.#at, channel, handle, deliveryId, tag, format, settled, more, payload);
    this.#schedule();
  }

  /** Appends one transfer frame whose payload is a split message: its two parts are copied in place. */
  transferSplit(channel: number, handle: number, deliveryId: number, tag: Buffer, format: number, settled: boolean, more: boolean, m: SplitMessage): void {
    if (this.#closed) return;
    const size = m.headEnd + m.tail.length - m.tailStart;
    this.#reserve(transferFrameSize(handle, deliveryId, tag, format, size));
    const b = this.#slab;
    let at = encodeTransferHeadInto(b, this.#at, channel, handle, deliveryId, tag, format, settled, more, size);
    const head = m.head, n = m.headEnd;
    if (n > 64) at += head.copy(b, at, 0, n);
    else { for (let i = 0; i < n; i++) b[at + i] = head[i]; at += n; }
    at += m.tail.copy(b, at, m.tailStart);
    this.#at = at;
    this.#schedule();
  }

  /** Hands everything gathered to the socket. */
  flush(): void { this.#writeOut(); }

  /** Writes what is gathered, and nothing after it (a failed connection's last frame is out). */
  seal(): void { this.flush(); this.#closed = true; }

  /** The writer of a socket's connection, if installed. */
  static of(conn: unknown): FrameWriter | undefined { return (conn as Record<symbol, FrameWriter | undefined>)?.[WRITER]; }

  /**
   * Routes rhea's AMQP transport of `conn` through a FrameWriter on `socket`. The SASL layer
   * (a few frames at connection start) keeps writing directly; it is done before the AMQP
   * transport writes anything.
   */
  static install(conn: any, socket: net.Socket, frames: RheaFrames): FrameWriter {
    const w = new FrameWriter(socket);
    conn[WRITER] = w;
    const transport = conn.amqp_transport as RheaTransport;
    transport.write = function () {
      if (!this.header_sent) {
        const header = { protocol_id: this.protocol_id, major: 1, minor: 0, revision: 0 };
        const b = Buffer.allocUnsafe(8);
        frames.write_header(b, header);
        w.append(b);
        this.header_sent = header;
      }
      const pending = this.pending;
      for (let i = 0; i < pending.length; i++) {
        const f = pending[i];
        const p = f.performative;
        if (p instanceof OutgoingTransfer && f.type === 0 && !p.materialized) {
          w.transfer(f.channel, p.handle, p.delivery_id, p.delivery_tag, p.message_format, p.settled, p.more, f.payload);
        } else {
          w.append(frames.write_frame(f));
        }
      }
      this.pending = [];
    };
    const end = socket.end;
    socket.end = function (this: net.Socket, ...args: unknown[]) {
      w.flush();
      return (end as (...a: unknown[]) => net.Socket).apply(this, args);
    } as typeof socket.end;
    return w;
  }
}
