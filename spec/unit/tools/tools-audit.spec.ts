/**
 * The tools audit (docs/robustness.md 14, "Tools"): spout's outcome record stays bounded,
 * several drains share one checkpoint file (lock, re-read, replace only their own entry),
 * single-value flags given twice are refused, `transport` in --connection-options wins over
 * the URL, and a connection the broker closed says why.
 */
import { expect } from 'chai';
import { mkdtempSync, writeFileSync, readFileSync, existsSync, rmSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import yargs from 'yargs';
import { Outcomes } from '../../../tools/common/outcomes.js';
import { writeCheckpoints, prepareCheckpoints, commitCheckpoints, abandonCheckpoints, lockName } from '../../../tools/common/checkpoint.js';
import { singleValues, ToolError } from '../../../tools/common/cli.js';
import { connectPlan, connectionLost } from '../../../tools/common/connection.js';

describe('tools audit: spout outcomes', function () {
  it('keeps only what is not accepted: 200000 accepted outcomes hold no entry each', function () {
    const o = new Outcomes();
    for (let n = 0; n < 200000; n++) o.record(n, n === 7 ? 'rejected' : 'accepted', n === 7 ? { condition: 'amqp:x', description: 'no' } : undefined);
    expect(o.settled).to.equal(200000);
    expect(o.notAccepted).to.equal(1);
    expect(o.bad).to.have.length(1);
    expect(o.lines('id')).to.deep.equal(['message id:7 rejected: amqp:x: no']);
  });

  it('lists at most `keep` of those not accepted, in message order, and counts the rest', function () {
    const o = new Outcomes(3);
    for (const n of [5, 2, 9, 1, 4]) o.record(n, 'released');
    expect(o.bad).to.have.length(3);
    expect(o.lines('s')).to.deep.equal(['message s:2 released', 'message s:5 released', 'message s:9 released', '(and 2 more not accepted, not listed)']);
  });
});

describe('tools audit: a checkpoint file shared by several drains', function () {
  let dir: string;
  let file: string;
  beforeEach(function () { dir = mkdtempSync(path.join(tmpdir(), 'tm-cp-')); file = path.join(dir, 'cp.json'); });
  afterEach(function () { rmSync(dir, { recursive: true, force: true }); });
  const read = () => JSON.parse(readFileSync(file, 'utf8'));

  it('a write replaces only its own queue entry, in the file as it is now (not as read at start)', function () {
    writeCheckpoints(file, { qa: { windowScn: 1 } });
    writeCheckpoints(file, { qb: { windowScn: 10 } }); // another drain
    writeCheckpoints(file, { qa: { windowScn: 2 } });
    expect(read()).to.deep.equal({ qa: { windowScn: 2 }, qb: { windowScn: 10 } });
    expect(existsSync(lockName(file)), 'the lock is released').to.equal(false);
  });

  it('prepare holds the lock until commit or abandon; an abandoned write leaves the file and no lock', function () {
    writeCheckpoints(file, { qa: { windowScn: 1 } });
    writeFileSync(lockName(file), '12345\n'); // a live drain's lock
    expect(() => prepareCheckpoints(file, { qb: { windowScn: 3 } }, { waitMs: 50, isAlive: () => true }))
      .to.throw(ToolError, /stayed locked by process 12345 .*if no drain is running, remove .*cp\.json\.lock$/);
    rmSync(lockName(file));
    const p = prepareCheckpoints(file, { qa: { windowScn: 2 } });
    expect(readFileSync(lockName(file), 'utf8')).to.equal(`${process.pid}\n`);
    abandonCheckpoints(p);
    abandonCheckpoints(p); // twice: no effect (the lock may be another drain's by then)
    expect(existsSync(lockName(file))).to.equal(false);
    expect(read()).to.deep.equal({ qa: { windowScn: 1 } });
    const q = prepareCheckpoints(file, { qb: { windowScn: 3 } });
    commitCheckpoints(q);
    expect(read()).to.deep.equal({ qa: { windowScn: 1 }, qb: { windowScn: 3 } });
  });

  it('takes over the lock of a drain that was killed (its pid is gone), and an old empty one', function () {
    writeFileSync(lockName(file), '999999999\n');
    writeCheckpoints(file, { qa: { windowScn: 4 } }, { isAlive: () => false, waitMs: 1000 });
    expect(read()).to.deep.equal({ qa: { windowScn: 4 } });
    expect(existsSync(lockName(file))).to.equal(false);
    writeFileSync(lockName(file), '');
    const old = new Date(Date.now() - 10000);
    utimesSync(lockName(file), old, old);
    writeCheckpoints(file, { qb: { windowScn: 5 } }, { waitMs: 1000 });
    expect(read()).to.deep.equal({ qa: { windowScn: 4 }, qb: { windowScn: 5 } });
  });

  it('a file that is not a JSON object is an error, and the lock is released', function () {
    writeFileSync(file, '[1]');
    expect(() => writeCheckpoints(file, { qa: {} })).to.throw(ToolError, /must hold a JSON object/);
    expect(existsSync(lockName(file))).to.equal(false);
  });
});

describe('tools audit: single-value flags', function () {
  const parse = (args: string[], repeatable: string[]) => {
    const y = yargs(args).options({
      content: { type: 'string' }, count: { alias: 'c', type: 'string' }, 'reply-to': { type: 'string' },
      property: { alias: 'P', type: 'string' }, json: { type: 'boolean' },
    }).middleware(singleValues(repeatable)).fail((msg, err) => { throw err ?? new Error(msg); }).strict();
    return y.parse();
  };

  it('an option given twice is an error naming it as declared; repeatable ones and booleans are not', function () {
    expect(() => parse(['--content', 'a', '--content', 'b'], ['property'])).to.throw(ToolError, '--content was given 2 times ("a", "b"): give it once');
    expect(() => parse(['-c', '1', '--count', '2'], ['property'])).to.throw(ToolError, '-c/--count was given 2 times ("1", "2"): give it once');
    expect(() => parse(['--reply-to', 'a', '--reply-to', 'b'], [])).to.throw(ToolError, '--reply-to was given 2 times');
    expect((parse(['-P', 'a=1', '--property', 'b=2', '--json', '--json'], ['property']) as any).property).to.deep.equal(['a=1', 'b=2']);
  });
});

describe('tools audit: connection', function () {
  it('transport in --connection-options wins over the URL scheme, and messages name the scheme used', function () {
    const ssl = connectPlan({ broker: 'amqp://127.0.0.1:5672', connectionOptions: '{transport: ssl}' });
    expect(ssl.options.transport).to.equal('tls');
    expect(ssl.where).to.equal('amqps://127.0.0.1:5672');
    const tcp = connectPlan({ broker: 'amqps://127.0.0.1:5671', connectionOptions: '{transport: tcp}' });
    expect(tcp.options.transport).to.equal(undefined);
    expect(tcp.where).to.equal('amqp://127.0.0.1:5671');
    expect(connectPlan({ broker: 'amqps://127.0.0.1' }).where).to.equal('amqps://127.0.0.1:5671');
  });

  it('a connection the broker closed with an error says so, with the condition', function () {
    expect(connectionLost({ remote: { close: { error: { condition: 'amqp:connection:forced', description: 'the broker is shutting down' } } } }))
      .to.equal('the broker closed the connection: amqp:connection:forced: the broker is shutting down');
    expect(connectionLost({ remote: {} })).to.equal('disconnected from the broker');
  });
});
