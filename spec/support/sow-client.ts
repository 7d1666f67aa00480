/** Helpers for SOW tests: attach with tidemark filters and read annotated messages. */
import { r, connect, openReceiver, collect, type Received } from './client.js';

export function tmFilters(f: { command?: string; filter?: string; bookmark?: string; options?: Record<string, unknown>; selector?: string; checkpoint?: unknown }): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const d = (desc: string, v: any) => r.types.described_nc(r.types.wrap_symbol(desc), v);
  if (f.command) out.command = d('tidemark:command:symbol', r.types.wrap_symbol(f.command));
  if (f.filter) out.content = d('tidemark:content-filter:string', r.types.wrap_string(f.filter));
  if (f.bookmark) out.bookmark = d('tidemark:bookmark:string', r.types.wrap_string(f.bookmark));
  if (f.selector) out.selector = d('apache.org:selector-filter:string', r.types.wrap_string(f.selector));
  if (f.options) out.options = d('tidemark:options:map', r.types.wrap_map(f.options));
  if (f.checkpoint !== undefined) out.checkpoint = d('tidemark:checkpoint:map', typeof f.checkpoint === 'string' ? r.types.wrap_string(f.checkpoint) : r.types.wrap_map(f.checkpoint));
  return out;
}

export const cmdOf = (m: Received) => String(m.message.message_annotations?.['x-opt-tm-cmd'] ?? '');
export const scnOf = (m: Received) => Number(m.message.message_annotations?.['x-opt-tm-scn'] ?? -1);
export const keyOf = (m: Received) => String(m.message.message_annotations?.['x-opt-tm-key'] ?? '');

export function bodyJson(m: Received): any {
  const b = m.message.body;
  if (typeof b === 'string') return JSON.parse(b);
  if (b && b.typecode === 0x75) return JSON.parse(Buffer.from(b.content).toString('utf8'));
  return b;
}

/** Runs a `sow` command and returns the records between the group markers. */
export async function sowQuery(url: string, address: string, f: Omit<Parameters<typeof tmFilters>[0], 'command'> = {}): Promise<{ records: Received[]; groupEnd: number; all: Received[] }> {
  const c = await connect(url);
  try {
    const rcv = await openReceiver(c, { address, filter: tmFilters({ ...f, command: 'sow' }) });
    const all = await collect(rcv, { idleMs: 2000, credit: 500, until: (m) => cmdOf(m) === 'group_end' });
    const end = all.find((m) => cmdOf(m) === 'group_end');
    return { records: all.filter((m) => cmdOf(m) === 'sow'), groupEnd: end ? scnOf(end) : -1, all };
  } finally { await c.close(); }
}

export const checkpointOf = (m: Received): Record<string, unknown> | undefined => m.message.message_annotations?.['x-opt-tm-checkpoint'];
