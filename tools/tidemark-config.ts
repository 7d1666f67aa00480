/**
 * tidemark-config: qpid-config's verbs for Tidemark queues, over AMQP to `$management`
 * (wire.md 7): queues, add queue, del queue, purge queue, sow-delete; and hash-password for
 * the users section of the broker configuration.
 */
import yargs, { type Argv } from 'yargs';
import { hideBin } from 'yargs/helpers';
import { parseDuration } from '../lib/address/index.js';
import { hashPassword } from '../lib/core/auth.js';
import { main, commonOptions, ToolError, usageError, singleValues, keyValues, intOption, errorMessage } from './common/cli.js';
import { connect, r } from './common/connection.js';
import { ManagementClient } from './common/management.js';
import { table, toPlain, formatDuration } from './common/format.js';

interface Common { broker: string; 'connection-options'?: string }

async function withManagement<T>(argv: Common, fn: (m: ManagementClient) => Promise<T>): Promise<T> {
  const conn = await connect({ broker: argv.broker, connectionOptions: argv['connection-options'] });
  try {
    const m = await ManagementClient.open(conn);
    return await fn(m);
  } finally {
    await conn.close();
  }
}

function checkType(type: unknown, also: string[] = []): void {
  if (type !== 'queue' && !also.includes(String(type))) throw new ToolError(`unknown object type '${type}': use ${['queue', ...also].join(' or ')}`);
}

/** `CONTAINER/LINK` of a durable subscription (the link name may itself contain '/'). */
function subscriptionId(text: string): { container: string; link: string } {
  const i = text.indexOf('/');
  if (i <= 0 || i === text.length - 1) throw new ToolError(`a durable subscription is named CONTAINER/LINK, got '${text}'`);
  return { container: text.slice(0, i), link: text.slice(i + 1) };
}

function durationArg(name: string, v: string | undefined): string | undefined {
  if (v === undefined) return undefined;
  try { parseDuration(v); } catch (e) { throw new ToolError(`--${name}: ${errorMessage(e)}`); }
  return v;
}

/** `oldest..head`; `-` for a side that is 0 or missing (no event retained / never one), `-` alone when both are. */
function scnRange(q: any): string {
  const side = (v: unknown) => { const p = toPlain(v); return p === null || p === 0 || p === '0' ? '-' : String(p); };
  const head = side(q.scn_head);
  const oldest = side(q.scn_oldest);
  if (head === '-' && oldest === '-') return '-';
  return `${oldest}..${head}`;
}

/** Queue arguments the broker keeps in milliseconds (wire.md 2.3 durations). */
const DURATION_ARGUMENTS = ['sow.history.window', 'sow.history.granularity', 'log.retention'];

/** `k=v …`, durations as durations (`7d`, `1m`, `500ms`) rather than milliseconds. */
function argsText(a: unknown): string {
  const p = toPlain(a) as Record<string, unknown> | null;
  if (!p || typeof p !== 'object') return '';
  return Object.entries(p).map(([k, v]) => {
    if (DURATION_ARGUMENTS.includes(k) && typeof v === 'number') return `${k}=${formatDuration(v)}`;
    return `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`;
  }).join(' ');
}

/** A queue name from the command line: never empty (the broker would only say which property it lacks). */
function queueName(v: unknown): string {
  const name = v === undefined || v === null ? '' : String(v);
  if (name.trim() === '') throw new ToolError('a queue name must not be empty');
  return name;
}

/**
 * The broker's 409 description of a queue it would not delete, without the broker's own
 * advice to "use force" (the tool's flag is --force; its hint is added after this).
 */
function notEmptyText(description: string, name: string): string {
  const d = description.replace(/[;,]?\s*use (--)?force\.?\s*$/i, '').trim();
  return d || `queue ${name} is not empty or in use`;
}

async function run(): Promise<number> {
  const result = 0;
  const cli = yargs(hideBin(process.argv))
    .scriptName('tidemark-config')
    .usage('$0 <command> [options]\n\nManages Tidemark queues over AMQP ($management).')
    .options(commonOptions)
    .command('queues [filter]', 'list queues with their arguments and statistics', (y: Argv) => y
      .positional('filter', { type: 'string', describe: 'only queues whose name contains this text' })
      .option('json', { type: 'boolean', default: false, describe: 'machine output: a JSON list of queue maps' }),
    async (argv: any) => {
      const list = await withManagement(argv, async (m) => (await m.call('QUERY', undefined, {})).body);
      const queues = (Array.isArray(list) ? list : []).filter((q: any) => argv.filter === undefined || String(q.name).includes(argv.filter));
      if (argv.json) {
        process.stdout.write(JSON.stringify(queues.map(toPlain)) + '\n');
        return;
      }
      const rows = queues.map((q: any) => [
        String(q.name), q.durable ? 'Y' : 'N', String(toPlain(q.depth) ?? 0), String(toPlain(q.bytes) ?? 0), scnRange(q),
        String(toPlain(q.sow_records) ?? 0), String(toPlain(q.consumers) ?? 0), argsText(q.arguments),
      ]);
      process.stdout.write(table(['queue', 'dur', 'depth', 'bytes', 'scn', 'sow', 'cons', 'arguments'], rows) + '\n');
    })
    .command('add <type> <name>', 'declare a queue', (y: Argv) => y
      .positional('type', { type: 'string', describe: 'queue' })
      .positional('name', { type: 'string', describe: 'queue name' })
      .options({
        durable: { type: 'boolean', default: false, describe: 'the queue survives a restart' },
        'max-queue-size': { type: 'string', describe: 'qpid.max_size (bytes)', requiresArg: true },
        'max-queue-count': { type: 'string', describe: 'qpid.max_count (messages)', requiresArg: true },
        'limit-policy': { choices: ['reject', 'ring'], describe: 'qpid.policy_type', requiresArg: true },
        'lvq-key': { type: 'string', describe: 'qpid.last_value_queue_key', requiresArg: true },
        'browse-only': { type: 'boolean', default: false, describe: 'qpid.browse-only' },
        'sow-key': { type: 'string', describe: 'sow.key: key paths, e.g. /id or /sym,/exchange', requiresArg: true },
        'history-window': { type: 'string', describe: 'sow.history.window, e.g. 7d', requiresArg: true },
        'history-granularity': { type: 'string', describe: 'sow.history.granularity, e.g. 1m', requiresArg: true },
        'log-retention': { type: 'string', describe: 'log.retention, e.g. 30d', requiresArg: true },
        argument: { type: 'string', describe: 'any queue argument k=v (repeatable; integers sent as integers)', requiresArg: true },
      }),
    async (argv: any) => {
      checkType(argv.type);
      const name = queueName(argv.name);
      const args: Record<string, unknown> = {};
      if (argv['max-queue-size'] !== undefined) args['qpid.max_size'] = r.types.wrap_long(intOption('max-queue-size', argv['max-queue-size']));
      if (argv['max-queue-count'] !== undefined) args['qpid.max_count'] = r.types.wrap_long(intOption('max-queue-count', argv['max-queue-count']));
      if (argv['limit-policy'] !== undefined) args['qpid.policy_type'] = argv['limit-policy'];
      if (argv['lvq-key'] !== undefined) args['qpid.last_value_queue_key'] = argv['lvq-key'];
      if (argv['browse-only']) args['qpid.browse-only'] = true;
      if (argv['sow-key'] !== undefined) args['sow.key'] = argv['sow-key'];
      const hw = durationArg('history-window', argv['history-window']);
      if (hw !== undefined) args['sow.history.window'] = hw;
      const hg = durationArg('history-granularity', argv['history-granularity']);
      if (hg !== undefined) args['sow.history.granularity'] = hg;
      const lr = durationArg('log-retention', argv['log-retention']);
      if (lr !== undefined) args['log.retention'] = lr;
      Object.assign(args, keyValues('--argument', argv.argument));
      await withManagement(argv, (m) => m.call('CREATE', name, { durable: !!argv.durable, arguments: args }));
    })
    .command('del <type> <name>', 'delete a queue (refuses a non-empty or in-use queue without --force), or a durable subscription (name CONTAINER/LINK)', (y: Argv) => y
      .positional('type', { type: 'string', describe: 'queue | subscription' })
      .positional('name', { type: 'string', describe: 'queue name, or CONTAINER/LINK of a durable subscription' })
      .option('force', { type: 'boolean', default: false, describe: 'delete even if not empty or in use' }),
    async (argv: any) => {
      checkType(argv.type, ['subscription']);
      if (argv.type === 'subscription') {
        const id = subscriptionId(String(argv.name));
        await withManagement(argv, (m) => m.call('SUBSCRIPTION-DELETE', undefined, id));
        return;
      }
      const name = queueName(argv.name);
      // Without --force, ask the broker to delete only an empty and unused queue (a management
      // DELETE is otherwise unconditional); `force` is for brokers that still refuse by default.
      const body = argv.force ? { force: true } : { if_empty: true, if_unused: true };
      const res = await withManagement(argv, (m) => m.request('DELETE', name, body));
      if (res.statusCode === 409) throw new ToolError(`${notEmptyText(res.statusDescription, name)}; add --force to delete it anyway`);
      if (!(res.statusCode >= 200 && res.statusCode < 300)) throw new ToolError(res.statusDescription || `status ${res.statusCode}`);
    })
    .command('subscriptions', 'list the durable subscriptions the broker keeps (container, link, queue, position)', (y: Argv) => y
      .option('json', { type: 'boolean', default: false, describe: 'print JSON' }),
    async (argv: any) => {
      const res = await withManagement(argv, (m) => m.call('SUBSCRIPTION-QUERY', undefined, {}));
      const subs = (toPlain(res.body) as Array<Record<string, unknown>> | undefined) ?? [];
      if (argv.json) { process.stdout.write(JSON.stringify(subs) + '\n'); return; }
      process.stdout.write(table(['container', 'link', 'queue', 'position'], subs.map((x) => [String(x.container), String(x.link), String(x.queue), x.position === null || x.position === undefined ? '-' : String(x.position)])) + '\n');
    })
    .command('purge <type> <name>', 'remove every message from a queue', (y: Argv) => y
      .positional('type', { type: 'string', describe: 'queue' })
      .positional('name', { type: 'string', describe: 'queue name' }),
    async (argv: any) => {
      checkType(argv.type);
      const name = queueName(argv.name);
      const res = await withManagement(argv, (m) => m.call('PURGE', name, {}));
      process.stdout.write(`purged ${toPlain(res.body?.count) ?? 0} message(s) from ${argv.name}\n`);
    })
    .command('sow-delete <name>', 'delete the SOW records matching a content filter', (y: Argv) => y
      .positional('name', { type: 'string', describe: 'SOW queue name' })
      .option('filter', { type: 'string', demandOption: true, describe: "content filter, e.g. \"/price > 10\"", requiresArg: true }),
    async (argv: any) => {
      const res = await withManagement(argv, (m) => m.call('SOW-DELETE', queueName(argv.name), { filter: argv.filter }));
      process.stdout.write(`deleted ${toPlain(res.body?.count) ?? 0} record(s) from ${argv.name}\n`);
    })
    .command('hash-password <password>', 'print the scrypt hash of a password for the users section of broker.json', (y: Argv) => y
      .positional('password', { type: 'string' }),
    (argv: any) => {
      process.stdout.write(hashPassword(String(argv.password)) + '\n');
    })
    .example('$0 add queue q --durable --max-queue-count 5 --limit-policy ring', 'a durable ring queue')
    .example("$0 add queue prices --sow-key /id --history-window 7d", 'a SOW queue with 7 days of history')
    .example('$0 queues', 'list the queues')
    .demandCommand(1, 'give a command: queues, add, del, purge, sow-delete, subscriptions, hash-password')
    .middleware(singleValues(['argument']))
    .strict()
    .help()
    .version(false);
  // (yargs gives fail() its usage object, not the parser: the parser is what knows the options)
  await cli.fail((msg, err) => { throw usageError(msg, err, cli); }).parseAsync();
  return result;
}

main(run);
