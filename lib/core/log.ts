/**
 * Structured logging through pino: one JSON object per line on stderr, levels from config
 * (`logLevel`, `--log-level`, or TIDEMARK_LOG_LEVEL before the config is read). A namespace
 * per subsystem (`tidemark:protocol`, `tidemark:engine`, ...) as the `ns` field.
 *
 * Why pino: structured JSON lines that log shippers read as they are, real levels (with
 * `silent`), and it is the fastest of the kept Node loggers (no formatting on the hot path,
 * level checks before any work). Callers keep the small `logger(ns).info(msg, fields)` API,
 * so the library stays behind this one file.
 *
 * A line looks like {"level":"info","time":"2025-…Z","ns":"tidemark:protocol","msg":"connection open",…}.
 * Errors in fields become {type, message, stack, cause}; bigints become strings.
 * Message bodies never appear above `debug`: a `body` field (or `message.body`) is replaced
 * by "[omitted]" at info, warn and error.
 */
import pino, { type Logger as PinoLogger, type DestinationStream } from 'pino';

export type LogLevel = 'silent' | 'error' | 'warn' | 'info' | 'debug';
const levels: readonly LogLevel[] = ['silent', 'error', 'warn', 'info', 'debug'];

const envLevel = process.env.TIDEMARK_LOG_LEVEL as LogLevel;
let current: LogLevel = levels.includes(envLevel) ? envLevel : 'info';

export interface Logger {
  error(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  debug(msg: string, fields?: Record<string, unknown>): void;
}

let root: PinoLogger | undefined;
/** Children by namespace: pino copies the level at child creation, so setLogLevel updates each. */
const children = new Map<string, PinoLogger>();

function makeRoot(dest?: DestinationStream): PinoLogger {
  return pino({
    level: current,
    base: null, // no pid/hostname: one broker per process, the supervisor knows both
    messageKey: 'msg',
    serializers: { err: (v: unknown) => v }, // errors are serialised in prepare(), whatever their key
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  }, dest ?? pino.destination({ fd: 2, sync: true })); // sync: lines survive process.exit and kill
}

function rootLogger(): PinoLogger {
  return (root ??= makeRoot());
}

function child(ns: string): PinoLogger {
  let c = children.get(ns);
  if (!c) { c = rootLogger().child({ ns }); c.level = current; children.set(ns, c); }
  return c;
}

export function setLogLevel(level: LogLevel): void {
  if (!levels.includes(level)) throw new TypeError(`log level ${level}: expected one of ${levels.join(', ')}`);
  current = level;
  if (root) root.level = level;
  for (const c of children.values()) c.level = level;
}
export function getLogLevel(): LogLevel { return current; }

/** Sends every logger's output to `dest` (tests); undefined restores stderr. */
export function setLogDestination(dest?: DestinationStream): void {
  root = makeRoot(dest);
  const names = [...children.keys()];
  children.clear();
  for (const ns of names) child(ns);
}

function serialiseError(e: Error): Record<string, unknown> {
  const cause = (e as { cause?: unknown }).cause;
  return {
    type: e.name, message: e.message, stack: e.stack,
    ...((e as { code?: unknown }).code !== undefined ? { code: (e as { code?: unknown }).code } : {}),
    ...(cause !== undefined ? { cause: cause instanceof Error ? cause.message : String(cause) } : {}),
  };
}

function prepare(fields: Record<string, unknown>, hideBody: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) {
    if (hideBody && k === 'body' && v !== undefined) out[k] = '[omitted]';
    else if (hideBody && k === 'message' && v && typeof v === 'object' && 'body' in v) out[k] = { ...(v as object), body: '[omitted]' };
    else if (v instanceof Error) out[k] = serialiseError(v);
    else if (typeof v === 'bigint') out[k] = v.toString();
    else out[k] = v;
  }
  return out;
}

export function logger(ns: string): Logger {
  const name = `tidemark:${ns}`;
  const emit = (level: Exclude<LogLevel, 'silent'>) => (msg: string, fields?: Record<string, unknown>) => {
    const l = child(name);
    if (!l.isLevelEnabled(level)) return;
    if (fields) l[level](prepare(fields, level !== 'debug'), msg);
    else l[level](msg);
  };
  return { error: emit('error'), warn: emit('warn'), info: emit('info'), debug: emit('debug') };
}
