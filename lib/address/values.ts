/**
 * Durations and lenient interpretation of queue argument values (wire.md 2.1, 2.3).
 * Values may arrive as long, int, uint, string ("10", "True") or boolean; they are read
 * leniently, as qpidd does, and then validated by the caller.
 */

const UNIT_MS: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};

const DURATION_RE = /^(\d+)(ms|s|m|h|d|w)$/;

/** Durations: integer followed by ms, s, m, h, d or w ("500ms", "10m", "7d"); returns milliseconds; throws RangeError with a message naming the bad text. */
export function parseDuration(text: string): number {
  const shown = typeof text === 'string' ? JSON.stringify(text) : String(text);
  const m = typeof text === 'string' ? DURATION_RE.exec(text.trim()) : null;
  if (!m) {
    throw new RangeError(
      `invalid duration ${shown}: expected a non-negative integer followed by ms, s, m, h, d or w (e.g. 500ms, 10m, 7d)`,
    );
  }
  const ms = Number(m[1]) * UNIT_MS[m[2]!]!;
  if (!Number.isSafeInteger(ms)) throw new RangeError(`invalid duration ${shown}: too large`);
  return ms;
}

/** rhea hands unknown AMQP-typed values over as objects with `type` and `value`: unwrap them. */
function unwrap(v: unknown): unknown {
  let x = v;
  for (let i = 0; i < 4 && x !== null && typeof x === 'object' && 'value' in x && 'type' in x; i++) {
    x = (x as { value: unknown }).value;
  }
  if (x instanceof Number || x instanceof String || x instanceof Boolean) x = x.valueOf();
  return x;
}

function show(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v);
  if (typeof v === 'bigint') return `${v}n`;
  if (v === undefined) return 'undefined';
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v); // JSON.stringify shows NaN as null
  if (v instanceof Uint8Array) return `binary(${v.length} bytes)`;
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

const TRUE_WORDS = new Set(['true', 'yes', 'on', '1']);
const FALSE_WORDS = new Set(['false', 'no', 'off', '0']);

/**
 * Boolean: true/false; any integer (0 = false, other = true); strings true/false, yes/no,
 * on/off, 1/0 in any case, surrounding whitespace ignored.
 */
export function toBool(name: string, v: unknown): boolean {
  const x = unwrap(v);
  if (typeof x === 'boolean') return x;
  if (typeof x === 'number' && Number.isInteger(x)) return x !== 0;
  if (typeof x === 'bigint') return x !== 0n;
  if (typeof x === 'string') {
    const w = x.trim().toLowerCase();
    if (TRUE_WORDS.has(w)) return true;
    if (FALSE_WORDS.has(w)) return false;
  }
  throw new TypeError(`${name}: expected a boolean (true/false, yes/no, 1/0), got ${show(v)}`);
}

/**
 * rhea's decode of a long/ulong past 2^53 + 2^32 is its 8 raw bytes (types.js read_long,
 * read_ulong), which look like a binary of 8 bytes: the integer they hold, or undefined when
 * rhea would have decoded them as a number either way (so they were a binary). With the top
 * bit set they are a long below -2^53 or a ulong past 2^63: `ulong` holds the second reading.
 */
function wideInteger(x: unknown): { value: bigint; ulong?: bigint } | undefined {
  if (!(x instanceof Uint8Array) || x.length !== 8) return undefined;
  const b = Buffer.from(x.buffer, x.byteOffset, 8);
  const hi = b.readInt32BE(0);
  if (hi >= 2097153) return { value: b.readBigInt64BE(0) };
  if (hi <= -2097153) return { value: b.readBigInt64BE(0), ulong: b.readBigUInt64BE(0) };
  if (hi < 0) return { value: b.readBigUInt64BE(0) }; // a long here would have been a number: a ulong
  return undefined;
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * Integer: a number with no fraction, a bigint, or a string of decimal digits with an
 * optional sign (whitespace ignored); must be a safe integer and at least `opts.min`.
 * Booleans and floats are refused. An integer past ±2^53 (which rhea gives rounded, or as 8
 * bytes) is refused as too large, unless `opts.saturate`: then one past +2^53 reads as
 * Number.MAX_SAFE_INTEGER (a limit that cannot be reached: Java clients send Long.MAX_VALUE
 * for "no limit").
 */
export function toInt(name: string, v: unknown, opts?: { min?: number; saturate?: boolean }): number {
  const x = unwrap(v);
  let n: number | undefined;
  /** The exact value, when it is an integer past ±2^53. */
  let wide: bigint | undefined;
  if (typeof x === 'number' && Number.isInteger(x)) n = x;
  else if (typeof x === 'bigint') n = Number(x);
  else if (typeof x === 'string' && /^[+-]?\d+$/.test(x.trim())) n = Number(x.trim());
  let ulong: bigint | undefined;
  if (n === undefined) { const w = wideInteger(x); wide = w?.value; ulong = w?.ulong; }
  if (n !== undefined && !Number.isSafeInteger(n)) {
    wide = typeof x === 'bigint' ? x : typeof x === 'string' ? BigInt(x.trim()) : BigInt(n);
  } else if (typeof x === 'bigint' && n !== undefined && BigInt(n) !== x) wide = x;
  const min = opts?.min;
  const expected = min === undefined ? 'an integer' : `an integer >= ${min}`;
  if (wide !== undefined) {
    if (opts?.saturate && wide > MAX_SAFE) return Number.MAX_SAFE_INTEGER;
    const shown = !(x instanceof Uint8Array) ? show(v)
      : ulong === undefined ? `a 64-bit integer (${wide})` : `a 64-bit integer (${wide} as a long, ${ulong} as a ulong)`;
    throw new TypeError(`${name}: expected ${expected}, got ${shown}: past ±2^53 (±${Number.MAX_SAFE_INTEGER}), too large to hold exactly`);
  }
  if (n === undefined) throw new TypeError(`${name}: expected ${expected}, got ${show(v)}`);
  if (min !== undefined && n < min) throw new TypeError(`${name}: expected ${expected}, got ${show(v)}`);
  return n === 0 ? 0 : n; // no -0
}

/**
 * String: a string (symbols arrive as strings), binary decoded as UTF-8, or a number,
 * bigint or boolean in its decimal/text form. null, undefined, lists and maps are refused.
 */
export function toStr(name: string, v: unknown): string {
  const x = unwrap(v);
  if (typeof x === 'string') return x;
  if (x instanceof Uint8Array) return new TextDecoder().decode(x);
  if (typeof x === 'number' && Number.isFinite(x)) return String(x);
  if (typeof x === 'bigint' || typeof x === 'boolean') return String(x);
  throw new TypeError(`${name}: expected a string, got ${show(v)}`);
}

/**
 * Duration in milliseconds: a duration string ("500ms", "10m", "7d", see parseDuration), or
 * a bare non-negative integer (number, bigint or digit string), which counts SECONDS, as
 * qpidd's time arguments do ("0" and 0 are both zero).
 */
export function toDurationMs(name: string, v: unknown): number {
  const x = unwrap(v);
  if (typeof x === 'string' && !/^\s*[+-]?\d+\s*$/.test(x)) {
    try {
      return parseDuration(x);
    } catch (e) {
      throw new TypeError(`${name}: ${(e as Error).message}`);
    }
  }
  let secs: number;
  try {
    secs = toInt(name, x, { min: 0 });
  } catch {
    throw new TypeError(
      `${name}: expected a duration (an integer followed by ms, s, m, h, d or w, e.g. 500ms, 10m, 7d; ` +
        `or a non-negative integer number of seconds), got ${show(v)}`,
    );
  }
  const ms = secs * 1000;
  if (!Number.isSafeInteger(ms)) throw new TypeError(`${name}: duration ${show(v)} is too large`);
  return ms;
}
