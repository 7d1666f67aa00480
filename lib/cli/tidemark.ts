/**
 * `tidemark`: starts the broker (tools.md). Prints the listening URL once it accepts
 * connections; SIGINT/SIGTERM stop it cleanly (exit 0).
 */
import { readFileSync } from 'node:fs';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { startBroker } from '../index.js';
import { ConfigError } from '../core/config.js';

const argv = await yargs(hideBin(process.argv))
  .scriptName('tidemark')
  .usage('$0 [options]\n\nStarts the Tidemark AMQP 1.0 broker on its embedded LevelDB.')
  .option('config', { type: 'string', describe: 'configuration file (JSON), merged over conf/broker.json' })
  .option('data', { type: 'string', describe: 'data directory (default ./data)' })
  .option('port', { type: 'number', describe: 'AMQP port (0 = any free port, and then any free HTTP port too unless --http-port or the --config file sets one; default 5672)' })
  .option('host', { type: 'string', describe: 'bind address (default 127.0.0.1)' })
  .option('log-level', { type: 'string', choices: ['silent', 'error', 'warn', 'info', 'debug'], describe: 'log level' })
  .option('http-port', { type: 'number', describe: 'HTTP port for metrics and console (0 = any free port)' })
  .option('http', { type: 'boolean', describe: 'serve metrics/console over HTTP (--no-http to disable)' })
  .strict()
  .help()
  // Like the other tools (tools.md, tools/common/cli.ts usageError): one `Error: …` line and
  // exit 1, not the help text nor a second line.
  .fail((msg, err) => usage(oneLine(msg ?? err?.message ?? 'bad arguments')))
  .parse();

function usage(text: string): never {
  process.stderr.write(`Error: ${text}\n`);
  process.exit(1);
}

/**
 * yargs' texts as one line: an unknown `--bogus-flag` is named once (yargs names it as itself
 * and as `bogusFlag`), and a bad choice ("Invalid values:\n  Argument: log-level, Given: …")
 * reads `--log-level must be "silent", … or "debug", got "loud"`.
 */
function oneLine(msg: string): string {
  const m = /^Unknown arguments?: (.*)$/s.exec(msg);
  if (m) {
    const names = m[1].split(', ');
    const kept = names.filter((n) => !names.some((o) => o !== n && o.includes('-') && o.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase()) === n));
    return `Unknown argument${kept.length > 1 ? 's' : ''}: ${kept.join(', ')}`;
  }
  const invalid = /^Invalid values:\s*\n([\s\S]*)$/.exec(msg);
  if (invalid) {
    const each = [...invalid[1].matchAll(/Argument: (.+?), Given: (.+?), Choices: (.+)$/gm)].map(([, key, given, choices]) => {
      const list = choices.split(', ');
      return `--${key} must be ${list.length < 2 ? list.join('') : `${list.slice(0, -1).join(', ')} or ${list.at(-1)}`}, got ${given}`;
    });
    if (each.length) return each.join('; ');
  }
  return msg.replace(/\s*\n\s*/g, ' ').trim();
}

// A flag given twice is an array to yargs (`--port 1 --port 2`): refuse it, as the tools do.
for (const [key, v] of Object.entries(argv)) {
  if (key === '_' || key === '$0' || !Array.isArray(v) || /[A-Z]/.test(key)) continue;
  usage(`--${key} was given ${v.length} times (${v.map((x) => JSON.stringify(String(x))).join(', ')}): give it once`);
}

// yargs reads `--port abc` as NaN, which the config check then reported as `listen.port … got null`.
for (const flag of ['port', 'http-port'] as const) {
  const v = argv[flag];
  if (v !== undefined && !(Number.isInteger(v) && v >= 0 && v <= 65535)) {
    const raw = process.argv.slice(2).find((a, i, all) => a.startsWith(`--${flag}=`) || all[i - 1] === `--${flag}`);
    process.stderr.write(`Error: --${flag} expects a port number from 0 to 65535 (0 = any free port), got ${JSON.stringify(raw?.replace(`--${flag}=`, '') ?? String(v))}\n`);
    process.exit(1);
  }
}

/** Whether the configuration file given names an HTTP port (unreadable: let startBroker report it). */
function configSetsHttpPort(file: string): boolean {
  try { return JSON.parse(readFileSync(file, 'utf8'))?.http?.port !== undefined; } catch { return true; }
}

const overrides: Record<string, any> = {};
if (argv.data !== undefined) overrides.dataDir = argv.data;
if (argv.port !== undefined || argv.host !== undefined) overrides.listen = { ...(argv.port !== undefined ? { port: argv.port } : {}), ...(argv.host !== undefined ? { host: argv.host } : {}) };
// Precedence: --log-level, then TIDEMARK_LOG_LEVEL, then the config file (an operator sets the
// variable to turn on debug without editing the file; config validation names a bad value).
if (argv['log-level'] !== undefined) overrides.logLevel = argv['log-level'];
else if (process.env.TIDEMARK_LOG_LEVEL) {
  const level = process.env.TIDEMARK_LOG_LEVEL;
  if (!['silent', 'error', 'warn', 'info', 'debug'].includes(level)) {
    process.stderr.write(`Error: TIDEMARK_LOG_LEVEL expects one of silent, error, warn, info, debug, got ${JSON.stringify(level)}\n`);
    process.exit(1);
  }
  overrides.logLevel = level;
}
// `--port 0` is for running several brokers side by side: the HTTP listener must not then
// fight over its fixed default port.
if (argv.port === 0 && argv['http-port'] === undefined && (argv.config === undefined || !configSetsHttpPort(argv.config))) argv['http-port'] = 0;
if (argv['http-port'] !== undefined || argv.http !== undefined) overrides.http = { ...(argv['http-port'] !== undefined ? { port: argv['http-port'] } : {}), ...(argv.http !== undefined ? { enabled: argv.http } : {}) };

// A reader of our output that went away (the parent that started us died, `| head`) must not
// stop the broker, nor turn every log line into an error that logs itself (measured: a
// broker whose pipes were closed spun at 50 % CPU and never finished stopping on SIGTERM).
// Lost output is lost; the broker carries on.
for (const stream of [process.stdout, process.stderr]) stream.on('error', () => { /* reader gone */ });
const say = (stream: NodeJS.WriteStream, text: string): void => { try { stream.write(text); } catch { /* reader gone */ } };

try {
  const broker = await startBroker({ configFile: argv.config, overrides });
  for (const url of broker.urls) process.stdout.write(`Tidemark listening on ${url}\n`);
  if (broker.httpUrl) process.stdout.write(`Tidemark metrics and console on ${broker.httpUrl}\n`);
  let stopping = false;
  const stop = async (sig: string) => {
    if (stopping) return;
    stopping = true;
    say(process.stdout, `${sig}: stopping\n`);
    try { await broker.stop(); process.exit(0); } catch (e) { say(process.stderr, `Error: ${(e as Error).message}\n`); process.exit(1); }
  };
  // The broker must never die from one bad input: log what escaped every handler and go on.
  process.on('uncaughtException', (err) => say(process.stderr, JSON.stringify({ level: 'error', msg: 'uncaught exception', err: String(err?.stack ?? err) }) + '\n'));
  process.on('unhandledRejection', (err) => say(process.stderr, JSON.stringify({ level: 'error', msg: 'unhandled rejection', err: String((err as Error)?.stack ?? err) }) + '\n'));
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
  // SIGHUP (the terminal closed, a supervisor's hang-up) stops the broker cleanly as SIGTERM
  // does: Node's default for it was to exit at once, with no close sent and nothing flushed.
  process.on('SIGHUP', () => void stop('SIGHUP'));
} catch (e) {
  process.stderr.write(`Error: ${e instanceof ConfigError ? e.message : (e as Error).message}\n`);
  process.exit(1);
}
