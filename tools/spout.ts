/**
 * spout ADDRESS: sends messages to a Tidemark (or any AMQP 1.0) node, with Qpid spout's
 * flags plus the SOW operations (tools.md). Exits after every message is settled; any
 * outcome other than accepted is listed and makes the exit code 1.
 */
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { parseAddress, addressToLinkOptions } from '../lib/address/index.js';
import { main, commonOptions, ToolError, usageError, singleValues, keyValues, intOption, secondsOption, errorMessage, stdoutError, isClosedPipe, onStdoutClosed } from './common/cli.js';
import { connect, openSender, typedTerminus, describeError, connectionLost, r } from './common/connection.js';
import { Outcomes } from './common/outcomes.js';
import { bodyText } from './common/format.js';

const SETTLE_TIMEOUT_MS = 30000;

async function run(): Promise<number> {
  const cli = yargs(hideBin(process.argv))
    .scriptName('spout')
    .usage('$0 [options] ADDRESS\n\nSends messages to ADDRESS (a Qpid address: name[/subject][; {options}]).')
    .command('$0 <address>', false)
    .positional('address', { type: 'string', describe: 'Qpid address' })
    .options(commonOptions)
    .options({
      count: { alias: 'c', type: 'string', describe: 'number of messages (default 1; with --content-stdin: every line; 0 = until interrupted or --timeout)', requiresArg: true },
      timeout: { alias: 't', type: 'string', default: '0', describe: 'stop sending after this many seconds (0 = no limit)', requiresArg: true },
      durable: { alias: 'd', type: 'boolean', default: false, describe: 'mark messages durable' },
      id: { alias: 'i', type: 'string', describe: 'id for spout-id (default: a UUID)', requiresArg: true },
      'reply-to': { type: 'string', describe: 'reply-to address', requiresArg: true },
      property: { alias: 'P', type: 'string', describe: 'application property k=v (repeatable; integers sent as integers)', requiresArg: true },
      map: { alias: 'M', type: 'string', describe: 'map body entry k=v (repeatable; integers sent as integers)', requiresArg: true },
      content: { type: 'string', describe: 'message content (a string body)', requiresArg: true },
      'content-stdin': { type: 'boolean', describe: 'read the content from stdin, one message per line' },
      ttl: { type: 'string', describe: 'time to live in milliseconds', requiresArg: true },
      print: { type: 'boolean', default: false, describe: 'print the body of each message sent, as drain prints it (strings as they are, -M maps as JSON)' },
      delete: { type: 'boolean', describe: 'SOW delete: x-opt-tm-op = delete' },
      delta: { type: 'boolean', describe: 'SOW delta merge: x-opt-tm-op = delta' },
      key: { type: 'string', describe: 'SOW key (x-opt-tm-key)', requiresArg: true },
      json: { type: 'boolean', describe: 'content is JSON: validate it, send with content-type application/json' },
    })
    .conflicts('delete', 'delta')
    .conflicts('content', 'content-stdin')
    .conflicts('map', 'content')
    .conflicts('map', 'content-stdin')
    .conflicts('map', 'json')
    .example('$0 -c 10 q', 'send 10 messages to queue q')
    .example("$0 --json --content '{\"id\": 1, \"price\": 5}' prices", 'publish a JSON record to a SOW queue')
    .example('$0 --delete --key 1 prices', 'delete the SOW record with key 1')
    .middleware(singleValues(['property', 'map']))
    .strict()
    .help()
    .version(false);
  // (yargs gives fail() its usage object, not the parser: the parser is what knows the options)
  const argv = await cli.fail((msg, err) => { throw usageError(msg, err, cli); }).parseAsync();

  const count = argv.count === undefined ? (argv['content-stdin'] ? 0 : 1) : intOption('count', argv.count);
  const stopAfterMs = secondsOption('timeout', argv.timeout);
  const addrText = String(argv.address);
  const addr = parseAddress(addrText);
  const link = addressToLinkOptions(addr, 'sender');
  const id = argv.id ?? randomUUID();
  const properties = keyValues('--property', argv.property);
  const mapBody = argv.map ? keyValues('--map', argv.map) : undefined;
  const ttl = argv.ttl !== undefined ? intOption('ttl', argv.ttl, 0) : undefined;
  let replyTo: string | undefined;
  if (argv['reply-to'] !== undefined) {
    const rt = parseAddress(argv['reply-to']);
    replyTo = rt.name ?? undefined;
  }
  if (argv.json && argv.content !== undefined) checkJson(argv.content);
  // A delete names its key with --key, or in a body the queue's sow.key reads: with neither,
  // the broker could only say the (empty) body is not JSON.
  if (argv.delete && argv.key === undefined && argv.content === undefined && !argv['content-stdin'] && !argv.map) {
    throw new ToolError('--delete needs the key of the record: --key K, or a body holding it (--json --content \'{"id": ...}\')');
  }

  // contents: fixed, or one per stdin line
  let lines: AsyncIterator<string> | undefined;
  if (argv['content-stdin']) lines = createInterface({ input: process.stdin, crlfDelay: Infinity })[Symbol.asyncIterator]();

  const annotations: Record<string, unknown> = {};
  if (argv.delete) annotations['x-opt-tm-op'] = r.types.wrap_symbol('delete');
  if (argv.delta) annotations['x-opt-tm-op'] = r.types.wrap_symbol('delta');
  if (argv.key !== undefined) annotations['x-opt-tm-key'] = argv.key;

  const build = (n: number, content: string | undefined): any => {
    const m: any = { application_properties: { ...properties, 'spout-id': `${id}:${n}` } };
    if (addr.subject) m.subject = addr.subject;
    if (argv.durable) m.durable = true;
    if (ttl !== undefined) m.ttl = ttl;
    if (replyTo) m.reply_to = replyTo;
    if (Object.keys(annotations).length) m.message_annotations = annotations;
    if (mapBody) m.body = mapBody;
    else if (argv.json) {
      if (content === undefined) throw new ToolError('--json needs --content or --content-stdin');
      checkJson(content, n);
      m.body = content;
      m.content_type = 'application/json';
    } else m.body = content ?? '';
    return m;
  };

  const conn = await connect({ broker: argv.broker, connectionOptions: argv['connection-options'] });
  let interrupted = false;
  process.once('SIGINT', () => { interrupted = true; });
  process.once('SIGTERM', () => { interrupted = true; });
  // --print into a pipe whose reader went away: stop sending, as if interrupted, and still
  // wait for the outcomes of what was sent (exit 0 if all were accepted)
  let stdoutClosed = false;
  onStdoutClosed(() => { interrupted = true; stdoutClosed = true; });
  try {
    const opts: Record<string, unknown> = { target: typedTerminus(link.target), autosettle: true };
    if (link.source) opts.source = link.source;
    if (link.name) opts.name = link.name;
    if (link.snd_settle_mode !== undefined) opts.snd_settle_mode = link.snd_settle_mode;
    const sender = await openSender(conn, opts);
    const presettled = link.snd_settle_mode === 1;

    // only the count of accepted ones is kept: `-c 0` runs in bounded memory
    const outcomes = new Outcomes();
    let sent = 0;
    let linkError: string | undefined;
    /** a --content-stdin line that cannot be sent (--json: not JSON): stop there, after the outcomes of those sent */
    let inputError: Error | undefined;
    let wake: (() => void) | undefined;
    const poke = () => { const w = wake; wake = undefined; w?.(); };
    const record = (ctx: any, state: string) => {
      const d = ctx.delivery;
      if (d.__n === undefined || d.__done) return;
      d.__done = true;
      outcomes.record(d.__n, state, d.remote_state?.error);
      poke();
    };
    for (const s of ['accepted', 'rejected', 'released', 'modified']) sender.on(s, (ctx: any) => record(ctx, s));
    sender.on('sendable', poke);
    sender.on('sender_close', () => { linkError = describeError(sender.error); poke(); });
    sender.on('sender_error', () => { linkError = describeError(sender.error); poke(); });
    conn.connection.on('disconnected', () => { linkError ??= connectionLost(conn.connection); poke(); });
    const waitEvent = (ms: number) => new Promise<void>((res) => { const t = setTimeout(() => { wake = undefined; res(); }, ms); wake = () => { clearTimeout(t); res(); }; });

    const started = Date.now();
    for (let n = 0; count === 0 || n < count; n++) {
      if (interrupted || linkError) break;
      if (stopAfterMs > 0 && Date.now() - started >= stopAfterMs) break;
      let content: string | undefined = argv.content;
      if (lines) {
        const next = await lines.next();
        if (next.done) break;
        content = next.value;
      }
      let msg: any;
      try { msg = build(n, content); } catch (e) {
        if (sent === 0) throw e;
        inputError = e as Error;
        break;
      }
      while (!sender.sendable() && !linkError && !interrupted) await waitEvent(stopAfterMs > 0 ? Math.max(1, stopAfterMs - (Date.now() - started)) : 1000);
      if (linkError || interrupted) break;
      const d = sender.send(msg);
      d.__n = n;
      sent++;
      if (presettled) outcomes.settled++;
      if (argv.print && !stdoutClosed) {
        process.stdout.write(bodyText(msg.body) + '\n');
        const outErr = stdoutError();
        if (isClosedPipe(outErr)) { interrupted = true; stdoutClosed = true; } else if (outErr) throw new ToolError(`cannot write to stdout: ${errorMessage(outErr)}`);
      }
      if (count === 0 || sent % 100 === 0) await new Promise((res) => setImmediate(res));
    }
    const deadline = Date.now() + SETTLE_TIMEOUT_MS;
    while (outcomes.settled < sent && !linkError && Date.now() < deadline) await waitEvent(Math.max(1, deadline - Date.now()));

    for (const line of outcomes.lines(id)) process.stderr.write(line + '\n');
    const unsettled = sent - outcomes.settled;
    if (linkError) throw new ToolError(unsettled > 0 ? `${linkError} (${unsettled} of ${sent} messages sent were left unsettled)` : linkError);
    if (unsettled > 0) throw new ToolError(`${unsettled} of ${sent} messages not settled within ${SETTLE_TIMEOUT_MS / 1000}s${inputError ? `; then ${errorMessage(inputError)}` : ''}`);
    if (inputError) {
      throw new ToolError(`${errorMessage(inputError)} (the ${sent} before it were sent${outcomes.notAccepted ? `, ${outcomes.notAccepted} of them not accepted` : ' and accepted'})`);
    }
    if (outcomes.notAccepted) throw new ToolError(`${outcomes.notAccepted} of ${sent} messages not accepted`);
    return 0;
  } finally {
    await conn.close();
  }
}

function checkJson(text: string, n?: number): void {
  try { JSON.parse(text); } catch (e) {
    throw new ToolError(`--json: ${n === undefined ? 'content' : `line ${n + 1} of stdin (message ${n})`} is not valid JSON: ${errorMessage(e)}`);
  }
}

main(run);
