/**
 * scrypt values in `auth.users` are checked at config load (docs/security.md): N a power of
 * two > 1 (and below 2^(16·r)), r ≥ 1, p ≥ 1, salt and hash base64 of sensible lengths, and
 * 128·N·r·p ≤ 256 MiB; hash-password's own parameters are well inside. A check that still
 * fails at run time (a config given to startBroker directly) is logged at warn, no secret.
 */
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { loadConfig, ConfigError } from '../../../lib/core/config.js';
import * as auth from '../../../lib/core/auth.js';
import { setLogDestination, setLogLevel, getLogLevel } from '../../../lib/core/log.js';
import { ROOT } from '../../support/broker.js';

const SALT = Buffer.alloc(16, 7).toString('base64');
const HASH = Buffer.alloc(32, 9).toString('base64');
const withUser = (scrypt: string) => ({ auth: { anonymous: false, users: { u: { scrypt } } } });

/** The ConfigError of loading a config whose user `u` has this scrypt value (or undefined). */
function loadError(scrypt: string): Error | undefined {
  try { loadConfig(undefined, withUser(scrypt)); return undefined; } catch (e) { return e as Error; }
}

describe('auth: scrypt parameters are checked at config load (audit 3)', function () {
  const refused: Array<[string, string, RegExp]> = [
    ['N=1 (the audit\'s value)', 'scrypt$1$1$1$x$y', /N: expected a power of two greater than 1/],
    ['N=1', `scrypt$1$8$1$${SALT}$${HASH}`, /N: expected a power of two greater than 1/],
    ['N=0', `scrypt$0$8$1$${SALT}$${HASH}`, /N: expected a power of two/],
    ['N not a power of two', `scrypt$16383$8$1$${SALT}$${HASH}`, /N: expected a power of two/],
    ['N above 2^(16r) (scrypt refuses it)', `scrypt$65536$1$1$${SALT}$${HASH}`, /N: must be below 2\^\(16·r\)/],
    ['r=0', `scrypt$16384$0$1$${SALT}$${HASH}`, /r: expected at least 1/],
    ['p=0', `scrypt$16384$8$0$${SALT}$${HASH}`, /p: expected at least 1/],
    ['N=2^20, r=8: 1 GiB per login (the audit\'s value)', 'scrypt$1048576$8$1$AAAA$AAAA', /1024 MiB is above the 256 MiB limit/],
    ['N=2^20, r=8 with a good salt and hash', `scrypt$1048576$8$1$${SALT}$${HASH}`, /above the 256 MiB limit/],
    ['p multiplies the cost', `scrypt$262144$8$2$${SALT}$${HASH}`, /above the 256 MiB limit/],
    ['huge r', `scrypt$16384$9007199254740991$1$${SALT}$${HASH}`, /above the 256 MiB limit/],
    ['salt that decodes to nothing', `scrypt$16384$8$1$x$${HASH}`, /salt: not base64/],
    ['salt not canonical base64', `scrypt$16384$8$1$AAAAAAAAAAB=$${HASH}`, /salt: not base64/],
    ['salt too short', `scrypt$16384$8$1$AAAA$${HASH}`, /salt: 3 bytes/],
    ['hash too short', `scrypt$16384$8$1$${SALT}$AAAA`, /hash: 3 bytes/],
    ['hash not base64', `scrypt$16384$8$1$${SALT}$****`, /hash: not base64/],
    ['not the form', 'not-a-hash', /expected scrypt\$N\$r\$p\$salt\$hash/],
    ['signed number', `scrypt$+16384$8$1$${SALT}$${HASH}`, /N: expected a positive integer/],
  ];
  for (const [name, value, reason] of refused) {
    it(`refuses ${name}, naming config.auth.users.u.scrypt`, function () {
      const err = loadError(value);
      expect(err, value).to.be.instanceOf(ConfigError);
      expect(err!.message).to.match(/^config\.auth\.users\.u\.scrypt: /);
      expect(err!.message).to.match(reason);
      if (value.includes(SALT)) expect(err!.message).to.not.contain(SALT);
      expect(err!.message).to.not.contain(HASH);
    });
  }

  it('accepts hash-password values and the bound itself (128·N·r·p = 256 MiB)', function () {
    expect(loadError(auth.hashPassword('pw', 1024))).to.equal(undefined);
    expect(loadError(`scrypt$16384$8$1$${SALT}$${HASH}`)).to.equal(undefined);
    expect(loadError(`scrypt$262144$8$1$${SALT}$${HASH}`)).to.equal(undefined); // exactly 256 MiB
    expect(loadError(`scrypt$16384$8$1$${SALT.replace(/=+$/, '')}$${HASH.replace(/=+$/, '')}`)).to.equal(undefined); // unpadded
  });

  it('tidemark-config hash-password makes values well inside the bound (1/16 of it)', function () {
    const r = spawnSync(process.execPath, [path.join(ROOT, 'bin/tidemark-config.js'), 'hash-password', 'pw'], { encoding: 'utf8' });
    expect(r.status, r.stderr).to.equal(0);
    const value = r.stdout.trim();
    expect(loadError(value)).to.equal(undefined);
    const [, N, rr, p] = value.split('$').map(Number);
    expect(128 * N * rr * p * 16).to.be.at.most(256 * 1024 * 1024);
  });

  it('a value that fails at run time (a config past the loader) refuses the login and is logged at warn, without secrets', async function () {
    const lines: string[] = [];
    const level = getLogLevel();
    setLogDestination({ write: (s: string) => { lines.push(s); } });
    setLogLevel('warn');
    let ok: boolean;
    try {
      ok = await auth.verifyPasswordAsync({ scrypt: `scrypt$1$1$1$${SALT}$${HASH}` }, 'the-password');
    } finally { setLogLevel(level); setLogDestination(undefined); }
    expect(ok).to.equal(false);
    const warns = lines.map((l) => JSON.parse(l)).filter((o) => o.level === 'warn' && o.ns === 'tidemark:auth');
    expect(warns.map((o) => o.msg)).to.deep.equal(['password check failed: unusable scrypt value in auth.users']);
    expect(warns[0].reason).to.match(/^N: /);
    const all = lines.join('\n');
    for (const secret of ['the-password', SALT, HASH]) expect(all).to.not.contain(secret);
  });
});
