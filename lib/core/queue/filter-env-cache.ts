/**
 * The filter envs of the messages a list queue's filtering consumers tested or were offered
 * last, so that the consumers testing one message in turn (each dispatch round offers a new
 * message to every one of them) decode it once. Bounded by count and by the messages' bytes,
 * oldest out first: kept on every queued entry while a filter was attached, the decoded
 * copies filled the heap (20k queued 6.5 KB JSON messages: +134 MB with a selector, +423 MB
 * with a content filter; 220k: out of memory).
 */
import type { Entry } from './entry.js';
import { MessageEnv } from './filter-env.js';

/** At most this many envs are kept. */
const MAX_ENTRIES = 512;
/**
 * At most this many bytes of the messages they stand for (a decoded message and its parsed
 * JSON body take a few times its encoded size). A larger message is not kept at all.
 */
const MAX_BYTES = 1 << 20;

export class FilterEnvCache {
  /** Insertion order is eviction order. */
  readonly #envs = new Map<Entry, MessageEnv>();
  #bytes = 0;

  get size(): number { return this.#envs.size; }

  /** The env of `e`: kept, or over its stored bytes (decoded as far as the filter reads), kept now. */
  of(e: Entry): MessageEnv {
    let env = this.#envs.get(e);
    if (env === undefined) { env = MessageEnv.ofBytes(e.bytes); this.put(e, env); }
    return env;
  }

  /** Keeps `env` for `e` (the view a publish decoded already), making room by dropping the oldest. */
  put(e: Entry, env: MessageEnv): void {
    if (e.size > MAX_BYTES || this.#envs.has(e)) return;
    this.#envs.set(e, env);
    this.#bytes += e.size;
    while (this.#envs.size > MAX_ENTRIES || this.#bytes > MAX_BYTES) {
      this.delete(this.#envs.keys().next().value!);
    }
  }

  /** Forgets `e` (it left the queue). */
  delete(e: Entry): void {
    if (this.#envs.delete(e)) this.#bytes -= e.size;
  }

  clear(): void {
    this.#envs.clear();
    this.#bytes = 0;
  }
}
