/**
 * Dynamic nodes [AMQP 3.5.3 `dynamic`]: a temporary, non-durable queue with a generated name,
 * echoed in the attach reply, deleted when the link that created it closes (wire.md 2.1; a
 * `lifetime-policy` or `auto-delete` node property does not change that). Its other node
 * properties are queue arguments, as for create on demand: a temporary ring, LVQ or SOW queue.
 */
import { randomUUID } from 'node:crypto';
import type { Extension } from '../../core/extensions.js';
import { logger } from '../../core/log.js';

const log = logger('temporary-queues');

export function temporaryQueuesExtension(): Extension {
  return {
    name: 'temporary-queues',
    createDynamicNode(broker, props, onLinkClose, user, connectionId) {
      const name = `tmp.${randomUUID()}`;
      const { queue } = broker.nodes.declare(name, { durable: false, temporary: true, owner: user, ownerConnection: connectionId, arguments: props });
      onLinkClose(() => { broker.nodes.delete(name).catch((err) => log.error('temporary queue not deleted', { name, err })); });
      return queue;
    },
  };
}
