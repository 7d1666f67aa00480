/**
 * Shared command line plumbing for spout, drain and tidemark-config: the common options,
 * `key=value` parsing, and a `main` wrapper that turns every failure into `Error: …` on
 * stderr with exit code 1 and always ends the process.
 */
import rhea from 'rhea';

const r: any = rhea;

/** A failure to report as `Error: <message>` (no stack trace). */
export class ToolError extends Error {}

/**
 * The error for a yargs usage failure. A mistyped flag (`--brwse q`) takes the next word as
 * its value, so yargs reports a missing address rather than the flag: name the flag then.
 */
export function usageError(msg: string | undefined, err: Error | undefined, y: any): Error {
  // yargs reads a value that starts with '-' as the next flag (a filter such as '-/x > 3'),
  // so the option has no value, or takes a word meant for something else: say so first.
  const opts = y?.getOptions?.() ?? {};
  const stringOptions = new Set<string>([...(opts.string ?? []), ...(opts.string ?? []).flatMap((k: string) => opts.alias?.[k] ?? [])]);
  const args = process.argv.slice(2);
  for (let i = 0; i < args.length - 1; i++) {
    const m = /^--?([^-=][^=]*)$/.exec(args[i]);
    const next = args[i + 1];
    if (m && stringOptions.has(m[1]) && next.startsWith('-') && next !== '-' && !/^-\d/.test(next)) { // (yargs takes -5 as a value)
      return new ToolError(`${args[i]} got no value: ${JSON.stringify(next)} starts with '-' and was read as a flag; write ${args[i].startsWith('--') ? args[i] : '--' + m[1]}='${next}'`);
    }
  }
  const missing = /^Not enough arguments following: (\S+)$/.exec(msg ?? err?.message ?? '');
  if (missing) return new ToolError(`${flagName(missing[1])} needs a value`);
  if (err) return err;
  // yargs writes a bad choice on two lines ("Invalid values:\n  Argument: …"): tools.md wants one.
  const invalid = msg ? /^Invalid values:\s*\n([\s\S]*)$/.exec(msg) : null;
  if (invalid) {
    const each = [...invalid[1].matchAll(/Argument: (.+?), Given: (.+?), Choices: (.+)$/gm)]
      .map(([, key, given, choices]) => `${flagName(key)} must be ${oneOf(choices.split(', '))}, got ${given}`);
    if (each.length) return new ToolError(each.join('; '));
  }
  if (msg && /^Not enough non-option arguments/.test(msg)) {
    const known = new Set<string>(['help', 'version', ...Object.keys(opts.key ?? {}), ...Object.values(opts.alias ?? {}).flat() as string[]]);
    const unknown = process.argv.slice(2)
      .filter((a) => /^--[^-]/.test(a))
      .map((a) => a.slice(2).split('=')[0])
      .filter((n) => !known.has(n) && !known.has(n.replace(/^no-/, '')));
    if (unknown.length) {
      return new ToolError(`Unknown argument${unknown.length > 1 ? 's' : ''}: ${unknown.join(', ')} (an unknown flag takes the word after it as its value: was that the address?)`);
    }
  }
  // A command's positional left out (`del queue`): name it, with the command's usage, rather
  // than "Not enough non-option arguments: got 1, need at least 2".
  const few = msg ? /^Not enough non-option arguments: got (\d+), need at least \d+$/.exec(msg) : null;
  const usage = few ? usageLine(y) : undefined;
  if (few && usage) {
    const absent = usage.split(/\s+/).filter((w) => /^<[^>]+>$|^[A-Z][A-Z0-9_]*$/.test(w)).slice(Number(few[1]));
    if (absent.length) return new ToolError(`missing ${absent.join(' ')}: usage: ${usage}`);
  }
  const unknownList = msg ? /^Unknown arguments?: (.*)$/s.exec(msg) : null;
  if (unknownList) {
    // yargs names `--max-count` twice, as itself and as `maxCount`: keep what the user typed.
    const names = unknownList[1].split(', ');
    const kept = names.filter((n) => !names.some((o) => o !== n && o.includes('-') && o.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase()) === n));
    return new ToolError(`Unknown argument${kept.length > 1 ? 's' : ''}: ${kept.join(', ')}`);
  }
  return new ToolError(msg ?? 'bad arguments');
}

/**
 * The usage of what was run: the command's (`tidemark-config del <type> <name>`) or the
 * tool's first usage line (`drain [options] ADDRESS`). `y` is the parser or, as
 * tidemark-bench passes it, yargs' usage object.
 */
function usageLine(y: any): string | undefined {
  const internal = y?.getInternalMethods?.();
  const script: string = y?.$0 ?? '';
  const command: string | undefined = internal?.getContext?.().fullCommands?.at(-1);
  if (command) return `${script} ${command}`.trim();
  const text: unknown = (internal?.getUsageInstance?.() ?? y)?.getUsage?.()?.[0]?.[0];
  return typeof text === 'string' ? text.split('\n')[0].replace(/\$0/g, script).trim() : undefined;
}

/** `-p` or `--print`, as a user types the option named `key`. */
function flagName(key: string): string {
  return `${key.length === 1 ? '-' : '--'}${key}`;
}

/** `"a"`, `"a" or "b"`, `"a", "b" or "c"`. */
function oneOf(choices: string[]): string {
  return choices.length < 2 ? choices.join('') : `${choices.slice(0, -1).join(', ')} or ${choices.at(-1)}`;
}

/** `--content was given 2 times ("a", "b"): give it once`. */
function givenTwice(flag: string, v: unknown[]): ToolError {
  return new ToolError(`${flag} was given ${v.length} times (${v.map((x) => JSON.stringify(String(x))).join(', ')}): give it once`);
}

/** A yargs coerce for an option that takes one value: given twice, yargs makes an array. */
export function once(flag: string): (v: string) => string {
  return (v: string | string[]) => {
    if (Array.isArray(v)) throw givenTwice(flag, v);
    return v;
  };
}

/**
 * A yargs middleware that refuses any option given more than once (yargs makes an array of
 * it: `--content a --content b` sent a list body, `-i a -i b` the spout-id "a,b:0") unless it
 * is one of `repeatable` (`-P`, `-M`, `--argument`). Every option is covered by default, so a
 * new one needs nothing; booleans are not arrays (the last one wins). Runs after parsing and
 * before a command's handler; what it throws goes to the tool's fail() as a usage error.
 */
export function singleValues(repeatable: readonly string[] = []): (argv: Record<string, unknown>, y?: any) => void {
  return (argv, y) => {
    const opts = y?.getOptions?.() ?? {};
    const aliases: Record<string, string[]> = opts.alias ?? {};
    const aliasOf = new Map<string, string>();
    for (const [k, list] of Object.entries(aliases)) for (const a of list) aliasOf.set(a, k);
    const allowed = new Set<string>(repeatable);
    for (const k of repeatable) for (const a of aliases[k] ?? []) allowed.add(a);
    for (const [key, v] of Object.entries(argv)) {
      if (key === '_' || key === '$0' || !Array.isArray(v)) continue;
      // yargs also sets each alias and the camelCase twin (contentStdin) of a dashed option:
      // name the option as declared
      const dashed = key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
      const base = dashed !== key && dashed in argv ? dashed : key;
      const name = aliasOf.get(base) ?? base;
      if (allowed.has(name)) continue;
      const short = [name, ...(aliases[name] ?? [])].find((a) => a.length === 1);
      const flag = name.length === 1 ? `-${name}` : short ? `-${short}/--${name}` : `--${name}`;
      throw givenTwice(flag, v);
    }
  };
}

export const commonOptions = {
  broker: {
    alias: 'b',
    type: 'string',
    default: 'amqp://127.0.0.1:5672',
    describe: 'broker URL: amqp[s]://[user:pass@]host[:port] or user/pass@host:port',
    requiresArg: true,
    coerce: once('-b/--broker'),
  },
  'connection-options': {
    type: 'string',
    describe: "Qpid map: {username, password, sasl_mechanisms, container_id, idle_timeout (or heartbeat), transport: tcp|ssl, protocol: amqp1.0}",
    requiresArg: true,
    coerce: once('--connection-options'),
  },
} as const;

let exiting = false;

/** Writes everything pending on stdout/stderr, then exits with `code` (first call wins). */
export function exit(code: number): void {
  if (exiting) return;
  exiting = true;
  const streams = [process.stdout, process.stderr].filter((s) => !s.errored && !s.destroyed);
  let pending = streams.length;
  if (pending === 0) process.exit(code);
  const done = () => { if (--pending === 0) process.exit(code); };
  for (const s of streams) s.write('', done);
  setTimeout(() => process.exit(code), 1000).unref(); // whatever happens, the process ends
}

/**
 * stdout's write error, if a write has failed. A write to a pipe or file fails synchronously
 * (the stream records the error at once and emits 'error' later), so a tool can check this
 * right after printing, e.g. before it accepts the message it printed.
 */
export function stdoutError(): NodeJS.ErrnoException | undefined {
  const e = (process.stdout as { errored?: Error | null }).errored;
  return e ? (e as NodeJS.ErrnoException) : undefined;
}

/** Whether a stdout error means the reader went away (`drain … | head -2`): not a failure. */
export function isClosedPipe(e: NodeJS.ErrnoException | undefined): boolean {
  return e?.code === 'EPIPE' || e?.code === 'ERR_STREAM_DESTROYED';
}

let stdoutClosedHandler: (() => void) | undefined;

/**
 * What to do when stdout's reader goes away (EPIPE). By default the tool exits 0 at once, as
 * a Unix tool killed by SIGPIPE would (quietly); a tool with work to finish (drain detaching a
 * durable subscription, spout waiting for outcomes) registers its own ending here.
 */
export function onStdoutClosed(fn: () => void): void { stdoutClosedHandler = fn; }

function stdoutFailed(e: NodeJS.ErrnoException): void {
  if (isClosedPipe(e)) {
    if (stdoutClosedHandler) stdoutClosedHandler();
    else exit(0);
    return;
  }
  fatal(new ToolError(`cannot write to stdout: ${errorMessage(e)}`));
}

export function errorMessage(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}

/** Reports a failure as `Error: …` and exits 1. */
export function fatal(e: unknown): void {
  if (exiting) return;
  process.stderr.write(`Error: ${errorMessage(e)}\n`);
  exit(1);
}

/** Runs a tool body: resolves → exit 0 (or the number returned), throws → `Error: …`, exit 1. */
export function main(body: () => Promise<number | void>): void {
  process.on('uncaughtException', fatal);
  process.on('unhandledRejection', fatal);
  process.stdout.on('error', stdoutFailed);
  body().then((code) => exit(code ?? 0), fatal);
}

/** `k=v` → [k, v]; a missing `=` is an error naming the option. */
export function splitKeyValue(option: string, text: string): [string, string] {
  const i = text.indexOf('=');
  if (i <= 0) throw new ToolError(`${option} expects key=value, got '${text}'`);
  return [text.slice(0, i), text.slice(i + 1)];
}

const INT_RE = /^[+-]?\d+$/;

/** Whether a command line value looks like an integer (`10`, `-3`) and fits a long. */
export function isIntegerText(v: string): boolean {
  if (!INT_RE.test(v)) return false;
  const n = BigInt(v);
  return n >= -(2n ** 63n) && n < 2n ** 63n;
}

/**
 * A command line value as qpid tools send it: an integer-looking value becomes an AMQP long,
 * anything else stays a string.
 */
export function typedValue(v: string): unknown {
  if (!isIntegerText(v)) return v;
  const n = BigInt(v);
  if (n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER)) return r.types.wrap_long(Number(n));
  const buf = Buffer.alloc(8);
  buf.writeBigInt64BE(n);
  return r.types.wrap_long(buf);
}

/** The plain JS value of a typedValue (for printing): a number or the string. */
export function plainValue(v: string): string | number {
  if (isIntegerText(v)) {
    const n = Number(v);
    if (Number.isSafeInteger(n)) return n;
  }
  return v;
}

/** Parses repeated `k=v` options into a map with typed values. */
export function keyValues(option: string, list: unknown, typed = true): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const items = list === undefined ? [] : Array.isArray(list) ? list : [list];
  for (const item of items) {
    const [k, v] = splitKeyValue(option, String(item));
    out[k] = typed ? typedValue(v) : v;
  }
  return out;
}

/** Seconds option → milliseconds, refusing negatives and non-numbers. */
export function secondsOption(name: string, v: unknown): number {
  const n = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN;
  if (!Number.isFinite(n) || n < 0) throw new ToolError(`--${name} expects a number of seconds >= 0, got '${shown(v)}'`);
  return n * 1000;
}

/**
 * Integer option ≥ min. The tools declare such options as strings, so that an error shows what
 * was typed. Past 2^53 a number is no longer exact (9007199254740993 became ...992) and one past
 * 2^63 made rhea throw a RangeError that named no flag: refused, naming the flag.
 */
export function intOption(name: string, v: unknown, min = 0): number {
  const n = typeof v === 'number' ? v : typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN;
  if (!Number.isInteger(n) || n < min) throw new ToolError(`--${name} expects an integer >= ${min}, got '${shown(v)}'`);
  if (!Number.isSafeInteger(n)) throw new ToolError(`--${name} expects an integer from ${min} to ${Number.MAX_SAFE_INTEGER}, got '${shown(v)}'`);
  return n;
}

/** A command line value as the user typed it (a repeated option: the values, comma-separated). */
function shown(v: unknown): string {
  return Array.isArray(v) ? v.map(String).join(',') : String(v);
}
