/**
 * Per-message TTL (semantics.md 1): `header.ttl` ms from arrival. Expired messages are never
 * delivered (the list structure checks `expiresAt`) and are removed by a background sweep.
 */
import type { Extension } from '../../core/extensions.js';
import type { BrokerContext } from '../../core/broker-context.js';

export function ttlExtension(opts: { sweepIntervalMs?: number } = {}): Extension {
  let timer: NodeJS.Timeout | undefined;
  return {
    name: 'ttl',
    configureQueue({ queue }) {
      queue.inboundHooks.push((msg) => {
        const ttl = msg.message?.ttl;
        if (typeof ttl === 'number' && ttl > 0) msg.expiresAt = msg.receivedAt + ttl;
      });
    },
    start(broker: BrokerContext) {
      timer = setInterval(() => {
        const now = broker.clock.now();
        for (const q of broker.nodes.list()) q.structure.sweep?.(now);
      }, opts.sweepIntervalMs ?? 1000);
      timer.unref();
    },
    stop() { if (timer) clearInterval(timer); },
  };
}
