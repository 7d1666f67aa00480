/**
 * Broker configuration: data plus a parser. Defaults live in conf/broker.json; a user file is
 * merged over them, every key checked (unknown keys and wrong types are rejected with the
 * key's path), then the result is frozen.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { parseScrypt } from './auth.js';

export interface UserConfig {
  /** Plain-text password (development configs). A user has exactly one of `password` and `scrypt`. */
  password?: string;
  /** An scrypt hash `scrypt$N$r$p$salt-b64$hash-b64` (tidemark-config hash-password). */
  scrypt?: string;
}
/** One ACL rule (lib/ext/acl, docs/security.md): the first rule matching user and queue decides. */
export interface AclRule {
  /** A user name, `*` (everyone, anonymous included) or `@group` (acl.groups). */
  user: string;
  /** Queue-name glob: `*` any run of characters, `?` one character. */
  queue: string;
  allow: Array<'create' | 'publish' | 'consume' | 'browse' | 'manage'>;
}
export interface AclConfig {
  rules: AclRule[];
  /** When no rule matches. Default allow. */
  default: 'allow' | 'deny';
  /** Optional groups for `@group` rules: name -> user names. */
  groups?: Record<string, string[]>;
}
const ACL_ACTIONS = ['create', 'publish', 'consume', 'browse', 'manage'];

export interface BrokerConfig {
  /** AMQP listener. Default 127.0.0.1:5672. Port 0 picks a free port. */
  listen: { host: string; port: number };
  /** amqps listener; null = off. */
  tls: null | { host?: string; port: number; key: string; cert: string; ca?: string };
  /** LevelDB directory. Default ./data. */
  dataDir: string;
  /** Create unknown addresses as standard durable queues on attach. Default true. */
  autoCreateQueues: boolean;
  /** ANONYMOUS: true, false, or "loopback" (only for connections from 127.0.0.0/8 and ::1). */
  auth: { anonymous: boolean | 'loopback'; users: Record<string, UserConfig> };
  /** Per-user queue ACLs, enforced by the `acl` extension. Default: no rules, allow. */
  acl: AclConfig;
  limits: {
    /** Advertised max-frame-size in bytes. Default 1 MiB. */
    maxFrameSize: number;
    /** Largest message accepted, bytes. Default 16 MiB. */
    maxMessageSize: number;
    maxConnections: number;
    maxSessionsPerConnection: number;
    maxLinksPerSession: number;
    maxUnsettledPerLink: number;
    /** Idle time-out advertised and enforced, ms. 0 = none. Default 60000. */
    idleTimeoutMs: number;
    /** A connection must authenticate and open within this, ms, or within 2 × idleTimeoutMs if sooner (0: only that). Default 10000. */
    openTimeoutMs: number;
    /** Credit granted to each sending client, topped up once half is used. Default 5000. */
    senderCredit: number;
    /**
     * Bytes a connection's socket may hold unwritten (a client that does not read) before the
     * broker stops sending to it, until the socket drains; 0 = no limit. Default 4 MiB.
     */
    maxPendingBytesPerConnection: number;
  };
  /** Group commit: most events in one LevelDB batch. */
  commit: { maxBatch: number };
  /** Compaction of written ranges once idle (lib/core/storage/idle-compaction.ts); idleMs 0 = off. */
  compaction: { idleMs: number; afterMB: number; maxMB: number };
  /** One full collection once idle after a burst of client traffic (lib/core/idle-memory.ts); idleMs 0 = off. */
  memory: { idleMs: number; afterMB: number };
  /** Extensions to load, by name (see lib/ext). */
  extensions: string[];
  /** Queues declared at start: name -> { durable, arguments }. */
  queues: Record<string, { durable?: boolean; arguments?: Record<string, unknown> }>;
  logLevel: 'silent' | 'error' | 'warn' | 'info' | 'debug';
  /**
   * The HTTP listener. `allowedHosts`: host names (beyond IP literals and localhost) its
   * requests may name in Host, against DNS rebinding (lib/ext/http/host-check.ts).
   */
  http: { enabled: boolean; host: string; port: number; allowedHosts: string[] };
}

export class ConfigError extends Error {}

const here = path.dirname(fileURLToPath(import.meta.url));
/** conf/ at the package root, from lib/core or dist/lib/core. */
export function defaultConfigPath(): string {
  for (const up of ['../../conf/broker.json', '../../../conf/broker.json']) {
    const p = path.resolve(here, up);
    try { readFileSync(p); return p; } catch { /* try next */ }
  }
  throw new ConfigError('conf/broker.json not found next to the package');
}

type Shape = 'string' | 'number' | 'boolean' | 'object' | 'array' | 'any' | { [k: string]: Shape } | ((v: unknown, at: string) => void);

/** A TCP port: an integer 0-65535 (0 = any free port), refused here rather than by listen(). */
function portShape(v: unknown, at: string): void {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 65535) throw new ConfigError(`${at}: expected a port, an integer from 0 to 65535 (0 = any free port), got ${JSON.stringify(v)}`);
}

/**
 * An integer in [min, max] (and `zero`, when 0 is allowed with its own meaning): a value the
 * broker cannot run with (a frame size under AMQP's 512, no credit, no sessions) is refused
 * here, naming the key, rather than taking every connection down later.
 */
function intShape(min: number, max: number, why: string, zero?: string): (v: unknown, at: string) => void {
  return (v, at) => {
    if (typeof v === 'number' && Number.isInteger(v) && ((v >= min && v <= max) || (zero !== undefined && v === 0))) return;
    throw new ConfigError(`${at}: expected an integer from ${min} to ${max}${zero ? ` or 0 (${zero})` : ''}: ${why}; got ${JSON.stringify(v)}`);
  };
}

const U32 = 0xffffffff;

const shape: { [k: string]: Shape } = {
  listen: { host: 'string', port: portShape },
  tls: (v, at) => { if (v !== null) check(v, { host: 'string', port: portShape, key: 'string', cert: 'string', ca: 'string' }, at, true); },
  dataDir: 'string',
  autoCreateQueues: 'boolean',
  auth: {
    anonymous: (v, at) => { if (v !== true && v !== false && v !== 'loopback') throw new ConfigError(`${at}: expected true, false or "loopback"`); },
    users: (v, at) => {
      if (!isObj(v)) throw new ConfigError(`${at}: expected an object of users`);
      for (const [u, spec] of Object.entries(v)) {
        // An empty PLAIN user name matches no user (Broker.authenticate): such a user could never log in.
        if (u === '') throw new ConfigError(`${at}: a user name must not be empty (no PLAIN login can name it)`);
        check(spec, { password: 'string', scrypt: 'string' }, `${at}.${u}`, true);
        const { password, scrypt } = spec as UserConfig;
        // Exactly one of the two: with neither the user could never log in; with both, which
        // one counts would be a guess. A hash under `password` was compared as plain text: the
        // real password failed and the hash text itself logged in.
        if (password === undefined && scrypt === undefined) throw new ConfigError(`${at}.${u}: give the user a password or an scrypt hash (tidemark-config hash-password); it has neither`);
        if (password !== undefined && scrypt !== undefined) throw new ConfigError(`${at}.${u}: give the user either password or scrypt, not both`);
        if (password !== undefined && password.startsWith('scrypt$')) throw new ConfigError(`${at}.${u}.password: this is an scrypt hash; put it under scrypt ("${u}": { "scrypt": "scrypt$..." }), password is compared as plain text`);
        // A malformed hash, or parameters scrypt refuses, would silently lock the user out; too
        // costly ones would make every login allocate that much: refuse them at load (auth.ts).
        const h = (spec as UserConfig).scrypt;
        if (h !== undefined) {
          try { parseScrypt(h); } catch (e) { throw new ConfigError(`${at}.${u}.scrypt: ${(e as Error).message}`); }
        }
      }
    },
  },
  acl: (v, at) => {
    if (!isObj(v)) throw new ConfigError(`${at}: expected an object {rules, default, groups?}`);
    check(v, { rules: 'array', default: 'string', groups: 'object' }, at, true);
    // Partial here (a file or overrides may give only rules): conf/broker.json supplies both keys.
    if ('default' in v && v.default !== 'allow' && v.default !== 'deny') throw new ConfigError(`${at}.default: expected "allow" or "deny"`);
    ((v.rules ?? []) as unknown[]).forEach((r, i) => {
      check(r, { user: 'string', queue: 'string', allow: 'array' }, `${at}.rules[${i}]`);
      for (const a of (r as AclRule).allow) if (!ACL_ACTIONS.includes(a)) throw new ConfigError(`${at}.rules[${i}].allow: unknown action ${JSON.stringify(a)} (known: ${ACL_ACTIONS.join(', ')})`);
    });
    for (const [g, members] of Object.entries((v.groups ?? {}) as Record<string, unknown>)) {
      if (!Array.isArray(members) || members.some((m) => typeof m !== 'string')) throw new ConfigError(`${at}.groups.${g}: expected an array of user names`);
    }
  },
  limits: {
    maxFrameSize: intShape(512, U32, 'the max-frame-size advertised in open (AMQP 2.7.1: at least 512)'),
    maxMessageSize: intShape(1, Number.MAX_SAFE_INTEGER, 'the largest message accepted, in bytes'),
    maxConnections: intShape(1, Number.MAX_SAFE_INTEGER, 'connections at once'),
    maxSessionsPerConnection: intShape(1, 65536, 'sessions per connection (channel-max is one less; AMQP channels are 16-bit)'),
    maxLinksPerSession: intShape(1, 2 ** 32, 'links attached at once on a session (more are detached with amqp:resource-limit-exceeded)'),
    maxUnsettledPerLink: intShape(1, Number.MAX_SAFE_INTEGER, 'deliveries a receiver may hold unsettled'),
    // Timers: Node fires a setTimeout past 2^31 - 1 ms at once, and silence is timed at 2 × idleTimeoutMs.
    idleTimeoutMs: intShape(200, 2 ** 30 - 1, 'the idle time-out advertised in open, in ms (under 200 the broker refuses it from peers; twice it must fit a timer)', 'no idle time-out'),
    openTimeoutMs: intShape(1, 2 ** 31 - 1, 'ms a connection has to authenticate and open (a timer)', 'only 2 × idleTimeoutMs'),
    senderCredit: intShape(1, U32, 'credit granted to each producer'),
    maxPendingBytesPerConnection: intShape(1, Number.MAX_SAFE_INTEGER, 'bytes a socket may hold unwritten', 'no limit'),
  },
  commit: { maxBatch: intShape(1, Number.MAX_SAFE_INTEGER, 'publishes in one LevelDB batch') },
  compaction: { idleMs: intShape(1, 2 ** 31 - 1, 'ms of quiet before compacting what was written (a timer)', 'off'), afterMB: 'number', maxMB: 'number' },
  memory: { idleMs: intShape(1, 2 ** 31 - 1, 'ms of quiet before the one full collection (a timer)', 'off'), afterMB: 'number' },
  extensions: 'array',
  queues: (v, at) => {
    if (!isObj(v)) throw new ConfigError(`${at}: expected an object of queues`);
    for (const [q, spec] of Object.entries(v)) check(spec, { durable: 'boolean', arguments: 'object' }, `${at}.${q}`, true);
  },
  logLevel: (v, at) => { if (!['silent', 'error', 'warn', 'info', 'debug'].includes(v as string)) throw new ConfigError(`${at}: expected one of silent, error, warn, info, debug`); },
  http: {
    enabled: 'boolean', host: 'string', port: portShape,
    allowedHosts: (v, at) => { if (!Array.isArray(v) || v.some((h) => typeof h !== 'string' || h === '')) throw new ConfigError(`${at}: expected an array of host names`); },
  },
};

function isObj(v: unknown): v is Record<string, unknown> { return typeof v === 'object' && v !== null && !Array.isArray(v); }

function check(v: unknown, s: Shape, at: string, partial = false): void {
  if (typeof s === 'function') return s(v, at);
  if (typeof s === 'string') {
    if (s === 'any') return;
    const ok = s === 'array' ? Array.isArray(v) : s === 'object' ? isObj(v) : typeof v === s;
    if (!ok) throw new ConfigError(`${at}: expected ${s}, got ${JSON.stringify(v)}`);
    if (s === 'number' && (!Number.isFinite(v as number) || (v as number) < 0)) throw new ConfigError(`${at}: expected a non-negative number`);
    return;
  }
  if (!isObj(v)) throw new ConfigError(`${at}: expected an object`);
  for (const k of Object.keys(v)) if (!(k in s)) throw new ConfigError(`${at}.${k}: unknown key (known: ${Object.keys(s).join(', ')})`);
  if (!partial) for (const k of Object.keys(s)) if (!(k in v)) throw new ConfigError(`${at}.${k}: missing`);
  for (const [k, sub] of Object.entries(s)) if (k in v) check(v[k], sub, `${at}.${k}`, partial);
}

function merge(base: any, over: any): any {
  if (!isObj(base) || !isObj(over)) return over;
  const out: any = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = k in base && isObj(base[k]) && isObj(v) && k !== 'queues' && k !== 'users' ? merge(base[k], v) : v;
  return out;
}

function deepFreeze<T>(o: T): T {
  if (typeof o === 'object' && o !== null) { Object.freeze(o); for (const v of Object.values(o)) deepFreeze(v); }
  return o;
}

/** Defaults, then the file (if any), then programmatic overrides; validated and frozen. */
/** The amqps port when `tls.port` is not given [IANA; wire.md 1]. */
export const AMQPS_PORT = 5671;

export function loadConfig(file?: string, overrides: Record<string, unknown> = {}): BrokerConfig {
  const defaults = JSON.parse(readFileSync(defaultConfigPath(), 'utf8'));
  let user: unknown = {};
  if (file) {
    try { user = JSON.parse(readFileSync(file, 'utf8')); }
    catch (e) { throw new ConfigError(`cannot read config ${file}: ${(e as Error).message}`); }
    check(user, shape, 'config', true);
  }
  check(overrides, shape, 'config', true);
  const merged = merge(merge(defaults, user), overrides);
  check(merged, shape, 'config');
  // amqps has its IANA port (wire.md 1): a `tls` without `port` listened on a random one.
  if (isObj(merged.tls) && merged.tls.port === undefined) merged.tls = { ...merged.tls, port: AMQPS_PORT };
  return deepFreeze(merged) as BrokerConfig;
}
