/**
 * SOW keys (wire.md 2.3, semantics.md 2): comma-separated paths; `/a/b` reads the JSON body,
 * a bare `name` an application property. One path: the value as text. Several: a JSON array
 * of the values, which is unambiguous whatever the values contain.
 */
import { jsonText } from '../../codec/json-body.js';

export interface KeySpec { readonly text: string; readonly paths: ReadonlyArray<{ json: boolean; segments: (string | number)[]; raw: string }> }

export function parseKeySpec(text: string): KeySpec {
  const parts = text.split(',').map((s) => s.trim());
  if (parts.length === 0 || parts.some((p) => p.length === 0)) throw new TypeError(`sow.key ${JSON.stringify(text)} has an empty path`);
  return {
    text,
    paths: parts.map((raw) => {
      if (!raw.startsWith('/')) {
        if (!/^[A-Za-z_$][\w.$-]*$/.test(raw)) throw new TypeError(`sow.key path ${JSON.stringify(raw)} is neither /json/path nor a property name`);
        return { json: false, segments: [raw], raw };
      }
      const segments: (string | number)[] = [];
      for (const seg of raw.slice(1).split('/')) {
        const m = /^([^[\]]+)((?:\[\d+\])*)$/.exec(seg);
        if (!m) throw new TypeError(`sow.key path ${JSON.stringify(raw)} has a bad segment ${JSON.stringify(seg)}`);
        segments.push(m[1]);
        for (const idx of m[2].matchAll(/\[(\d+)\]/g)) segments.push(Number(idx[1]));
      }
      return { json: true, segments, raw };
    }),
  };
}

function atPath(v: any, segs: (string | number)[]): unknown {
  for (const s of segs) {
    if (v === null || v === undefined || typeof v !== 'object') return undefined;
    v = v[s as any];
  }
  return v;
}

/**
 * True when a string is well-formed Unicode (no lone surrogate). A SOW key that is not cannot
 * be stored faithfully: LevelDB keys are UTF-8, where every lone surrogate becomes U+FFFD, so
 * two such keys (or one and the key with U+FFFD) would share one row.
 */
export const wellFormed: (s: string) => boolean = typeof (String.prototype as any).isWellFormed === 'function'
  ? (s) => (s as any).isWellFormed()
  : (s) => !/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);

/**
 * Why a key value cannot be a SOW key, or undefined when it can. Besides lone surrogates (see
 * wellFormed): U+0000, which the `hist` rows use to end the key before its SCN, so a key
 * holding it would sort among another key's versions (`a` and `a\0\0x` would share a range).
 */
export function keyFault(s: string): string | undefined {
  if (!wellFormed(s)) return 'is not well-formed Unicode (it holds a lone surrogate, which cannot be stored apart from U+FFFD)';
  if (s.includes('\u0000')) return 'holds a NUL character (U+0000), which the stored rows use to end a key';
  return undefined;
}

/** A key (or key value) for an error description: JSON-quoted (lone surrogates escaped), long ones cut. */
export function showKey(k: string): string {
  return k.length > 80 ? JSON.stringify(k.slice(0, 80)) + `… (${k.length} characters)` : JSON.stringify(k);
}

/**
 * The key of a record, or an error naming the missing path, or the path whose value cannot
 * be a key (see keyFault).
 */
export function extractKey(spec: KeySpec, json: unknown, props: Record<string, unknown> | undefined): { key: string } | { missing: string } | { malformed: string; value: string; fault: string } {
  const values: unknown[] = [];
  for (const p of spec.paths) {
    const v = p.json ? atPath(json, p.segments) : props?.[p.segments[0] as string];
    if (v === undefined || v === null || v === '' || (typeof v === 'object' && !(v instanceof Date))) return { missing: p.raw };
    const fault = typeof v === 'string' ? keyFault(v) : undefined;
    if (fault) return { malformed: p.raw, value: v as string, fault };
    values.push(typeof v === 'bigint' ? v.toString() : v instanceof Date ? v.getTime() : v);
  }
  if (values.length === 1) return { key: String(values[0]) };
  return { key: jsonText(values) }; // exact digits for a bigint (jsonText)
}
