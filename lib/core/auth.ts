/**
 * Users from the config. Passwords are scrypt hashes (`scrypt$N$r$p$salt$hash`, base64 parts)
 * made with `tidemark-config hash-password`, or plain text for development configs.
 * Node's built-in scrypt is the kept implementation; comparison is constant-time.
 *
 * Hash parameters are checked once, at config load (parseScrypt, called from config.ts), so
 * a value that could never verify, or one that would make every login allocate too much
 * memory, stops the broker instead of silently locking its user out (docs/security.md).
 * Every PLAIN check by the broker (verifyPasswordAsync) runs one scrypt derivation, whatever
 * the user: unknown users, users without a password and plain-text users run a dummy one
 * with hash-password's parameters, so timing does not tell them apart.
 */
import { scryptSync, scrypt, timingSafeEqual, randomBytes, createHash } from 'node:crypto';
import type { UserConfig } from './config.js';
import { logger } from './log.js';

const log = logger('auth');

/** hash-password's parameters (16 MiB, about 35-50 ms); the dummy derivation uses them too. */
export const SCRYPT_DEFAULTS = { N: 16384, r: 8, p: 1 } as const;
/**
 * Upper bound on 128·N·r·p: scrypt's memory (128·N·r bytes) times p, which repeats the whole
 * derivation. 256 MiB: one login takes at most 16 times hash-password's cost (16 MiB).
 */
export const SCRYPT_MAX_COST = 256 * 1024 * 1024;
/** Accepted lengths of the decoded salt and hash, bytes (hash-password: 16 and 32). */
const SALT_MIN = 8;
const HASH_MIN = 16, HASH_MAX = 64;

export interface ScryptParams { N: number; r: number; p: number; salt: Buffer; hash: Buffer }

/** Decodes canonical base64 (padding optional); undefined when `s` is not that. */
function base64(s: string): Buffer | undefined {
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(s)) return undefined;
  const b = Buffer.from(s, 'base64');
  return b.toString('base64').replace(/=+$/, '') === s.replace(/=+$/, '') ? b : undefined;
}

/**
 * Parses and checks `scrypt$N$r$p$salt$hash`. Throws an Error saying what is wrong (never
 * quoting the salt or hash): N a power of two > 1 and below 2^(16·r) (RFC 7914), r ≥ 1,
 * p ≥ 1, 128·N·r·p ≤ SCRYPT_MAX_COST, salt (≥ 8 bytes) and hash (16-64 bytes) base64.
 */
export function parseScrypt(h: string): ScryptParams {
  const parts = h.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') throw new Error('expected scrypt$N$r$p$salt$hash (tidemark-config hash-password)');
  const [, Ns, rs, ps, salts, hashs] = parts;
  const int = (s: string, name: string): number => {
    if (!/^[0-9]{1,16}$/.test(s) || !Number.isSafeInteger(Number(s))) throw new Error(`${name}: expected a positive integer, got ${JSON.stringify(s.slice(0, 20))}`);
    return Number(s);
  };
  const N = int(Ns, 'N'), r = int(rs, 'r'), p = int(ps, 'p');
  if (N < 2 || 2 ** Math.round(Math.log2(N)) !== N) throw new Error(`N: expected a power of two greater than 1, got ${N}`);
  if (r < 1) throw new Error(`r: expected at least 1, got ${r}`);
  if (p < 1) throw new Error(`p: expected at least 1, got ${p}`);
  if (N >= 2 ** (16 * r)) throw new Error(`N: must be below 2^(16·r) = ${2 ** (16 * r)} for r = ${r} (RFC 7914)`);
  const cost = 128 * N * r * p;
  if (cost > SCRYPT_MAX_COST) throw new Error(`N=${N}, r=${r}, p=${p}: 128·N·r·p = ${mib(cost)} MiB is above the ${mib(SCRYPT_MAX_COST)} MiB limit (each login allocates 128·N·r bytes and repeats the work p times); tidemark-config hash-password uses N=${SCRYPT_DEFAULTS.N}, r=${SCRYPT_DEFAULTS.r}, p=${SCRYPT_DEFAULTS.p}`);
  const salt = base64(salts);
  if (!salt) throw new Error('salt: not base64');
  if (salt.length < SALT_MIN) throw new Error(`salt: ${salt.length} bytes, expected at least ${SALT_MIN}`);
  const hash = base64(hashs);
  if (!hash) throw new Error('hash: not base64');
  if (hash.length < HASH_MIN || hash.length > HASH_MAX) throw new Error(`hash: ${hash.length} bytes, expected ${HASH_MIN} to ${HASH_MAX}`);
  return { N, r, p, salt, hash };
}

function mib(n: number): string { return String(Math.round((n / 1048576) * 100) / 100); }

export function hashPassword(password: string, N: number = SCRYPT_DEFAULTS.N, r: number = SCRYPT_DEFAULTS.r, p: number = SCRYPT_DEFAULTS.p): string {
  const salt = randomBytes(16);
  const hash = scryptSync(password, salt, 32, { N, r, p, maxmem: maxmem(N, r, p) });
  return `scrypt$${N}$${r}$${p}$${salt.toString('base64')}$${hash.toString('base64')}`;
}

/** Bytes scrypt needs (OpenSSL: 128·r·(N+2) for V plus 128·r·p for B), with slack; Node's default cap is 32 MiB. */
function maxmem(N: number, r: number, p: number): number { return 128 * r * (N + 2 + p) + 1024 * 1024; }

/** Equal-length digests compared in constant time: neither content nor length shows in timing. */
function sameSecret(a: string, b: string): boolean {
  return timingSafeEqual(createHash('sha256').update(a, 'utf8').digest(), createHash('sha256').update(b, 'utf8').digest());
}

/** The parameters of a stored hash, or undefined (logged at warn, without the hash) when unusable. */
function paramsOf(h: string): ScryptParams | undefined {
  try { return parseScrypt(h); }
  catch (e) { log.warn('password check failed: unusable scrypt value in auth.users', { reason: (e as Error).message }); return undefined; }
}

function warnDerivation(prm: ScryptParams, err: unknown): void {
  log.warn('password check failed: scrypt threw', { N: prm.N, r: prm.r, p: prm.p, reason: (err as Error)?.message ?? String(err) });
}

/** Synchronous check (tools and tests; the broker uses verifyPasswordAsync). */
export function verifyPassword(user: UserConfig | undefined, password: string): boolean {
  if (!user || typeof password !== 'string') return false;
  if (user.scrypt !== undefined) {
    const prm = paramsOf(user.scrypt);
    if (!prm) return false;
    let got: Buffer;
    try { got = scryptSync(password, prm.salt, prm.hash.length, { N: prm.N, r: prm.r, p: prm.p, maxmem: maxmem(prm.N, prm.r, prm.p) }); }
    catch (e) { warnDerivation(prm, e); return false; }
    return timingSafeEqual(got, prm.hash);
  }
  if (user.password !== undefined) return sameSecret(user.password, password);
  return false;
}

/** Parameters no password matches (random hash), made on first use: module load stays cheap. */
let dummy: ScryptParams | undefined;
function dummyParams(): ScryptParams {
  return (dummy ??= { ...SCRYPT_DEFAULTS, salt: randomBytes(16), hash: randomBytes(32) });
}

/**
 * Test-only: called before each derivation of verifyPasswordAsync, `dummy` true for the
 * stand-in run for unknown users, users without a password and plain-text users.
 */
let derivationObserver: ((d: { dummy: boolean; N: number; r: number; p: number }) => void) | undefined;
export function setDerivationObserver(fn: typeof derivationObserver): void { derivationObserver = fn; }

/**
 * Derivations at once, and waiting. Each takes a libuv pool thread for ~50 ms and 16 MiB, and
 * LevelDB's writes share that pool (4 threads): 300 unauthenticated connections sending one
 * PLAIN each held other clients' durable publishes for 13 s (session 22). One runs at a time;
 * a few wait; beyond that a check fails at once, whoever the user (so it tells nothing about
 * users), and the client may try again.
 */
export const SCRYPT_GATE = { concurrent: 1, waiting: 32 };
let running = 0;
/** Checks waiting for a slot; each is woken holding the slot of the one that ended (release). */
const waiters: Array<() => void> = [];
let lastBusyWarning = 0;

/** Hands the slot to the next waiter, or frees it. */
function release(): void {
  const next = waiters.shift();
  if (next) next(); else running--;
}

/**
 * One derivation through the gate. `gone()`: nobody waits for the answer any more (the
 * client's connection ended); a check still waiting then is skipped when its turn comes:
 * otherwise 30 clients that sent one PLAIN each and hung up held the gate for 30 derivations.
 */
async function derive(password: string, prm: ScryptParams, isDummy: boolean, gone?: () => boolean): Promise<Buffer | undefined> {
  if (running < SCRYPT_GATE.concurrent) {
    running++;
  } else {
    if (waiters.length >= SCRYPT_GATE.waiting) {
      const now = Date.now();
      if (now - lastBusyWarning > 1000) { lastBusyWarning = now; log.warn('password check refused: too many logins at once', { running, waiting: waiters.length }); }
      return undefined;
    }
    await new Promise<void>((go) => waiters.push(go));
    if (gone?.()) { release(); return undefined; }
  }
  return deriveNow(password, prm, isDummy);
}

/** Runs a derivation in a slot the caller holds, and releases it. */
function deriveNow(password: string, prm: ScryptParams, isDummy: boolean): Promise<Buffer | undefined> {
  derivationObserver?.({ dummy: isDummy, N: prm.N, r: prm.r, p: prm.p });
  return new Promise<Buffer | undefined>((resolve) => {
    try {
      scrypt(password, prm.salt, prm.hash.length, { N: prm.N, r: prm.r, p: prm.p, maxmem: maxmem(prm.N, prm.r, prm.p) }, (err, key) => {
        if (err) { warnDerivation(prm, err); resolve(undefined); } else resolve(key);
      });
    } catch (e) { warnDerivation(prm, e); resolve(undefined); }
  }).finally(release);
}

/**
 * The broker's PLAIN check: scrypt runs on the libuv thread pool, so a login (about 50 ms at
 * N=16384) never blocks the event loop. Exactly one derivation per check: the user's own
 * hash, or the dummy for unknown users, users without a password and plain-text users, whose
 * password is then compared as SHA-256 digests in constant time. So all of these cost the same
 * as a wrong password for a user hashed with hash-password's parameters. A password that is
 * not a string matches nothing (after the same derivation); the caller turns rhea's null for
 * an empty field into '' first (Broker.authenticate). `gone`: see derive.
 */
export async function verifyPasswordAsync(user: UserConfig | undefined, password: string, opts: { gone?: () => boolean } = {}): Promise<boolean> {
  const valid = typeof password === 'string';
  const pw = valid ? password : '';
  if (user?.scrypt !== undefined) {
    const prm = paramsOf(user.scrypt); // refused at config load; only reachable with a hand-built config
    if (!prm) { await derive(pw, dummyParams(), true, opts.gone); return false; }
    const got = await derive(pw, prm, false, opts.gone);
    return valid && got !== undefined && got.length === prm.hash.length && timingSafeEqual(got, prm.hash);
  }
  await derive(pw, dummyParams(), true, opts.gone);
  if (valid && user?.password !== undefined) return sameSecret(user.password, pw);
  return false;
}
