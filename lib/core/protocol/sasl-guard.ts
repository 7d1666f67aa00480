/**
 * The server side of a connection's SASL exchange, on rhea 3.0.5 (docs/rhea-patches.md,
 * patch 14). rhea's `SaslServer.on_sasl_init` makes a new mechanism and starts it for every
 * sasl-init frame, though a negotiation has one [AMQP 5.3.2]: one connection writing 40
 * PLAIN inits started ~35 scrypt checks and filled the login gate every client shares
 * (auth.ts), so others were refused "too many logins at once". Per connection:
 *
 * - a second sasl-init is a protocol error (the connection ends, framing-error) and starts
 *   nothing;
 * - the PLAIN check is given `gone()`, so a check still waiting at the gate for a connection
 *   that has ended is skipped (auth.ts);
 * - a mechanism name is looked up among the mechanisms offered only: rhea looked it up on the
 *   mechanisms object with its prototype, so `enable_plain` or `toString` was "started" and
 *   threw (a decode error) instead of failing as an unknown mechanism.
 *
 * Like the other patches it checks rhea's version and the source it relies on, once, and
 * throws naming what changed.
 */
import { createRequire } from 'node:module';
import { PATCHED_RHEA_VERSION } from './rhea-patches.js';

const require = createRequire(import.meta.url);
const { ProtocolError } = require('rhea/lib/errors.js');

/** The PLAIN check: user name and password as rhea extracted them (null for an empty field). */
export type PlainCheck = (user: unknown, password: unknown, gone: () => boolean) => boolean | Promise<boolean>;

const GUARDED = Symbol('tidemark.sasl-guarded');
let checked = false;

function hasSource(fn: unknown, ...snippets: string[]): boolean {
  if (typeof fn !== 'function') return false;
  const src = Function.prototype.toString.call(fn).replace(/\s+/g, '');
  return snippets.every((s) => src.includes(s.replace(/\s+/g, '')));
}

/** Checks (once) that rhea's SASL server is the code this module was written for; throws if not. */
export function checkSaslServer(): void {
  if (checked) return;
  const version = String((require('rhea/package.json') as { version?: unknown }).version);
  const sasl = require('rhea/lib/sasl.js');
  const mechs = sasl.server_mechanisms();
  mechs.enable_plain(() => false);
  const plainProto = Object.getPrototypeOf(mechs.PLAIN());
  const checks: Array<[string, boolean]> = [
    ['version', version === PATCHED_RHEA_VERSION],
    ['SaslServer.on_sasl_init', hasSource(sasl.Server?.prototype?.on_sasl_init, 'var saslctor = this.mechanisms[frame.performative.mechanism];', 'this.mechanism = saslctor();', 'this.mechanism.start(frame.performative.initial_response, frame.performative.hostname)')],
    ['PlainServer.start', hasSource(plainProto?.start, 'this.callback(fields[1], fields[2], hostname)')],
  ];
  for (const [what, ok] of checks) {
    if (!ok) {
      throw new Error(
        `sasl-guard: rhea internals changed (${what}); verified against rhea ${PATCHED_RHEA_VERSION}, found ${version}. ` +
          'Re-check docs/rhea-patches.md (patch 14) against this version, then update or drop lib/core/protocol/sasl-guard.ts.',
      );
    }
  }
  checked = true;
}

/**
 * Guards one connection's SASL server (`srv`: rhea's SaslServer, under its Selective
 * transport when ANONYMOUS is offered). `gone()` says the connection has ended or failed.
 */
export function guardSaslServer(srv: any, gone: () => boolean, plain: PlainCheck): void {
  if (!srv || srv[GUARDED]) return;
  checkSaslServer();
  srv[GUARDED] = true;
  // This connection's own table: offered mechanisms only, PLAIN with this connection's check.
  const shared = srv.mechanisms;
  const mechanisms: Record<string, () => any> = Object.create(null);
  for (const name of Object.getOwnPropertyNames(shared)) {
    const make = shared[name];
    if (typeof make !== 'function') continue;
    mechanisms[name] = name !== 'PLAIN' ? make : () => {
      const m = make();
      m.callback = (user: unknown, password: unknown) => plain(user, password, gone);
      return m;
    };
  }
  srv.mechanisms = mechanisms;
  const onInit = srv.on_sasl_init;
  let inits = 0;
  srv.on_sasl_init = function (frame: any) {
    if (++inits > 1) throw new ProtocolError('a second sasl-init: a SASL negotiation has one [AMQP 5.3.2]');
    return onInit.call(this, frame);
  };
}
