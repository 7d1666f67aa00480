/**
 * Queue limits (semantics.md 1): `qpid.max_count` / `qpid.max_size` with `qpid.policy_type`
 * `reject` (default: refuse the new message) or `ring` (drop the oldest until it fits).
 */
import type { Extension } from '../../core/extensions.js';
import { ListStructure, type AdmissionPolicy } from '../../core/queue/list-structure.js';
import { TidemarkError, Conditions } from '../../core/errors.js';
import { toInt, toStr } from '../../address/index.js';

export function limitsExtension(): Extension {
  return {
    name: 'limits',
    queueArguments: [
      { name: 'qpid.max_count', parse: (v) => toInt('qpid.max_count', v, { min: 0, saturate: true }) },
      { name: 'qpid.max_size', parse: (v) => toInt('qpid.max_size', v, { min: 0, saturate: true }) },
      {
        name: 'qpid.policy_type',
        parse: (v) => {
          const s = toStr('qpid.policy_type', v);
          if (s !== 'reject' && s !== 'ring') throw new TypeError(`expected reject or ring, got ${JSON.stringify(s)}`);
          return s;
        },
      },
    ],
    validateArguments(args) {
      if (args['qpid.policy_type'] === 'ring' && !args['qpid.max_count'] && !args['qpid.max_size']) {
        throw new Error('qpid.policy_type=ring needs qpid.max_count or qpid.max_size');
      }
    },
    configureQueue({ queue, arguments: args }) {
      const maxCount = (args['qpid.max_count'] as number | undefined) ?? 0;
      const maxSize = (args['qpid.max_size'] as number | undefined) ?? 0;
      if (!maxCount && !maxSize) return;
      if (!(queue.structure instanceof ListStructure)) return;
      const ring = args['qpid.policy_type'] === 'ring';
      const policy: AdmissionPolicy = {
        admit(list, incoming) {
          if (maxSize && incoming.size > maxSize) {
            throw new TidemarkError(Conditions.resourceLimit, `message of ${incoming.size} bytes is larger than qpid.max_size=${maxSize} of queue ${queue.name}`);
          }
          const fits = (count: number, bytes: number) => (!maxCount || count + 1 <= maxCount) && (!maxSize || bytes + incoming.size <= maxSize);
          if (fits(list.depth, list.bytes)) return;
          if (!ring) {
            throw new TidemarkError(Conditions.resourceLimit, `queue ${queue.name} is full (${maxCount ? `qpid.max_count=${maxCount}` : ''}${maxCount && maxSize ? ', ' : ''}${maxSize ? `qpid.max_size=${maxSize}` : ''}, policy reject)`);
          }
          const drop = [];
          let count = list.depth, bytes = list.bytes;
          for (const e of list.live()) {
            if (fits(count, bytes)) break;
            drop.push(e);
            count--; bytes -= e.size;
          }
          return drop;
        },
      };
      queue.structure.admission.push(policy);
    },
  };
}
