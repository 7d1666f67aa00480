/**
 * The tools against a broker that does not allow anonymous connections (auth.anonymous:
 * false): one `Error: …` line that says what went wrong and what to do, never rhea's own
 * console output ("[connection-1] error on read: ProtocolError: SASL layer not enabled …")
 * or an empty reason ("refused: ").
 */
import { expect } from 'chai';
import { useBroker } from '../support/broker.js';
import { runTool, lines } from '../support/tools.js';

const T = { timeoutMs: 20000 };

describe('tools: authentication errors', function () {
  this.timeout(30000);
  const b = useBroker({ auth: { anonymous: false, users: { dev: { password: 'devpass' } } } });
  const hostPort = () => b.get().url.replace(/^amqp:\/\//, '');
  const oneLine = (stderr: string) => { expect(lines(stderr), stderr).to.have.length(1); return stderr; };

  it('no credentials: authentication required, with how to give them', async function () {
    for (const tool of [['tidemark-config', 'queues'], ['drain', 'q'], ['spout', 'q']]) {
      const res = await runTool(tool[0], ['-b', b.get().url, ...tool.slice(1)], T);
      expect(res.code, tool[0]).to.equal(1);
      expect(oneLine(res.stderr), tool[0]).to.equal(`Error: cannot connect to ${b.get().url}: authentication required: the broker does not allow anonymous connections; `
        + 'give user/password in the URL (amqp://user:pass@host:port) or with --connection-options "{username: U, password: P}"\n');
    }
  });

  it('a wrong password: authentication failed, naming the user', async function () {
    const res = await runTool('tidemark-config', ['-b', `amqp://dev:wrong@${hostPort()}`, 'queues'], T);
    expect(res.code).to.equal(1);
    expect(oneLine(res.stderr)).to.equal(`Error: authentication failed at ${b.get().url} for user 'dev' (SASL PLAIN, outcome auth): wrong user name or password\n`);
    const viaOptions = await runTool('drain', ['-b', b.get().url, '--connection-options', '{username: nobody, password: x}', 'q'], T);
    expect(oneLine(viaOptions.stderr)).to.match(/^Error: authentication failed at .* for user 'nobody' \(SASL PLAIN, outcome auth\): wrong user name or password$/m);
  });

  it('SASL ANONYMOUS asked for explicitly: refused with the reason, not an empty one', async function () {
    const res = await runTool('tidemark-config', ['-b', b.get().url, '--connection-options', '{sasl_mechanisms: ANONYMOUS}', 'queues'], T);
    expect(res.code).to.equal(1);
    expect(oneLine(res.stderr)).to.match(/^Error: authentication failed at amqp:\/\/127\.0\.0\.1:\d+: the broker does not allow anonymous connections .*; give user\/password in the URL/);
    expect(res.stderr).to.not.match(/refused: \n/);
  });

  it('the right credentials, in the URL (both forms) or in --connection-options, connect', async function () {
    for (const args of [['-b', `amqp://dev:devpass@${hostPort()}`], ['-b', `dev/devpass@${hostPort()}`], ['-b', b.get().url, '--connection-options', '{username: dev, password: devpass}']]) {
      const res = await runTool('tidemark-config', [...args, 'queues', '--json'], T);
      expect(res.code, `${args.join(' ')}: ${res.stderr}`).to.equal(0);
    }
  });
});
