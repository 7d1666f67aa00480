/**
 * `$management` (wire.md 7), in the style of AMQP Management: a request message with
 * application properties `operation`, `type`, `name` and a map body; the response goes to
 * the request's `reply-to` with `correlation-id` = request `message-id`, `statusCode` and
 * `statusDescription`. Other extensions add operations (SOW-DELETE) and statistics.
 */
import type { Extension, ManagementRequest, ManagementResponse, AuthAction } from '../../core/extensions.js';
import type { BrokerContext } from '../../core/broker-context.js';
import { TidemarkError, Conditions } from '../../core/errors.js';
import { encodeMessage, readPropertyTyped, PROPERTY_FIELD } from '../../codec/message-bytes.js';
import { typed, amqpTypes } from '../../codec/amqp.js';
import type { InboundMessage } from '../../core/queue/inbound.js';
import { logger } from '../../core/log.js';
import { toBool } from '../../address/index.js';
import { RESERVED_NODE_PROPERTIES } from '../../core/node-registry.js';

const log = logger('management');

const statusFor: Partial<Record<string, number>> = {
  [Conditions.notFound]: 404,
  [Conditions.invalidField]: 400,
  [Conditions.preconditionFailed]: 409,
  [Conditions.unauthorized]: 403,
  [Conditions.notAllowed]: 403,
};

type Op = (req: ManagementRequest, broker: BrokerContext) => Promise<ManagementResponse>;

function requireQueue(req: ManagementRequest, broker: BrokerContext) {
  if (!req.name) throw new TidemarkError(Conditions.invalidField, `${req.operation} needs application property name`);
  const q = broker.nodes.get(req.name);
  if (!q) throw new TidemarkError(Conditions.notFound, `no such queue: ${req.name}`);
  return q;
}

/**
 * The reply's correlation-id: the request's message-id (else its correlation-id) with its AMQP
 * type, read from the request's bytes. The decoded view loses the type, and rhea encodes any
 * Buffer id as a uuid: a 3-byte binary id went out as 16 bytes, 13 of them whatever the
 * encoder's buffer held (other clients' messages; session 22).
 */
export function replyCorrelationId(msg: InboundMessage): unknown {
  try {
    return readPropertyTyped(msg.bytes, PROPERTY_FIELD.messageId) ?? readPropertyTyped(msg.bytes, PROPERTY_FIELD.correlationId);
  } catch {
    // Decoded but not readable typed (not expected): a Buffer goes back as binary, its own length.
    const id = msg.message.message_id ?? msg.message.correlation_id;
    return Buffer.isBuffer(id) ? amqpTypes.wrap_binary(id) : id;
  }
}

/** An AMQP map as rhea decodes it: a plain object (not a list, binary, timestamp or typed value). */
export function isMap(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && !Buffer.isBuffer(v) && !(v instanceof Date)
    && Object.getPrototypeOf(v) === Object.prototype;
}

/** What a body that is not a map is, for a 400's description. */
export function kindOf(v: unknown): string {
  if (typeof v === 'string') return 'a string';
  if (Array.isArray(v)) return 'a list';
  if (Buffer.isBuffer(v)) return 'binary';
  if ((v as any)?.typecode === 0x75) return 'data sections';
  if (v instanceof Date) return 'a timestamp';
  if (v === null) return 'null';
  return typeof v === 'object' ? 'a described or typed value' : `a ${typeof v}`;
}

/** Keys a DELETE body may hold; `force` is what tidemark-config sends for brokers that refuse by default (no effect here). */
const DELETE_KEYS = ['if_empty', 'if_unused', 'force'];

/**
 * The checks a DELETE body asks for, its flags read as queue booleans are (wire.md 2.1:
 * `"True"`, `"yes"`, 1). Only `true`, `'true'` and 1 used to count: `{if_empty: "True"}` or a
 * misspelt `if-empty` deleted a non-empty queue. A value that is not a boolean, an unknown
 * key or a body that is not a map is a 400, and nothing is deleted.
 */
export function deleteChecks(body: unknown): { ifEmpty: boolean; ifUnused: boolean } {
  if (body === undefined || body === null) return { ifEmpty: false, ifUnused: false };
  if (!isMap(body)) throw new TidemarkError(Conditions.invalidField, `DELETE body must be a map ({if_empty, if_unused}), got ${kindOf(body)}; nothing was deleted`);
  const unknown = Object.keys(body).filter((k) => !DELETE_KEYS.includes(k));
  if (unknown.length) throw new TidemarkError(Conditions.invalidField, `DELETE: unknown key${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => JSON.stringify(k)).join(', ')} (known: ${DELETE_KEYS.join(', ')}); nothing was deleted`);
  const flag = (k: string) => {
    if (body[k] === undefined || body[k] === null) return false;
    try { return toBool(k, body[k]); } catch (e) { throw new TidemarkError(Conditions.invalidField, `DELETE ${(e as Error).message}; nothing was deleted`); }
  };
  flag('force');
  return { ifEmpty: flag('if_empty'), ifUnused: flag('if_unused') };
}

const coreOps: Record<string, Op> = {
  async CREATE(req, broker) {
    if (!req.name) throw new TidemarkError(Conditions.invalidField, 'CREATE needs application property name');
    if (broker.nodes.get(req.name)) return { statusCode: 409, statusDescription: `queue ${req.name} exists` };
    // The body is the queue's attributes: a map (none: an empty one). The queue arguments are
    // its keys besides durable, or, as qpid-config sends them, the map under `arguments`. A
    // list or string there used to make a plain queue (a list's items became arguments "0",
    // "1"), answered 201.
    if (req.body !== undefined && req.body !== null && !isMap(req.body)) {
      throw new TidemarkError(Conditions.invalidField, `CREATE body must be a map of queue attributes (durable, arguments), got ${kindOf(req.body)}`);
    }
    const body: Record<string, unknown> = { ...(req.body ?? {}) };
    let durable = true;
    if (body.durable !== undefined) {
      try { durable = toBool('durable', body.durable); } catch (e) { throw new TidemarkError(Conditions.invalidField, `CREATE ${(e as Error).message}`); }
    }
    delete body.durable;
    let args: Record<string, unknown> = body;
    if (body.arguments !== undefined) {
      if (!isMap(body.arguments)) throw new TidemarkError(Conditions.invalidField, `CREATE: arguments must be a map of queue arguments, got ${kindOf(body.arguments)}`);
      const others = Object.keys(body).filter((k) => k !== 'arguments' && !RESERVED_NODE_PROPERTIES.has(k));
      if (others.length) throw new TidemarkError(Conditions.invalidField, `CREATE: queue arguments go either under arguments or at the top level of the body, not both (top level: ${others.join(', ')})`);
      args = { ...body.arguments };
    }
    const { queue } = broker.nodes.declare(req.name, { durable, arguments: args });
    await broker.committer.idle();
    return { statusCode: 201, statusDescription: 'Created', body: broker.queueInfo(queue) };
  },
  async READ(req, broker) {
    return { statusCode: 200, statusDescription: 'OK', body: broker.queueInfo(requireQueue(req, broker)) };
  },
  async QUERY(req, broker) {
    if (req.body !== undefined && req.body !== null && !isMap(req.body)) throw new TidemarkError(Conditions.invalidField, `QUERY body must be a map ({prefix}), got ${kindOf(req.body)}`);
    if (req.body?.prefix !== undefined && typeof req.body.prefix !== 'string') throw new TidemarkError(Conditions.invalidField, `QUERY: prefix must be a string, got ${kindOf(req.body.prefix)}`);
    const prefix: string = req.body?.prefix ?? '';
    // ACL: only the queues this user may browse or manage are listed.
    const visible = (name: string) => broker.extensions.authorize(req.user, 'browse', name) || broker.extensions.authorize(req.user, 'manage', name);
    const list = broker.nodes.list().filter((q) => !q.def.temporary && q.name.startsWith(prefix) && visible(q.name)).sort((a, b) => a.name.localeCompare(b.name));
    return { statusCode: 200, statusDescription: 'OK', body: list.map((q) => broker.queueInfo(q)) };
  },
  async DELETE(req, broker) {
    const q = requireQueue(req, broker);
    // wire.md 7: DELETE deletes. Like qpidd's queue-delete, a request may ask for checks:
    // body {if_empty: true} and/or {if_unused: true} answer 409 instead when they fail
    // (tidemark-config del queue asks for both unless --force).
    const { ifEmpty, ifUnused } = deleteChecks(req.body);
    const info = broker.queueInfo(q);
    const depth = info.depth as number, consumers = info.consumers as number;
    if ((ifEmpty && depth > 0) || (ifUnused && consumers > 0)) {
      return { statusCode: 409, statusDescription: `queue ${q.name} is not empty or in use (depth ${depth}, consumers ${consumers})` };
    }
    await broker.nodes.delete(q.name);
    return { statusCode: 204, statusDescription: 'No Content' };
  },
  async PURGE(req, broker) {
    const q = requireQueue(req, broker);
    const count = await q.structure.purge();
    await broker.committer.idle();
    return { statusCode: 200, statusDescription: 'OK', body: { count } };
  },
};

export function managementExtension(): Extension {
  let broker: BrokerContext;
  const ops = new Map<string, Op>(Object.entries(coreOps));

  async function handle(req: ManagementRequest): Promise<ManagementResponse> {
    if (req.type && req.type !== 'queue' && req.type !== 'org.apache.qpid:queue' && !req.operation.startsWith('SUBSCRIPTION')) {
      return { statusCode: 400, statusDescription: `unknown type ${req.type} (known: queue)` };
    }
    const op = ops.get(req.operation);
    if (!op) return { statusCode: 400, statusDescription: `unknown operation ${req.operation} (known: ${[...ops.keys()].join(', ')})` };
    const denied = unauthorized(req);
    if (denied) return { statusCode: 403, statusDescription: `${Conditions.unauthorized}: ${denied}` };
    if (othersTemporary(req)) return { statusCode: 404, statusDescription: `no such queue: ${req.name}` };
    try { return await op(req, broker); }
    catch (e) {
      if (e instanceof TidemarkError) return { statusCode: statusFor[e.condition] ?? 500, statusDescription: e.message };
      log.error('management operation failed', { op: req.operation, err: e });
      return { statusCode: 500, statusDescription: 'internal error: ' + (e as Error).message };
    }
  }

  /**
   * ACL (docs/security.md): READ needs browse or manage on the named queue; QUERY filters its
   * list instead; CREATE needs manage and create; every other operation (DELETE, PURGE,
   * SOW-DELETE, extensions' operations) needs manage. Returns why not, or undefined.
   */
  function unauthorized(req: ManagementRequest): string | undefined {
    if (req.operation === 'QUERY' || req.name === undefined) return undefined; // QUERY filters; no name: the operation answers 400
    // A SUBSCRIPTION-* name is a link's, not a queue's: checkpoints checks each subscription's queue (mayManage).
    if (req.operation.startsWith('SUBSCRIPTION-')) return undefined;
    const can = (a: AuthAction) => broker.extensions.authorize(req.user, a, req.name!);
    const need: AuthAction[] = req.operation === 'READ' ? (can('browse') || can('manage') ? [] : ['browse'])
      : req.operation === 'CREATE' ? ['manage', 'create'] : ['manage'];
    const missing = need.find((a) => !can(a));
    return missing ? `user ${req.user} may not ${missing} queue ${req.name} (${req.operation})` : undefined;
  }

  /**
   * Whether the request names another user's temporary queue: private to its creator's links
   * (docs/security.md), so answered as a queue that does not exist (404), as QUERY and the
   * HTTP API leave it out. READ, PURGE and DELETE used to serve it to anyone allowed by the
   * ACL's rules on its name. CREATE still answers 409 (the name is taken).
   */
  function othersTemporary(req: ManagementRequest): boolean {
    if (req.name === undefined || req.operation === 'CREATE' || req.operation.startsWith('SUBSCRIPTION-')) return false;
    const q = broker.nodes.get(req.name);
    return q !== undefined && q.def.temporary === true && q.def.owner !== req.user;
  }

  return {
    name: 'management',
    start(b) {
      broker = b;
      for (const ext of b.extensions.all) for (const [name, op] of Object.entries(ext.managementOperations ?? {})) ops.set(name, op);
    },
    serviceAddresses: {
      $management(msg, user, done) {
        const m = msg.message;
        const ap = m.application_properties ?? {};
        const req: ManagementRequest = {
          operation: String(ap.operation ?? '').toUpperCase(), type: String(ap.type ?? 'queue'), name: typeof ap.name === 'string' ? ap.name : undefined,
          body: m.body ?? {}, user,
        };
        // `name` is a string or absent: a list or binary was turned into text (PURGE with name
        // ['ctl.q'] purged ctl.q), a number likewise.
        const badName: ManagementResponse | undefined = ap.name !== undefined && ap.name !== null && typeof ap.name !== 'string'
          ? { statusCode: 400, statusDescription: `application property name must be a string, got ${kindOf(ap.name)}` } : undefined;
        done(); // the request is accepted; the answer goes to reply-to
        (badName ? Promise.resolve(badName) : handle(req)).then((res) => {
          const replyTo: string | undefined = m.reply_to;
          if (!replyTo) return;
          const q = broker.nodes.get(replyTo);
          if (!q) { log.warn('management reply-to is not a queue here', { replyTo }); return; }
          // The reply is a publish on the requester's behalf: to a queue it may publish to (or a
          // own temporary reply queue), never one the ACL keeps it from (docs/security.md).
          if (!(q.def.temporary && q.def.owner === user) && !broker.extensions.authorize(user, 'publish', replyTo)) {
            log.warn('management reply-to refused: the requester may not publish there', { replyTo, user });
            return;
          }
          const bytes = encodeMessage({
            correlation_id: replyCorrelationId(msg), to: replyTo,
            application_properties: { statusCode: typed.int(res.statusCode), statusDescription: res.statusDescription }, // int, as AMQP Management has it
            body: res.body === undefined ? null : res.body,
          });
          q.publish({ bytes, message: null, receivedAt: broker.clock.now(), attrs: {} }, (err) => { if (err) log.warn('management reply not stored', { err: err.message }); });
        }).catch((err) => log.error('management failed', { err }));
      },
    },
  };
}
