/**
 * What a sender link (the broker sending to a consumer) leaves in its session's delivery
 * buffer when it detaches: nothing (delivery audit, session 18). The core releases every
 * delivery of the link that was not settled when the link closes (Consumer.close), so rhea
 * must neither send the ones still queued nor keep waiting for the others to be settled.
 *
 * - Queued, not written: rhea sends a session's transfers in order as the peer's session
 *   window allows, with delivery-ids given when they are queued. A receiver whose window was
 *   full (a slow consumer, or one holding many deliveries unsettled) that detached got the rest
 *   of its link's transfers after the detach, once its window opened: on an unattached
 *   handle or, as rhea gives a new link the lowest free handle, on the receiver's next link of
 *   the session, which took them as its own (with no credit) while the core had released them
 *   to other consumers: one message delivered to two consumers [AMQP 2.6.5, 2.7.5]. They are
 *   dropped. Delivery-ids stay gapless (Proton requires each new delivery-id to be the next):
 *   those queued behind them for other links are renumbered; the peer has seen none of them.
 * - Written, not settled by the peer: rhea keeps a delivery in the session's buffer (2048
 *   slots) until both ends have settled it, and frees slots only from the oldest. A client
 *   that detaches without settling (it owes nothing more: the link is gone and the core has
 *   released them) left them there for good: after 2048 of them the session sent nothing
 *   more, to any of its links. Once the link is closed and the core has released them, they
 *   count as settled on both ends; a later disposition for one finds nothing to act on (the
 *   core ignores an outcome for a released delivery).
 */

/* The parts of rhea's session Outgoing touched here (see rhea/lib/session.js). */
interface QueuedDelivery {
  id: number;
  link: unknown;
  data: unknown[];
  next_to_send: number;
  settled: unknown;
  remote_settled: unknown;
}
interface Outgoing {
  next_delivery_id: number;
  next_pending_delivery: number;
  deliveries: { size: number; head: number; tail: number; capacity: number; entries: Array<QueuedDelivery | undefined> };
}

function bufferOf(link: any): { out: Outgoing; all: QueuedDelivery[] } | undefined {
  const out: Outgoing | undefined = link?.session?.outgoing;
  if (!out || out.deliveries.size === 0) return undefined;
  const buf = out.deliveries;
  const all: QueuedDelivery[] = [];
  for (let i = 0; i < buf.size; i++) all.push(buf.entries[(buf.head + i) % buf.capacity]!);
  return { out, all };
}

/** Drops `link`'s queued, unwritten transfers from its session (at our detach); returns how many. */
export function dropUnwrittenTransfers(link: any): number {
  const b = bufferOf(link);
  if (!b || b.out.next_pending_delivery === b.out.next_delivery_id) return 0;
  const { out, all } = b;
  // rhea's ids are plain counters (written modulo 2^32, rhea-guards.ts section 9): the first
  // unwritten delivery is at its distance from the head.
  const firstUnwritten = out.next_pending_delivery - all[0].id;
  if (firstUnwritten < 0 || firstUnwritten >= all.length) return 0;
  const kept = all.slice(0, firstUnwritten);
  let nextId = out.next_pending_delivery;
  let dropped = 0;
  for (let i = firstUnwritten; i < all.length; i++) {
    const d = all[i];
    if (d.link === link) {
      if (i === firstUnwritten && d.next_to_send > 0) {
        // Partly written (a multi-frame delivery): its id is on the wire, the rest of its
        // frames are not sent (the peer discards an incomplete delivery of a detached link).
        d.next_to_send = d.data.length;
        d.settled = true;
        d.remote_settled = true;
        kept.push(d);
        nextId++;
        out.next_pending_delivery++;
      }
      dropped++;
      continue;
    }
    d.id = nextId++;
    kept.push(d);
  }
  if (dropped === 0) return 0;
  const buf = out.deliveries;
  buf.entries = kept;
  buf.head = 0;
  buf.size = kept.length;
  buf.tail = kept.length % buf.capacity;
  out.next_delivery_id = nextId;
  return dropped;
}

/**
 * Counts `link`'s written deliveries the peer has not settled as settled on both ends, once
 * the link is closed on both sides and the core has released them (server.ts #closeLink; not
 * at our own detach: outcomes the peer sent before reading it still apply).
 */
export function forgetUnsettled(link: any): void {
  const b = bufferOf(link);
  if (!b) return;
  const written = Math.min(Math.max(b.out.next_pending_delivery - b.all[0].id, 0), b.all.length);
  for (let i = 0; i < written; i++) {
    const d = b.all[i];
    if (d.link === link && !d.remote_settled) { d.settled = true; d.remote_settled = true; }
  }
}

/**
 * Makes `sender` drop its unwritten transfers as it detaches: rhea's close() queues our detach,
 * on the peer's detach (rhea answers it) and on ours (errors, queue deleted) alike.
 */
export function dropUnwrittenOnDetach(sender: any): void {
  const close = sender.close;
  sender.close = function (this: any, ...args: unknown[]) {
    dropUnwrittenTransfers(this);
    return close.apply(this, args);
  };
}
