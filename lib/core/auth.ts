/**
 * Users from the config. Passwords are scrypt hashes (`scrypt$N$r$p$salt$hash`, base64 parts)
 * made with `tidemark-config hash-password`, or plain text for development configs.
 * Node's built-in scrypt is the kept implementation; comparison is constant-time.
 */
import { scryptSync, timingSafeEqual, randomBytes } from 'node:crypto';
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
    const got = scryptSync(password, Buffer.from(salt, 'base64'), expected.length, { N: Number(N), r: Number(r), p: Number(p) });
    return got.length === expected.length && timingSafeEqual(got, expected);
  }
  if (user.password !== undefined) {
    const a = Buffer.from(user.password), b = Buffer.from(password);
    return a.length === b.length && timingSafeEqual(a, b);
  }
  return false;
}
