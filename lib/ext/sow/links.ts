/**
 * Opening SOW links (shared by the sow, history and replay extensions): a SowConsumer for a
 * plan, registered by connection and link name so that a later link can `replace` it
 * (semantics.md 5: the new link takes over what the old one delivered, atomically).
 */
import type { ConsumerRequest } from '../../core/extensions.js';
import type { DeliverySink } from '../../core/queue/delivery.js';
import { TidemarkError, Conditions } from '../../core/errors.js';
import { SowConsumer, type SowPlan } from './sow-consumer.js';
import type { SowStructure } from './sow-structure.js';
import type { Bookmark } from './bookmark.js';
import type { Command, CommandOptions } from './options.js';

export const COMMAND = 'tidemark:command:symbol';
export const BOOKMARK = 'tidemark:bookmark:string';
export const OPTIONS = 'tidemark:options:map';

/** What a link's command filters ask for (wire.md 4). */
export interface LinkCommand { command: Command | 'default'; bookmark?: Bookmark; options: CommandOptions }

export function commandOf(req: ConsumerRequest): LinkCommand {
  return {
    command: (req.filters.get(COMMAND)?.data as Command | undefined) ?? 'default',
    bookmark: req.filters.get(BOOKMARK)?.data as Bookmark | undefined,
    options: (req.filters.get(OPTIONS)?.data as CommandOptions | undefined) ?? {},
  };
}

/** Open SOW links of a queue by connection and link name, for `replace`. */
const liveLinks = new WeakMap<SowStructure, Map<string, { consumer: SowConsumer; sink: DeliverySink }>>();

/** A SOW link for `plan`, taking over the link named by the `replace` option if there is one. */
export function openSowLink(s: SowStructure, req: ConsumerRequest, sink: DeliverySink, plan: SowPlan): SowConsumer {
  let live = liveLinks.get(s);
  if (!live) { live = new Map(); liveLinks.set(s, live); }
  const replace = plan.options.replace;
  if (replace !== undefined) {
    const old = live.get(linkId(req.connectionId, replace));
    if (!old) throw new TidemarkError(Conditions.notFound, `replace: no SOW link named ${replace} on this connection`);
    plan.replaceFrom = old.consumer.handOver();
    old.consumer.close();
    old.sink.close();
  }
  const consumer = new SowConsumer(s, req, sink, plan);
  const id = linkId(req.connectionId, req.linkName);
  live.set(id, { consumer, sink });
  const close = consumer.close.bind(consumer);
  consumer.close = () => { if (live!.get(id)?.consumer === consumer) live!.delete(id); close(); };
  return consumer;
}

function linkId(connection: string, link: string): string { return `${connection}\u0000${link}`; }
