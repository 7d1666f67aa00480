/**
 * drain ADDRESS: receives and prints messages, with Qpid drain's flags plus the Tidemark
 * source filters (tools.md, wire.md 4): commands, content filter, selector, bookmark,
 * options, checkpoint, durable subscriptions. Manual credit; `-t 0` drains the link so it
 * never waits for messages that are not there.
 */
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { hostname } from 'node:os';
import { parseAddress, addressToLinkOptions, parseDuration, SELECTOR_FILTER_SYMBOL } from '../lib/address/index.js';
import { main, commonOptions, ToolError, usageError, singleValues, intOption, secondsOption, errorMessage, stdoutError, isClosedPipe, onStdoutClosed } from './common/cli.js';
import { connect, openReceiver, typedTerminus, describeError, connectionLost, wrapDescribed, r } from './common/connection.js';
import { bodyText, headerLines, messageObject, commandLine } from './common/format.js';
import { FLEXIBLE_CHECKPOINT, checkpointPlain, typedCheckpoint, readCheckpoints, prepareCheckpoints, commitCheckpoints, abandonCheckpoints, removeStaleTmp, type PreparedCheckpoints } from './common/checkpoint.js';

export const COMMAND_FILTER = 'tidemark:command:symbol';
export const CONTENT_FILTER = 'tidemark:content-filter:string';
export const BOOKMARK_FILTER = 'tidemark:bookmark:string';
export const OPTIONS_FILTER = 'tidemark:options:map';
export const CHECKPOINT_FILTER = 'tidemark:checkpoint:map';

const WINDOW = 100;
/** How long to wait for the broker's answer to a drain before giving up (it should be immediate). */
const DRAIN_WAIT_MS = 5000;
const MARKERS = ['group_begin', 'group_end', 'completed'];

export { FLEXIBLE_CHECKPOINT };

async function run(): Promise<number> {
  const cli = yargs(hideBin(process.argv))
    .scriptName('drain')
    .usage('$0 [options] ADDRESS\n\nReceives messages from ADDRESS (a Qpid address: name[/subject][; {options}]) and prints them.')
    .command('$0 <address>', false)
    .positional('address', { type: 'string', describe: 'Qpid address' })
    .options(commonOptions)
    .options({
      count: { alias: 'c', type: 'string', default: '0', describe: 'stop after this many messages (0 = all available)', requiresArg: true },
      timeout: { alias: 't', type: 'string', default: '0', describe: 'seconds to wait for the next message (0 = read what is there and exit)', requiresArg: true },
      forever: { alias: 'f', type: 'boolean', default: false, describe: 'keep receiving until interrupted' },
      'print-headers': { type: 'boolean', default: false, describe: 'print properties and annotations' },
      'print-content': { type: 'boolean', default: true, describe: 'print the content (--no-print-content to hide it)' },
      print: { alias: 'p', choices: ['text', 'json'] as const, default: 'text' as const, describe: 'output format; json: one object per line', requiresArg: true },
      sow: { type: 'boolean', describe: 'SOW query: current state, then close' },
      'sow-and-subscribe': { type: 'boolean', describe: 'current state, then live updates' },
      subscribe: { type: 'boolean', describe: 'events (replay from --bookmark), then live' },
      filter: { type: 'string', describe: 'content filter expression, e.g. "/price > 10"', requiresArg: true },
      selector: { type: 'string', describe: 'JMS selector', requiresArg: true },
      bookmark: { alias: 'at', type: 'string', describe: 'bookmark: 0, now, an SCN or a UTC time', requiresArg: true },
      'top-n': { type: 'string', describe: 'at most N records', requiresArg: true },
      'skip-n': { type: 'string', describe: 'skip N records (with --top-n)', requiresArg: true },
      'order-by': { type: 'string', describe: "order of the records, e.g. '/price DESC'", requiresArg: true },
      oof: { type: 'boolean', default: false, describe: 'out-of-focus notifications' },
      conflation: { type: 'string', describe: 'conflation interval, e.g. 500ms', requiresArg: true },
      browse: { type: 'boolean', default: false, describe: 'browse (distribution-mode copy)' },
      checkpoint: { type: 'string', describe: 'checkpoint file: resume from it and keep it updated', requiresArg: true },
      'durable-name': { type: 'string', describe: 'durable subscription with this link name (container id drain@<hostname>); drain detaches without ending it', requiresArg: true },
    })
    .conflicts('sow', ['sow-and-subscribe', 'subscribe'])
    .conflicts('sow-and-subscribe', 'subscribe')
    .example('$0 q', 'print and consume what is on queue q')
    .example('$0 -f --browse q', 'browse q, waiting for new messages')
    .example("$0 --sow --filter '/price > 10' prices", 'SOW query with a content filter')
    .middleware(singleValues())
    .strict()
    .help()
    .version(false);
  // (yargs gives fail() its usage object, not the parser: the parser is what knows the options)
  const argv = await cli.fail((msg, err) => { throw usageError(msg, err, cli); }).parseAsync();

  // -p json prints every field of every message: the text-mode switches would be ignored
  if (argv.print === 'json' && (argv['print-headers'] || !argv['print-content'])) {
    throw new ToolError(`${argv['print-headers'] ? '--print-headers' : '--no-print-content'} is for -p text: -p json prints the whole message (body, properties, annotations, header)`);
  }
  const count = intOption('count', argv.count);
  const idleMs = secondsOption('timeout', argv.timeout);
  const addr = parseAddress(String(argv.address));
  const link = addressToLinkOptions(addr, 'receiver');
  const source: Record<string, any> = typedTerminus(link.source) ?? {};
  const filter: Record<string, unknown> = { ...(source.filter ?? {}) };

  const command = argv.sow ? 'sow' : argv['sow-and-subscribe'] ? 'sow_and_subscribe' : argv.subscribe ? 'subscribe' : undefined;
  if (command) filter['tidemark-command'] = wrapDescribed(r.types.wrap_symbol(command), COMMAND_FILTER);
  if (argv.filter !== undefined) filter['tidemark-content-filter'] = wrapDescribed(argv.filter, CONTENT_FILTER);
  if (argv.selector !== undefined) filter.selector = wrapDescribed(argv.selector, SELECTOR_FILTER_SYMBOL);
  if (argv.bookmark !== undefined) filter['tidemark-bookmark'] = wrapDescribed(argv.bookmark, BOOKMARK_FILTER);
  const options: Record<string, unknown> = {};
  if (argv['top-n'] !== undefined) options.top_n = r.types.wrap_long(intOption('top-n', argv['top-n']));
  if (argv['skip-n'] !== undefined) options.skip_n = r.types.wrap_long(intOption('skip-n', argv['skip-n']));
  if (argv['order-by'] !== undefined) options.order_by = argv['order-by'];
  if (argv.oof) options.oof = true;
  if (argv.conflation !== undefined) {
    try { parseDuration(argv.conflation); } catch (e) { throw new ToolError(`--conflation: ${errorMessage(e)}`); }
    options.conflation = argv.conflation;
  }
  if (Object.keys(options).length) filter['tidemark-options'] = wrapDescribed(options, OPTIONS_FILTER);

  const queue = addr.name ?? '';
  if (argv.checkpoint !== undefined) {
    removeStaleTmp(argv.checkpoint);
    const checkpoints = readCheckpoints(argv.checkpoint);
    const cp = (checkpoints[queue] as Record<string, unknown> | undefined) ?? FLEXIBLE_CHECKPOINT;
    filter['tidemark-checkpoint'] = wrapDescribed(typedCheckpoint(cp), CHECKPOINT_FILTER);
  }
  if (Object.keys(filter).length) source.filter = filter;
  if (argv.browse) source.distribution_mode = 'copy';
  const linkOpts: Record<string, unknown> = { source };
  if (link.name) linkOpts.name = link.name;
  if (link.target) linkOpts.target = link.target;
  if (link.snd_settle_mode !== undefined) linkOpts.snd_settle_mode = link.snd_settle_mode;
  let containerId: string | undefined;
  if (argv['durable-name'] !== undefined) {
    linkOpts.name = argv['durable-name'];
    source.durable = 2;
    source.expiry_policy = 'never';
  }
  // A durable subscription (--durable-name, or an address with link: {durable: True}): the
  // broker keeps its position under (container id, link name), so the id must be the same
  // from one run to the next; and drain must end by detaching, not closing, the link (a
  // detach with closed=true ends the subscription, wire.md 6).
  const durable = Number(source.durable ?? 0) > 0;
  if (durable) containerId = `drain@${hostname()}`;

  const conn = await connect({ broker: argv.broker, connectionOptions: argv['connection-options'], containerId });
  try {
    const receiver = await openReceiver(conn, linkOpts);
    return await consume(receiver, conn, {
      count, idleMs, forever: argv.forever, json: argv.print === 'json', headers: argv['print-headers'], content: argv['print-content'],
      checkpointFile: argv.checkpoint, queue, durable,
    });
  } finally {
    await conn.close();
  }
}

interface ConsumeOptions {
  count: number; idleMs: number; forever: boolean; json: boolean; headers: boolean; content: boolean;
  checkpointFile?: string; queue: string;
  /** a durable subscription: end by detaching the link (closed=false), which keeps it */
  durable: boolean;
}

function consume(receiver: any, conn: any, o: ConsumeOptions): Promise<number> {
  return new Promise((resolve, reject) => {
    let received = 0; // data messages (markers excluded)
    let finished = false;
    let draining = false;
    let idleTimer: NodeJS.Timeout | undefined;
    let drainTimer: NodeJS.Timeout | undefined;
    /** delivery-count up to which credit has been granted (AMQP 2.6.7) */
    let limit = 0;
    const remaining = () => (o.count > 0 ? o.count - received : Infinity);

    const finish = (err?: Error) => {
      if (finished) return;
      finished = true;
      clearTimeout(idleTimer);
      clearTimeout(drainTimer);
      receiver.removeAllListeners('message');
      if (err) { reject(err); return; }
      if (receiver.is_open()) {
        const t = setTimeout(() => resolve(0), 1000);
        receiver.once('receiver_close', () => { clearTimeout(t); resolve(0); });
        if (o.durable) receiver.detach(); // keeps the subscription (and its position) for the next run
        else receiver.close();
      } else resolve(0);
    };

    /** Tops up credit so that outstanding credit = min(WINDOW, messages still wanted). */
    const topUp = (forceFlow = false) => {
      const want = Math.min(WINDOW, remaining());
      if (receiver.credit < want) receiver.add_credit(want - receiver.credit);
      else if (forceFlow) receiver.drain_credit();
      limit = receiver.delivery_count + receiver.credit;
    };

    const startDrain = () => {
      if (finished) return;
      draining = true;
      receiver.drain = true;
      topUp(true);
      armDrainWait();
    };
    const armDrainWait = () => {
      clearTimeout(drainTimer);
      drainTimer = setTimeout(() => finish(), DRAIN_WAIT_MS);
    };
    const armIdle = () => {
      if (o.forever || draining) return;
      clearTimeout(idleTimer);
      idleTimer = setTimeout(startDrain, o.idleMs);
    };

    receiver.on('message', (ctx: any) => {
      if (finished) return;
      const m = ctx.message;
      const ann = m.message_annotations ?? {};
      const cmd = ann['x-opt-tm-cmd'] !== undefined ? String(ann['x-opt-tm-cmd']) : undefined;
      let prepared: PreparedCheckpoints | undefined;
      try {
        // The checkpoint file is written and synced before the message is printed and renamed
        // into place right after: a kill -9 at any point leaves a file that says exactly what
        // was printed (but for the microseconds between the print and the rename), so the
        // next run starts after the last printed message, with no gap and no repeat. Only this
        // queue's entry is replaced, in the file as it is now (under its lock): other drains
        // may keep their queues' checkpoints in the same file at the same time.
        if (o.checkpointFile && ann['x-opt-tm-checkpoint'] !== undefined) {
          prepared = prepareCheckpoints(o.checkpointFile, { [o.queue]: checkpointPlain(ann['x-opt-tm-checkpoint']) });
        }
        print(m, cmd, o);
        const outErr = stdoutError();
        if (outErr) {
          // not printed, so not accepted (the broker gives it back) and not checkpointed. A
          // reader that went away (`drain … | head -2`) ends drain quietly, as it would a Unix filter.
          if (prepared) abandonCheckpoints(prepared);
          finish(isClosedPipe(outErr) ? undefined : new ToolError(`cannot write to stdout: ${errorMessage(outErr)}`));
          return;
        }
        if (prepared) commitCheckpoints(prepared);
      } catch (e) {
        if (prepared) abandonCheckpoints(prepared);
        // not accepted: the broker gives it back
        finish(new ToolError(errorMessage(e)));
        return;
      }
      // A pre-settled delivery (the broker's markers) must still be settled locally: rhea frees
      // its session's incoming slots (2048) only from the oldest settled delivery on, so one
      // unsettled marker would stall the link 2048 deliveries later.
      if (!ctx.delivery.remote_settled) ctx.delivery.accept();
      else ctx.delivery.update(true);
      if (!cmd || !MARKERS.includes(cmd)) received++;
      if (remaining() <= 0) { finish(); return; }
      if (draining) {
        armDrainWait();
        if (receiver.credit === 0) topUp(true); // the batch was used up: ask again, still draining
      } else {
        if (receiver.credit <= WINDOW / 2 || receiver.credit < Math.min(WINDOW, remaining())) topUp();
        armIdle();
      }
    });
    receiver.on('receiver_drained', () => {
      if (!draining || finished) return;
      // rhea has taken delivery-count and credit (0) from the flow. A flow that answers an
      // older grant (the sender used that credit up while more was on its way) is not the
      // end: put the outstanding credit back and wait for the answer to the latest grant.
      if (receiver.delivery_count < limit) { receiver.credit = limit - receiver.delivery_count; armDrainWait(); return; }
      finish();
    });
    receiver.on('receiver_close', () => {
      if (receiver.error) finish(new ToolError(describeError(receiver.error)));
      else finish(); // e.g. the end of a sow command
    });
    conn.connection.on('disconnected', () => finish(new ToolError(connectionLost(conn.connection))));
    onStdoutClosed(() => finish());
    const stop = () => finish();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);

    if (!o.forever && o.idleMs === 0) startDrain();
    else { topUp(); armIdle(); }
  });
}

function print(m: any, cmd: string | undefined, o: ConsumeOptions): void {
  const ann = m.message_annotations ?? {};
  if (o.json) {
    const obj = messageObject(m);
    // longs beyond 2^53 in the checkpoint (tsNsecs) as decimal strings, not as their 8 bytes
    if (ann['x-opt-tm-checkpoint'] !== undefined) obj.annotations['x-opt-tm-checkpoint'] = checkpointPlain(ann['x-opt-tm-checkpoint']);
    process.stdout.write(JSON.stringify(obj) + '\n');
    return;
  }
  const lines: string[] = [];
  if (o.headers) lines.push(...headerLines(m));
  const line = commandLine(cmd, ann);
  if (line !== undefined) lines.push(line);
  else if (o.content) lines.push(bodyText(m.body));
  if (lines.length) process.stdout.write(lines.join('\n') + '\n');
}

main(run);
