/**
 * A plain-text (development) user's PLAIN check costs what an unknown user's and a wrong
 * scrypt password's cost (docs/security.md, audit 4): every check runs exactly one scrypt
 * derivation — for plain-text users, unknown users and users without a password the same
 * dummy one with hash-password's parameters — and plain-text passwords are compared as
 * equal-length digests in constant time.
 */
import { expect } from 'chai';
import * as auth from '../../../lib/core/auth.js';

type Derivation = { dummy: boolean; N: number; r: number; p: number };

/** Runs one check and returns its result with the derivations it made (observer hook). */
async function observed(user: Parameters<typeof auth.verifyPasswordAsync>[0], password: string): Promise<{ ok: boolean; runs: Derivation[] }> {
  const runs: Derivation[] = [];
  const set = (auth as Record<string, any>).setDerivationObserver as ((fn?: (d: Derivation) => void) => void) | undefined;
  expect(set, 'auth.setDerivationObserver (test hook)').to.be.a('function');
  set!((d) => runs.push(d));
  try { return { ok: await auth.verifyPasswordAsync(user, password), runs }; } finally { set!(undefined); }
}

describe('auth: plain-text users cost the same as unknown users (audit 4)', function () {
  this.timeout(60_000);
  const dummy = { dummy: true, N: 16384, r: 8, p: 1 };

  it('a plain-text user\'s check runs the same dummy scrypt derivation as an unknown user\'s, right or wrong', async function () {
    const plain = { password: 'devpass' };
    expect(await observed(plain, 'wrong')).to.deep.equal({ ok: false, runs: [dummy] });
    expect(await observed(plain, 'devpass')).to.deep.equal({ ok: true, runs: [dummy] });
    expect(await observed(plain, '')).to.deep.equal({ ok: false, runs: [dummy] });
    expect(await observed(undefined, 'devpass')).to.deep.equal({ ok: false, runs: [dummy] });
    expect(await observed({}, 'devpass')).to.deep.equal({ ok: false, runs: [dummy] });
  });

  it('an scrypt user runs exactly one derivation, its own', async function () {
    const u = { scrypt: auth.hashPassword('wonderland', 1024) };
    expect(await observed(u, 'wonderland')).to.deep.equal({ ok: true, runs: [{ dummy: false, N: 1024, r: 8, p: 1 }] });
    expect(await observed(u, 'Wonderland')).to.deep.equal({ ok: false, runs: [{ dummy: false, N: 1024, r: 8, p: 1 }] });
  });

  it('plain-text comparison: exact match only, whatever the lengths and characters', async function () {
    const u = { password: 'pässwörd' };
    expect(await auth.verifyPasswordAsync(u, 'pässwörd')).to.equal(true);
    for (const w of ['pässwörd ', 'pässwör', 'passwörd', 'pässwörd\0', 'PÄSSWÖRD']) expect(await auth.verifyPasswordAsync(u, w), w).to.equal(false);
    expect(auth.verifyPassword(u, 'pässwörd')).to.equal(true);
    expect(auth.verifyPassword(u, 'pässwör')).to.equal(false);
  });

  it('timing: a wrong plain-text password takes about as long as an unknown user (generous bound)', async function () {
    const time = async (user: Parameters<typeof auth.verifyPasswordAsync>[0]) => {
      const t = performance.now();
      await auth.verifyPasswordAsync(user, 'wrongwrong');
      return performance.now() - t;
    };
    await time(undefined); // warm-up
    const plain: number[] = [], unknown: number[] = [];
    for (let i = 0; i < 6; i++) { plain.push(await time({ password: 'devpass' })); unknown.push(await time(undefined)); }
    const median = (a: number[]) => [...a].sort((x, y) => x - y)[a.length >> 1];
    // Before the fix: 0.01-4 ms against ~35 ms. Equal work now; allow a wide margin for noise.
    expect(median(plain)).to.be.above(median(unknown) * 0.4);
    expect(Math.min(...plain)).to.be.above(Math.min(...unknown) * 0.3);
  });
});
