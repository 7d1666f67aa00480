/**
 * History granularity across kills (tools/crash-test.ts with `--sow-history W,G`): after each
 * round's clean stop, read the SOW queues' `log` and `hist` rows straight from the data
 * directory (classic-level, the broker stopped) and check that the kept moments are
 * consistent, whatever kill -9 cut short and whatever recovery read back (the `kept` field
 * of history rows, lib/core/engine/event-record.ts, read by sow-structure.ts `recover()`).
 *
 * A superseded version's kept moment is the time of the next log event of its key (the one
 * that superseded it). Per key, over the history rows left (SCN order, window purges taken
 * into account):
 *   - hist-phantom: every history row is an event of the log (same SCN, same key);
 *   - kept-apart: the kept moments of two consecutive superseded rows are G or more apart;
 *   - kept-field: a row written after a kept row says (`kept`) that row's kept moment;
 *   - current-G-kept: a version current for G or longer (its superseding event G or more
 *     after it) is in the history, unless the window may have purged it (its kept moment
 *     before the check's start minus the window) or it is a tombstone the sweep may drop;
 *   - the newest row is the key's last log event (the record, or its tombstone).
 */
import { ClassicLevel } from 'classic-level';
import { CoreTables, queuePrefix, prefixEnd, readScn } from '../../lib/core/storage/keyspace.js';
import { HIST, parseHistKey } from '../../lib/ext/sow/tables.js';
import { decodeEvent } from '../../lib/core/engine/event-record.js';

export interface HistViolation { check: string; kind: string; detail: string }

interface Ev { scn: number; ts: number; del: boolean }
interface Row { scn: number; ts: number; del: boolean; kept?: number }

/** Parses `2s`, `500ms`, `1m`, `1h`, `1d`, or a number of ms. */
export function durationMs(s: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(s.trim());
  if (!m) throw new Error(`bad duration ${s}`);
  const mult = { ms: 1, s: 1000, m: 60000, h: 3600000, d: 86400000 }[(m[2] ?? 'ms') as 'ms'];
  return Number(m[1]) * mult;
}

/** Reads the data directory (broker stopped) and checks every SOW queue in `queues`. `stoppedAt`: a time after the last broker stopped (its sweeps purged at most what was superseded before stoppedAt - window). */
export async function checkHistKept(dataDir: string, queues: string[], windowMs: number, G: number, stoppedAt: number): Promise<{ violations: HistViolation[]; rows: number; keys: number }> {
  const db = new ClassicLevel<Buffer, Buffer>(dataDir, { keyEncoding: 'buffer', valueEncoding: 'buffer' });
  await db.open();
  const out: HistViolation[] = [];
  let rowsN = 0, keysN = 0;
  try {
    const ids = new Map<string, number>();
    for await (const [, v] of db.iterator({ gte: Buffer.from([CoreTables.meta]), lt: Buffer.from([CoreTables.meta + 1]) })) {
      const def = JSON.parse(v.toString('utf8'));
      ids.set(def.name, def.id);
    }
    for (const q of queues) {
      const id = ids.get(q);
      if (id === undefined) continue;
      const evs = new Map<string, Ev[]>();
      const lp = queuePrefix(CoreTables.log, id);
      for await (const [k, v] of db.iterator({ gte: lp, lt: prefixEnd(lp) })) {
        const { meta } = decodeEvent(v);
        if (meta.key === undefined) continue;
        let l = evs.get(meta.key);
        if (!l) evs.set(meta.key, l = []);
        l.push({ scn: readScn(k, 5), ts: meta.ts, del: meta.op === 'delete' });
      }
      const hist = new Map<string, Row[]>();
      const hp = queuePrefix(HIST, id);
      for await (const [k, v] of db.iterator({ gte: hp, lt: prefixEnd(hp) })) {
        const { key, scn } = parseHistKey(k);
        const { meta } = decodeEvent(v);
        let l = hist.get(key);
        if (!l) hist.set(key, l = []);
        l.push({ scn, ts: meta.ts, del: meta.op === 'delete', ...(meta.kept !== undefined ? { kept: meta.kept } : {}) });
        rowsN++;
      }
      const horizon = stoppedAt - windowMs;
      for (const [key, rows] of hist) {
        keysN++;
        const le = evs.get(key) ?? [];
        const idx = new Map(le.map((e, i) => [e.scn, i]));
        const keptAt = (r: Row) => { const i = idx.get(r.scn)!; return i + 1 < le.length ? le[i + 1].ts : undefined; };
        let bad = false;
        for (const r of rows) {
          const i = idx.get(r.scn);
          if (i === undefined) { out.push({ check: 'hist-phantom', kind: 'phantom', detail: `${q} key ${key}: history row scn ${r.scn} is no log event of the key` }); bad = true; }
          else if (le[i].ts !== r.ts || le[i].del !== r.del) { out.push({ check: 'hist-phantom', kind: 'mismatched', detail: `${q} key ${key}: history row scn ${r.scn} ts ${r.ts} del ${r.del}, log ts ${le[i].ts} del ${le[i].del}` }); bad = true; }
        }
        if (bad) continue;
        const newest = rows[rows.length - 1];
        if (le.length && newest.scn !== le[le.length - 1].scn) {
          out.push({ check: 'hist-newest', kind: 'lost', detail: `${q} key ${key}: newest history row scn ${newest.scn}, the key's last log event is scn ${le[le.length - 1].scn}` });
          continue;
        }
        for (let i = 0; i + 1 < rows.length; i++) {
          const k1 = keptAt(rows[i])!;
          if (i + 2 < rows.length) {
            const k2 = keptAt(rows[i + 1])!;
            if (k2 - k1 < G) out.push({ check: 'kept-apart', kind: 'mismatched', detail: `${q} key ${key}: versions scn ${rows[i].scn} and ${rows[i + 1].scn} kept at ${k1} and ${k2}, ${k2 - k1} ms apart (G ${G})` });
          }
          const nx = rows[i + 1];
          if (nx.kept !== k1) out.push({ check: 'kept-field', kind: 'mismatched', detail: `${q} key ${key}: row scn ${nx.scn} says kept ${nx.kept ?? 'absent'}, the row before it (scn ${rows[i].scn}) was kept at ${k1} (${nx.kept === undefined ? '' : (nx.kept - k1) + ' ms off'})` });
        }
        const present = new Set(rows.map((r) => r.scn));
        for (let i = 0; i + 1 < le.length; i++) {
          const cur = le[i], next = le[i + 1];
          if (next.ts - cur.ts < G || present.has(cur.scn)) continue;
          if (next.ts < horizon || cur.del) continue; // the window may have purged it / a tombstone the sweep may drop
          out.push({ check: 'current-G-kept', kind: 'lost', detail: `${q} key ${key}: version scn ${cur.scn} (ts ${cur.ts}) was current ${next.ts - cur.ts} ms (G ${G}) until scn ${next.scn}, superseded after the purge horizon ${horizon}, but is not in the history` });
        }
      }
    }
  } finally { await db.close(); }
  return { violations: out, rows: rowsN, keys: keysN };
}
