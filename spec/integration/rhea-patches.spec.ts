/**
 * The two rhea 3.0.5 server-side bugs fixed by lib/core/protocol/rhea-patches.ts
 * (docs/rhea-patches.md). Each bug test fails without applyRheaPatches().
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:net';
import { expect } from 'chai';
import rhea from 'rhea';
import type { Connection, Container, Delivery, EventContext } from 'rhea';
import { applyRheaPatches } from '../../lib/core/protocol/rhea-patches.js';
import { protonAvailable, runProton } from '../support/proton.js';

type Outcome = 'accept' | 'release' | 'reject';
const EVENT: Record<Outcome, string> = { accept: 'accepted', release: 'released', reject: 'rejected' };

interface TestServer {
  port: number;
  container: Container;
  connections: Connection[];
  errors: Error[];
  close(): Promise<void>;
}

/**
 * A tiny rhea server (autoaccept off, as the broker runs it). Links are opened with the
 * peer's own terminus, set synchronously. `onMessage` sees every incoming delivery.
 */
function startServer(onMessage: (ctx: EventContext) => void = () => {}): Promise<TestServer> {
  const container = rhea.create_container({ id: 'rhea-patches-spec-server' });
  const connections: Connection[] = [];
  const errors: Error[] = [];
  container.on('connection_open', (ctx: EventContext) => connections.push(ctx.connection));
  container.on('receiver_open', (ctx: EventContext) => ctx.receiver!.set_target((ctx.receiver as any).remote.attach.target ?? {}));
  container.on('sender_open', (ctx: EventContext) => ctx.sender!.set_source((ctx.sender as any).remote.attach.source ?? {}));
  container.on('message', onMessage);
  for (const ev of ['error', 'protocol_error', 'connection_error', 'session_error', 'sender_error', 'receiver_error']) {
    container.on(ev, (e: unknown) => errors.push(e instanceof Error ? e : new Error(`${ev}: ${String((e as EventContext)?.connection?.error ?? e)}`)));
  }
  container.on('disconnected', () => {});
  const listener: Server = container.listen({ host: '127.0.0.1', port: 0, autoaccept: false, treat_modified_as_released: false } as never);
  return new Promise((resolve, reject) => {
    listener.once('error', reject);
    listener.on('listening', () =>
      resolve({
        port: (listener.address() as AddressInfo).port,
        container,
        connections,
        errors,
        close: () =>
          new Promise<void>((done) => {
            for (const c of connections) if (!c.is_closed()) c.close();
            for (const c of connections) (c as unknown as { socket?: { destroy(): void } }).socket?.destroy();
            listener.close(() => done());
          }),
      }),
    );
  });
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

interface DispositionTrace {
  first: number;
  last: number;
  state: string | undefined;
}

/** Disposition frames a server connection writes (spied below the patch, at the connection). */
function traceDispositions(conn: Connection): DispositionTrace[] {
  const trace: DispositionTrace[] = [];
  const c = conn as unknown as { _write_frame(channel: number, frame: any, payload?: unknown): void };
  const write = c._write_frame;
  c._write_frame = function (channel, frame, payload) {
    if (frame?.constructor?.descriptor?.numeric === 0x15) {
      const code = frame.state?.descriptor?.value as number | undefined;
      const names: Record<number, string> = { 0x24: 'accepted', 0x25: 'rejected', 0x26: 'released', 0x27: 'modified' };
      trace.push({ first: frame.first, last: frame.last ?? frame.first, state: code === undefined ? undefined : names[code] ?? String(code) });
    }
    return write.call(this, channel, frame, payload);
  };
  return trace;
}

/**
 * Send one message per planned outcome; the server settles them all in one tick with those
 * outcomes. Resolves with what the client saw per message and the server's disposition frames.
 */
async function settleInOneTick(plan: Outcome[]): Promise<{ seen: string[]; frames: DispositionTrace[] }> {
  let frames: DispositionTrace[] = [];
  const pending: Delivery[] = [];
  const server = await startServer((ctx) => {
    if (pending.length === 0) frames = traceDispositions(ctx.connection);
    pending.push(ctx.delivery!);
    if (pending.length === plan.length) {
      plan.forEach((o, i) => {
        const d = pending[i];
        if (o === 'accept') d.accept();
        else if (o === 'release') d.release();
        else d.reject({ condition: 'amqp:precondition-failed', description: `rejected #${i}` });
      });
    }
  });
  const client = rhea.create_container({ id: 'rhea-patches-spec-client' });
  client.on('error', () => {});
  client.on('disconnected', () => {});
  const conn = client.connect({ host: '127.0.0.1', port: server.port, reconnect: false });
  try {
    const seen = await withTimeout(
      new Promise<string[]>((resolve) => {
        const out: string[] = new Array(plan.length);
        let n = 0;
        const sender = conn.open_sender({ target: 'q' });
        for (const ev of ['accepted', 'released', 'rejected', 'modified']) {
          sender.on(ev, (ctx: EventContext) => {
            out[Number(ctx.delivery!.tag.toString())] = ev;
            if (++n === plan.length) resolve(out);
          });
        }
        sender.once('sendable', () => plan.forEach((_, i) => sender.send({ body: `m${i}` }, Buffer.from(String(i)))));
      }),
      5000,
      'client outcomes',
    );
    return { seen, frames };
  } finally {
    conn.close();
    await server.close();
  }
}

describe('rhea patches (rhea 3.0.5 server-side bugs)', function () {
  before(function () {
    applyRheaPatches();
  });

  describe('applyRheaPatches()', function () {
    it('is idempotent', function () {
      const probe = rhea.create_connection({ host: '127.0.0.1', port: 0 }).create_session() as unknown as Record<string, unknown>;
      const proto = Object.getPrototypeOf(probe) as Record<string, unknown>;
      const before = ['output', 'on_attach', 'create_link', 'remove_link'].map((k) => proto[k]);
      applyRheaPatches();
      applyRheaPatches();
      expect(['output', 'on_attach', 'create_link', 'remove_link'].map((k) => proto[k])).to.deep.equal(before);
    });
  });

  describe('(a) outcomes of deliveries settled in one tick [AMQP 2.7.6]', function () {
    it('accept, release, reject arrive as accepted, released, rejected', async function () {
      const { seen } = await settleInOneTick(['accept', 'release', 'reject']);
      expect(seen).to.deep.equal(['accepted', 'released', 'rejected']);
    });

    it('reject, release, accept arrive as rejected, released, accepted', async function () {
      const { seen } = await settleInOneTick(['reject', 'release', 'accept']);
      expect(seen).to.deep.equal(['rejected', 'released', 'accepted']);
    });

    it('release, accept, accept: the accepted ones are not released (no redelivery)', async function () {
      const { seen } = await settleInOneTick(['release', 'accept', 'accept']);
      expect(seen).to.deep.equal(['released', 'accepted', 'accepted']);
    });

    it('keeps batching: a split range keeps its runs of equal outcome together', async function () {
      // rhea coalesces only from the start of a tick's list; the bad range here was 0..3.
      const plan: Outcome[] = ['release', 'accept', 'accept', 'accept'];
      const { seen, frames } = await settleInOneTick(plan);
      expect(seen).to.deep.equal(plan.map((o) => EVENT[o]));
      expect(frames).to.deep.equal([
        { first: 0, last: 0, state: 'released' },
        { first: 1, last: 3, state: 'accepted' },
      ]);
    });

    it('leaves correct ranges alone: four accepts go out as one disposition', async function () {
      const { seen, frames } = await settleInOneTick(['accept', 'accept', 'accept', 'accept']);
      expect(seen).to.deep.equal(['accepted', 'accepted', 'accepted', 'accepted']);
      expect(frames).to.deep.equal([{ first: 0, last: 3, state: 'accepted' }]);
    });
  });

  describe('(b) a sender and a receiver with the same name in one session [AMQP 2.6.1]', function () {
    it('Proton sender and receiver on the same address both attach', async function () {
      if (!protonAvailable()) this.skip();
      const server = await startServer();
      try {
        const r = await runProton('proton_probe.py', ['-a', `amqp://127.0.0.1:${server.port}/q`, '-t', '5', 'same-address-links']);
        const report = JSON.parse(r.stdout.trim().split('\n').pop() || '{}');
        expect(r.stderr, 'probe stderr').to.equal('');
        expect(report.same_session, 'links share a session').to.equal(true);
        expect(report.sender.name, 'Proton names both links alike').to.equal(report.receiver.name);
        expect(report.sender.attached, 'sender attached').to.equal(true);
        expect(report.receiver.attached, 'receiver attached').to.equal(true);
        expect(r.code).to.equal(0);
        expect(server.errors.map((e) => e.message)).to.deep.equal([]);
      } finally {
        await server.close();
      }
    });

    it('both links work, close cleanly and can attach again (link bookkeeping)', async function () {
      const queue: unknown[] = [];
      const server = await startServer((ctx) => {
        queue.push(ctx.message!.body);
        ctx.delivery!.accept();
        for (const s of sessionLinks(ctx.connection)) if (s.is_sender() && s.sendable()) s.send({ body: queue.shift() });
      });
      server.container.on('sendable', (ctx: EventContext) => {
        while (queue.length && ctx.sender!.sendable()) ctx.sender!.send({ body: queue.shift() });
      });
      const client = rhea.create_container({ id: 'rhea-patches-spec-client' });
      client.on('error', () => {});
      client.on('disconnected', () => {});
      const conn = client.connect({ host: '127.0.0.1', port: server.port, reconnect: false });
      try {
        for (let round = 0; round < 2; round++) {
          const session = conn.create_session();
          session.begin();
          const receiver = session.attach_receiver({ name: 'same', source: 'q' });
          const sender = session.attach_sender({ name: 'same', target: 'q' });
          const body = await withTimeout(
            new Promise<unknown>((resolve) => {
              receiver.once('message', (ctx: EventContext) => resolve(ctx.message!.body));
              sender.once('sendable', () => sender.send({ body: `hello ${round}` }));
            }),
            5000,
            `round ${round}: message through both links`,
          );
          expect(body).to.equal(`hello ${round}`);
          await withTimeout(
            Promise.all([
              new Promise((r) => { sender.once('sender_close', r); sender.close(); }),
              new Promise((r) => { receiver.once('receiver_close', r); receiver.close(); }),
            ]),
            5000,
            `round ${round}: both links close`,
          );
          await new Promise((r) => setTimeout(r, 20)); // rhea removes closed links on a later tick
          const serverConn = server.connections[0] as unknown as { local_channel_map: Record<string, { links: object }> };
          for (const ssn of Object.values(serverConn.local_channel_map)) expect(Object.keys(ssn.links)).to.deep.equal([]);
        }
        expect(server.errors.map((e) => e.message)).to.deep.equal([]);
      } finally {
        conn.close();
        await server.close();
      }
    });
  });
});

interface AnyLink {
  is_sender(): boolean;
  sendable(): boolean;
  send(m: object): unknown;
}
function sessionLinks(conn: Connection): AnyLink[] {
  const c = conn as unknown as { local_channel_map: Record<string, { links: Record<string, AnyLink> }> };
  return Object.values(c.local_channel_map).flatMap((s) => Object.values(s.links));
}
