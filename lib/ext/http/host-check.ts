/**
 * DNS rebinding guard for the HTTP listener. It has no authentication of its own and serves
 * message content to whoever reaches it (docs/observability.md), so "loopback only" must
 * also keep out a web page in a local browser whose domain an attacker re-pointed at
 * 127.0.0.1: its requests reach the listener, but name the attacker's domain in Host. Only
 * a Host that is an IP literal, `localhost`, or a name the operator listed in
 * `http.allowedHosts` is served (names a browser would only send after resolving them to us
 * by the operator's own choice).
 */
import { isIP } from 'node:net';

/** The host part of a Host header (no port, no IPv6 brackets), lower case; undefined when malformed. */
export function hostOf(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const h = header.trim().toLowerCase();
  if (h.startsWith('[')) { const end = h.indexOf(']'); return end > 0 && (end === h.length - 1 || /^:\d+$/.test(h.slice(end + 1))) ? h.slice(1, end) : undefined; }
  const m = /^([^:]+)(?::\d+)?$/.exec(h);
  return m ? m[1]!.replace(/\.$/, '') : undefined;
}

/** True when a request naming `header` in Host may be served. */
export function hostAllowed(header: string | undefined, allowed: readonly string[]): boolean {
  const host = hostOf(header);
  if (host === undefined || host === '') return false;
  if (isIP(host) !== 0 || host === 'localhost' || host.endsWith('.localhost')) return true;
  return allowed.some((a) => hostOf(a) === host); // an entry with a port matches that name on any port
}
