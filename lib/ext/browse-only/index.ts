/**
 * Browse-only queues (QPID-4241, semantics.md 1): every receiver browses, `move` is answered
 * with `copy`, acknowledgements remove nothing. Messages leave only by TTL, ring overflow,
 * purge or deletion. The queue's access mode is all this extension sets; the list structure
 * and the protocol honour it for every queue kind.
 */
import type { Extension } from '../../core/extensions.js';
import { toBool } from '../../address/index.js';

export function browseOnlyExtension(): Extension {
  return {
    name: 'browse-only',
    queueArguments: [{ name: 'qpid.browse-only', aliases: ['browse-only'], guardsData: true, parse: (v) => toBool('qpid.browse-only', v) }],
    configureQueue({ queue, arguments: args }) {
      if (args['qpid.browse-only'] === true) queue.browseOnly = true;
    },
  };
}
