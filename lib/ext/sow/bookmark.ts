/**
 * Bookmarks (wire.md 5): `0` (epoch), `now` (live end), `N` (after SCN N), or an instant as
 * `YYYYMMDDTHHMMSS[.ffffff]Z` (AMPS form) or ISO-8601 with `Z`.
 */
import { TidemarkError, Conditions } from '../../core/errors.js';

export type Bookmark = { kind: 'epoch' } | { kind: 'now' } | { kind: 'scn'; scn: number } | { kind: 'time'; ms: number; text: string };

export function parseBookmark(text: string): Bookmark {
  const t = text.trim();
  if (t === '0') return { kind: 'epoch' };
  if (t.toLowerCase() === 'now') return { kind: 'now' };
  if (/^\d+$/.test(t)) {
    const n = Number(t);
    if (!Number.isSafeInteger(n)) throw new TidemarkError(Conditions.invalidField, `bookmark ${t}: SCN too large`);
    return { kind: 'scn', scn: n };
  }
  const amps = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})(?:\.(\d{1,9}))?Z$/.exec(t);
  if (amps) {
    const [, y, mo, d, h, mi, s, frac] = amps;
    const ms = Date.UTC(+y, +mo - 1, +d, +h, +mi, +s) + (frac ? Math.floor(Number('0.' + frac) * 1000) : 0);
    if (Number.isNaN(ms)) throw bad(t);
    return { kind: 'time', ms, text: t };
  }
  if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?Z$/.test(t)) {
    const ms = Date.parse(t);
    if (Number.isNaN(ms)) throw bad(t);
    return { kind: 'time', ms, text: t };
  }
  throw bad(t);
}

function bad(t: string): TidemarkError {
  return new TidemarkError(Conditions.invalidField, `malformed bookmark ${JSON.stringify(t)}: expected 0, now, an SCN, YYYYMMDDTHHMMSS[.ffffff]Z or ISO-8601 with Z`);
}
