/**
 * Last-value queues (semantics.md 1): a message whose application property named by
 * `qpid.last_value_queue_key` equals a stored one's replaces it; the new one goes to the tail.
 */
import type { Extension } from '../../core/extensions.js';
import { ListStructure } from '../../core/queue/list-structure.js';
import type { Entry } from '../../core/queue/entry.js';
import { toStr } from '../../address/index.js';
import { readApplicationProperties } from '../../codec/app-properties.js';

/**
 * The index key of an LVQ key property's value (undefined: no key). Strings, numbers, booleans
 * and exact 64-bit integers compare by their text, so an int 1 and a string "1" are one key,
 * as in qpidd; a long past 2^53 by its exact decimal (rhea gives it rounded or as its 8 bytes:
 * the caller passes the exact value read from the bytes). Values of other types get a tagged
 * form starting with NUL and a letter, which no string key has (a string starting with NUL is
 * given a second one): a timestamp `\0t:` and its milliseconds (a Date's text has one-second
 * resolution), a binary or uuid `\0b:` and its hex (as text, invalid UTF-8 made distinct
 * binaries one key), anything else (lists, maps, described values) `\0j:` and a JSON form.
 * A uuid and a 16-byte binary of the same bytes are one key (rhea decodes both to the bytes).
 */
export function lvqKeyOf(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return v.charCodeAt(0) === 0 ? `\0${v}` : v;
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') return String(v);
  if (v instanceof Date) return `\0t:${v.getTime()}`;
  if (v instanceof Uint8Array) return `\0b:${Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('hex')}`;
  try {
    return `\0j:${JSON.stringify(v, (_k, x) => {
      if (typeof x === 'bigint') return `${x}n`;
      if (x !== null && typeof x === 'object' && (x as { type?: unknown }).type === 'Buffer' && Array.isArray((x as { data?: unknown }).data)) return `0x${Buffer.from((x as { data: number[] }).data).toString('hex')}`;
      return x;
    })}`;
  } catch { return `\0j:${String(v)}`; }
}

/**
 * Whether rhea's decode of a value may not be what was sent: a long/ulong past 2^53 arrives
 * rounded, and past 2^53 + 2^32 as its 8 bytes (types.js read_long), indistinguishable from a
 * double that large or an 8-byte binary, which the re-read gives back as they were.
 */
function mayBeInexactLong(v: unknown): boolean {
  return typeof v === 'number' ? v >= 9007199254740992 || v <= -9007199254740992
    : v instanceof Uint8Array && v.length === 8;
}

/** The key of the property `prop` in `bytes`, read with exact 64-bit integers; undefined when absent or unreadable. */
function keyFromBytes(bytes: Buffer, prop: string): string | undefined {
  const props = readApplicationProperties(bytes);
  return props ? lvqKeyOf(props.get(prop)) : undefined;
}

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
          const key = (mayBeInexactLong(v) ? keyFromBytes(msg.bytes, prop) : undefined) ?? lvqKeyOf(v)!;
          incoming.lvqKey = key;
          const old = byKey.get(key);
          return old && !old.removed ? [old] : undefined;
        },
      });
      // Entries stored by an older version kept a key made with String(v) (binaries, uuids and
      // timestamps collided, longs past 2^53 were rounded): derive it again from the bytes.
      structure.recoverKey = (bytes) => keyFromBytes(bytes, prop);
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
