/**
 * Dynamic nodes [AMQP 3.5.3 `dynamic`]: a temporary, non-durable queue with a generated name,
 * echoed in the attach reply, deleted when the link that created it closes.
 */
import { randomUUID } from 'node:crypto';
import type { Extension } from '../../core/extensions.js';
import { logger } from '../../core/log.js';

const log = logger('temporary-queues');

export function temporaryQueuesExtension(): Extension {
  return {
    name: 'temporary-queues',
    createDynamicNode(broker, _props, onLinkClose, user) {
      const name = `tmp.${randomUUID()}`;
      const { queue } = broker.nodes.declare(name, { durable: false, temporary: true, owner: user });
      onLinkClose(() => { broker.nodes.delete(name).catch((err) => log.error('temporary queue not deleted', { name, err })); });
      return queue;
    },
  };
}
