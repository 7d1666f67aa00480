/**
 * Last-value queues (semantics.md 1): a message whose application property named by
 * `qpid.last_value_queue_key` equals a stored one's replaces it; the new one goes to the tail.
 */
import type { Extension } from '../../core/extensions.js';
import { ListStructure } from '../../core/queue/list-structure.js';
import type { Entry } from '../../core/queue/entry.js';
import { toStr } from '../../address/index.js';

/** The key property's name: an empty one would name no property, and nothing would be replaced. */
function lvqKey(v: unknown): string {
  const s = toStr('qpid.last_value_queue_key', v);
  if (s === '') throw new Error('qpid.last_value_queue_key: expected the name of an application property, got an empty string');
  return s;
}

export function lvqExtension(): Extension {
  return {
    name: 'lvq',
    queueArguments: [{ name: 'qpid.last_value_queue_key', parse: lvqKey }],
    validateArguments(args) {
      if (args['qpid.last_value_queue_key'] !== undefined && args['sow.key'] !== undefined) {
        throw new Error('qpid.last_value_queue_key and sow.key exclude each other: a SOW queue already keeps the last value per key');
      }
    },
    configureQueue({ queue, arguments: args }) {
      const prop = args['qpid.last_value_queue_key'] as string | undefined;
      if (!prop || !(queue.structure instanceof ListStructure)) return;
      const structure = queue.structure;
      const byKey = new Map<string, Entry>();
      structure.admission.unshift({
        admit(_list, incoming, msg) {
          const v = msg.message?.application_properties?.[prop];
          if (v === undefined || v === null) return;
          const key = String(v);
          incoming.lvqKey = key;
          const old = byKey.get(key);
          return old && !old.removed ? [old] : undefined;
        },
      });
      // Keep the index in step with appends (including recovery) and removals.
      // Newest wins: a failed publish re-announces the entry it displaced (list-structure prepare).
      structure.onAppended.push((e) => {
        if (e.lvqKey === undefined) return;
        const cur = byKey.get(e.lvqKey);
        if (!cur || cur.removed || cur.scn < e.scn) byKey.set(e.lvqKey, e);
      });
      structure.onRemoved.push((e) => { if (e.lvqKey !== undefined && byKey.get(e.lvqKey) === e) byKey.delete(e.lvqKey); });
    },
  };
}
