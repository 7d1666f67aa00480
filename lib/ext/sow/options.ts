/** `tidemark:options:map` and `tidemark:command:symbol` values (wire.md 4). */
import { TidemarkError, Conditions } from '../../core/errors.js';
import { toDurationMs } from '../../address/index.js';
import { compileOrderBy } from '../../filter/index.js';

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
      case 'conflation':
        // A bare number is seconds, like every duration (decisions.md); typed AMQP integers too.
        try { o.conflation = toDurationMs('conflation', val); } catch (e) { throw bad(`tidemark:options:map: ${(e as Error).message}`); }
        break;
      case 'conflation_key':
        if (!Array.isArray(val) || !val.every((x) => typeof x === 'string')) throw bad('tidemark:options:map: conflation_key must be a list of paths');
        o.conflation_key = val as string[]; break;
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
