/** The built-in extensions by the names `conf/broker.json` lists them under. */
import type { Extension } from '../core/extensions.js';
import { ttlExtension } from './ttl/index.js';
import { temporaryQueuesExtension } from './temporary-queues/index.js';
import { browseOnlyExtension } from './browse-only/index.js';
import { limitsExtension } from './limits/index.js';
import { lvqExtension } from './lvq/index.js';
import { selectorExtension } from './selector/index.js';
import { managementExtension } from './management/index.js';
import { sowExtension } from './sow/index.js';
import { historyExtension } from './history/index.js';
import { replayExtension } from './replay/index.js';
import { checkpointsExtension } from './checkpoints/index.js';
import { httpExtension } from './http/index.js';
import { aclExtension } from './acl/index.js';

export const builtinExtensions: Record<string, () => Extension> = {
  ttl: () => ttlExtension(),
  'temporary-queues': () => temporaryQueuesExtension(),
  'browse-only': () => browseOnlyExtension(),
  limits: () => limitsExtension(),
  lvq: () => lvqExtension(),
  selector: () => selectorExtension(),
  sow: () => sowExtension(),
  // These three build on sow (Extension.requires) and must be listed after it.
  history: () => historyExtension(),
  replay: () => replayExtension(),
  checkpoints: () => checkpointsExtension(),
  management: () => managementExtension(),
  http: () => httpExtension(),
  // Per-user queue ACLs (config `acl`); no rules + default allow = no effect.
  acl: () => aclExtension(),
};
