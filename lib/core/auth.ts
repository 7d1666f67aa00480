/**
 * Users from the config. Passwords are scrypt hashes (`scrypt$N$r$p$salt$hash`, base64 parts)
 * made with `tidemark-config hash-password`, or plain text for development configs.
 * Node's built-in scrypt is the kept implementation; comparison is constant-time.
 */
import { scryptSync, scrypt, timingSafeEqual, randomBytes } from 'node:crypto';
import type { UserConfig } from './config.js';

export function hashPassword(password: string, N = 16384, r = 8, p = 1): string {
  const salt = randomBytes(16);
  const hash = scryptSync(password, salt, 32, { N, r, p });
  return `scrypt$${N}$${r}$${p}$${salt.toString('base64')}$${hash.toString('base64')}`;
}

export function verifyPassword(user: UserConfig | undefined, password: string): boolean {
  if (!user) return false;
  if (user.scrypt) {
    const parts = user.scrypt.split('$');
    if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
    const [, N, r, p, salt, hash] = parts;
    const expected = Buffer.from(hash, 'base64');
    let got: Buffer;
    try { got = scryptSync(password, Buffer.from(salt, 'base64'), expected.length, { N: Number(N), r: Number(r), p: Number(p), maxmem: maxmem(Number(N), Number(r)) }); }
    catch { return false; } // bad parameters in the hash
    return got.length === expected.length && timingSafeEqual(got, expected);
  }
  if (user.password !== undefined) {
    const a = Buffer.from(user.password), b = Buffer.from(password);
    return a.length === b.length && timingSafeEqual(a, b);
  }
  return false;
}

/** scrypt's memory need is 128*N*r bytes; allow it (Node's default cap is 32 MiB). */
function maxmem(N: number, r: number): number { return 256 * N * r + 1024 * 1024; }

/** A hash no password matches, checked for unknown users so timing does not tell them apart. */
let dummy: UserConfig | undefined; // made on first use: module load stays cheap

/**
 * The broker's PLAIN check: like verifyPassword but scrypt runs on the libuv thread pool,
 * so a login (about 50 ms at N=16384) never blocks the event loop. Unknown users and users
 * without a password cost the same as a wrong password.
 */
export async function verifyPasswordAsync(user: UserConfig | undefined, password: string): Promise<boolean> {
  const known = user !== undefined && (user.scrypt !== undefined || user.password !== undefined);
  const u = known ? user! : (dummy ??= { scrypt: hashPassword(randomBytes(16).toString('hex')) });
  if (!u.scrypt) return verifyPassword(u, password);
  const parts = u.scrypt.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [, N, r, p, salt, hash] = parts;
  const expected = Buffer.from(hash, 'base64');
  const n = Number(N), rr = Number(r), pp = Number(p);
  const got = await new Promise<Buffer | undefined>((resolve) => {
    try {
      scrypt(password, Buffer.from(salt, 'base64'), expected.length, { N: n, r: rr, p: pp, maxmem: maxmem(n, rr) }, (err, key) => resolve(err ? undefined : key));
    } catch { resolve(undefined); } // bad parameters in the hash
  });
  return known && got !== undefined && got.length === expected.length && timingSafeEqual(got, expected);
}
