/**
 * Minimal structured logger: one JSON object per line on stderr, levels from config.
 * A namespace per subsystem (`tidemark:protocol`, `tidemark:engine`, ...).
 */
export type LogLevel = 'silent' | 'error' | 'warn' | 'info' | 'debug';
const order: Record<LogLevel, number> = { silent: 0, error: 1, warn: 2, info: 3, debug: 4 };
let current: LogLevel = (process.env.TIDEMARK_LOG_LEVEL as LogLevel) in order ? (process.env.TIDEMARK_LOG_LEVEL as LogLevel) : 'info';

export function setLogLevel(level: LogLevel): void { current = level; }
export function getLogLevel(): LogLevel { return current; }

export interface Logger {
  error(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  debug(msg: string, fields?: Record<string, unknown>): void;
}

function emit(level: LogLevel, ns: string, msg: string, fields?: Record<string, unknown>): void {
  if (order[level] > order[current]) return;
  const rec: Record<string, unknown> = { time: new Date().toISOString(), level, ns, msg };
  if (fields) for (const [k, v] of Object.entries(fields)) rec[k] = v instanceof Error ? { message: v.message, stack: v.stack, cause: (v as any).cause?.message } : v;
  process.stderr.write(JSON.stringify(rec, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)) + '\n');
}

export function logger(ns: string): Logger {
  const name = `tidemark:${ns}`;
  return {
    error: (m, f) => emit('error', name, m, f),
    warn: (m, f) => emit('warn', name, m, f),
    info: (m, f) => emit('info', name, m, f),
    debug: (m, f) => emit('debug', name, m, f),
  };
}
