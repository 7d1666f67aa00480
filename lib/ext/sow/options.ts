/** `tidemark:options:map` and `tidemark:command:symbol` values (wire.md 4). */
import { TidemarkError, Conditions } from '../../core/errors.js';
import { toDurationMs } from '../../address/index.js';
import { compileOrderBy, tokenize } from '../../filter/index.js';

export type Command = 'sow' | 'subscribe' | 'sow_and_subscribe';

export interface CommandOptions {
  top_n?: number;
  skip_n?: number;
  order_by?: string;
  batch_size?: number;
  oof?: boolean;
  /** Conflation interval, ms. */
  conflation?: number;
  conflation_key?: string[];
  bookmark_not_found?: 'now' | 'epoch' | 'fail';
  query_id?: string;
  replace?: string;
}

const bad = (msg: string) => new TidemarkError(Conditions.invalidField, msg);

function sym(v: unknown): unknown { return (v && typeof v === 'object' && 'value' in (v as any)) ? (v as any).value : v; }

export function parseCommand(v: unknown): Command {
  const s = String(sym(v));
  if (s === 'sow' || s === 'subscribe' || s === 'sow_and_subscribe') return s;
  throw bad(`tidemark:command:symbol: unknown command ${JSON.stringify(s)} (known: sow, subscribe, sow_and_subscribe)`);
}

function int(name: string, v: unknown, min: number): number {
  const n = typeof v === 'bigint' ? Number(v) : typeof v === 'string' && /^-?\d+$/.test(v) ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < min) throw bad(`tidemark:options:map: ${name} must be an integer >= ${min}, got ${JSON.stringify(typeof v === 'bigint' ? v.toString() : v)}`);
  return n;
}

/** Longest interval a Node timer keeps (2^31 - 1 ms, about 24.8 days); longer ones fire after 1 ms. */
export const MAX_CONFLATION_MS = 2 ** 31 - 1;

/**
 * `conflation`: a duration (a bare number is seconds, like every duration, decisions.md; typed
 * AMQP integers too). A negative, fractional or non-finite number is refused by name here
 * (toDurationMs would show NaN as null), and so is an interval no timer can keep: setInterval
 * turns it into 1 ms with only a warning on stderr.
 */
function conflation(val: unknown): number {
  if (typeof val === 'number' && !(Number.isInteger(val) && val >= 0)) {
    throw bad(`tidemark:options:map: conflation must be a duration (e.g. 500ms, 10s) or a whole non-negative number of seconds, got ${String(val)}`);
  }
  let ms: number;
  try { ms = toDurationMs('conflation', val); } catch (e) { throw bad(`tidemark:options:map: ${(e as Error).message}`); }
  if (ms > MAX_CONFLATION_MS) {
    throw bad(`tidemark:options:map: conflation ${typeof val === 'string' ? JSON.stringify(val) : String(val)} is ${ms} ms, longer than the longest interval the broker can time (${MAX_CONFLATION_MS} ms, about 24.8 days)`);
  }
  return ms;
}

/**
 * `conflation_key`: a list of body paths, each read as a content filter reads `/a/b` (the
 * filter lexer). Anything else (`["not a path"]`, `[""]`) used to be taken as is and gave every
 * event the same conflation key, so only the last event of an interval survived.
 * The conflation key is looked up segment by segment from the `/`-separated text, so paths
 * with an array index (`/a[0]`) or a `/` inside a quoted segment are refused rather than read
 * wrongly; other quoted segments are kept as their plain text.
 */
function conflationKey(val: unknown): string[] {
  if (!Array.isArray(val)) throw bad('tidemark:options:map: conflation_key must be a list of /paths (e.g. ["/sym"])');
  return val.map((x, i) => {
    const p = sym(x);
    const name = `tidemark:options:map: conflation_key[${i}]`;
    if (typeof p !== 'string') throw bad(`${name} must be a string /path, got ${x === null ? 'null' : Array.isArray(x) ? 'a list' : typeof x}`);
    let tokens;
    try { tokens = tokenize(p); } catch (e) { throw bad(`${name} ${JSON.stringify(p)} is not a /path: ${(e as Error).message}`); }
    const t = tokens[0];
    if (tokens.length !== 2 || t?.type !== 'path') throw bad(`${name} ${JSON.stringify(p)} is not a /path into the JSON body (e.g. /sym or /order/id)`);
    if (t.segments.some((s) => typeof s !== 'string' || s.includes('/'))) {
      throw bad(`${name} ${JSON.stringify(p)}: a conflation key path cannot have an array index or a '/' inside a segment`);
    }
    return '/' + t.segments.join('/');
  });
}

export function parseOptions(v: unknown): CommandOptions {
  if (typeof v === 'string') { try { v = JSON.parse(v); } catch { throw bad('tidemark:options:map: value must be a map'); } }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw bad('tidemark:options:map: value must be a map');
  const o: CommandOptions = {};
  for (const [k, raw] of Object.entries(v as Record<string, unknown>)) {
    const val = sym(raw);
    switch (k) {
      case 'top_n': o.top_n = int(k, val, 0); break;
      case 'skip_n': o.skip_n = int(k, val, 0); break;
      case 'batch_size': o.batch_size = int(k, val, 1); break;
      case 'order_by':
        if (typeof val !== 'string') throw bad('tidemark:options:map: order_by must be a string');
        // Compiled here so a malformed one refuses the attach (wire.md 4), not the first fetch.
        try { compileOrderBy(val); } catch (e) { throw bad(`tidemark:options:map: order_by: ${(e as Error).message}`); }
        o.order_by = val; break;
      case 'oof': if (typeof val !== 'boolean') throw bad('tidemark:options:map: oof must be a boolean'); o.oof = val; break;
      case 'conflation': o.conflation = conflation(val); break;
      case 'conflation_key': o.conflation_key = conflationKey(val); break;
      case 'bookmark_not_found':
        if (val !== 'now' && val !== 'epoch' && val !== 'fail') throw bad('tidemark:options:map: bookmark_not_found must be now, epoch or fail');
        o.bookmark_not_found = val; break;
      case 'query_id': o.query_id = String(val); break;
      case 'replace': o.replace = String(val); break;
      default: throw bad(`tidemark:options:map: unknown option ${k} (known: top_n, skip_n, order_by, batch_size, oof, conflation, conflation_key, bookmark_not_found, query_id, replace)`);
    }
  }
  if (o.skip_n !== undefined && o.top_n === undefined) throw bad('tidemark:options:map: skip_n needs top_n');
  return o;
}
