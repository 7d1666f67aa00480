/**
 * Per-user queue ACLs (docs/security.md, issue 8 "Authentication and authorization").
 *
 * Config `acl: {rules: [{user, queue, allow}], default, groups?}`. Rules are tried in order;
 * the FIRST rule whose user and queue pattern both match decides: the action is allowed if
 * it is in `allow`, denied otherwise (no fall-through, so a narrow rule above a broad one
 * really narrows). When no rule matches, `default` applies. With no rules and default
 * `allow` (the shipped config) this extension has no opinion and nothing changes.
 *
 * - user: a name as authenticated by SASL PLAIN, `anonymous` for ANONYMOUS connections,
 *   `*` for everyone, or `@group` for a member of `acl.groups.group`.
 * - queue: a glob over the queue name, `*` = any run of characters (dots included),
 *   `?` = one character; everything else is literal.
 * - allow: create, publish, consume, browse, manage. `consume` implies `browse` (whoever
 *   may remove messages may see them); a user with `browse` but not `consume` who attaches
 *   with distribution-mode move is answered with copy and removes nothing (browse-only by
 *   ACL, QPID-4241's other approach: the writers, not the readers, decide the lifetime).
 *
 * The broker asks through the `authorize` extension point (lib/core/extensions.ts); where it
 * asks is in lib/core/broker.ts and lib/ext/management.
 */
import type { Extension, AuthAction } from '../../core/extensions.js';
import type { AclConfig } from '../../core/config.js';
import { ConfigError } from '../../core/config.js';
import { logger } from '../../core/log.js';

const log = logger('acl');

interface CompiledRule { index: number; matchesUser(user: string): boolean; matchesQueue(queue: string): boolean; allow: Set<AuthAction> }

/**
 * `*` any run of characters, `?` one character, the rest literal; the whole name must match.
 * Matched by the classic wildcard walk (back to the last `*` on a mismatch), not a RegExp:
 * V8's backtracking made `*.*.reply` against a 120 KB queue name from a client take 13 s
 * (session 22). At most O(name × glob) steps, by code point.
 */
export function compileGlob(glob: string): (name: string) => boolean {
  const g = Array.from(glob);
  return (name) => {
    const s = Array.from(name);
    let i = 0, j = 0, star = -1, mark = 0;
    while (i < s.length) {
      if (j < g.length && (g[j] === '?' || (g[j] !== '*' && g[j] === s[i]))) { i++; j++; }
      else if (j < g.length && g[j] === '*') { star = j++; mark = i; }
      else if (star >= 0) { j = star + 1; i = ++mark; }
      else return false;
    }
    while (j < g.length && g[j] === '*') j++;
    return j === g.length;
  };
}

/** Compiles the config's rules; throws ConfigError naming the key for an unknown group. */
export function compileAcl(cfg: AclConfig): { decide(user: string, action: AuthAction, queue: string): boolean | undefined; active: boolean } {
  const groups = new Map<string, Set<string>>(Object.entries(cfg.groups ?? {}).map(([g, m]) => [g, new Set(m)]));
  const rules: CompiledRule[] = cfg.rules.map((r, index) => {
    let matchesUser: (u: string) => boolean;
    if (r.user === '*') matchesUser = () => true;
    else if (r.user.startsWith('@')) {
      const members = groups.get(r.user.slice(1));
      if (!members) throw new ConfigError(`config.acl.rules[${index}].user: unknown group ${r.user} (define it in config.acl.groups)`);
      matchesUser = (u) => members.has(u);
    } else matchesUser = (u) => u === r.user;
    return { index, matchesUser, matchesQueue: compileGlob(r.queue), allow: new Set(r.allow as AuthAction[]) };
  });
  const dflt = cfg.default === 'deny' ? false : undefined;
  return {
    active: rules.length > 0 || cfg.default === 'deny',
    decide(user, action, queue) {
      for (const r of rules) {
        if (!r.matchesUser(user) || !r.matchesQueue(queue)) continue;
        const ok = r.allow.has(action) || (action === 'browse' && r.allow.has('consume'));
        if (!ok) log.info('denied', { user, action, queue, rule: r.index });
        return ok;
      }
      if (dflt === false) log.info('denied by default', { user, action, queue });
      return dflt;
    },
  };
}

export function aclExtension(): Extension {
  let acl: ReturnType<typeof compileAcl> | undefined;
  return {
    name: 'acl',
    start(broker) {
      acl = compileAcl(broker.config.acl);
      if (acl.active) log.info('ACL active', { rules: broker.config.acl.rules.length, default: broker.config.acl.default });
    },
    authorize(user, action, queue) {
      return acl?.active ? acl.decide(user, action, queue) : undefined;
    },
  };
}
