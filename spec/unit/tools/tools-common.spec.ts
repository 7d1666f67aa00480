/**
 * The shared pieces of spout, drain and tidemark-config (tools/common): durations and
 * command lines in text output, the checkpoint's JSON and wire forms, stale temporary
 * checkpoint files, integer flags, and what a failed connection says.
 */
import { expect } from 'chai';
import { mkdtempSync, writeFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { formatDuration, commandLine } from '../../../tools/common/format.js';
import { checkpointPlain, typedCheckpoint, longPlain, removeStaleTmp, tmpName } from '../../../tools/common/checkpoint.js';
import { intOption, secondsOption } from '../../../tools/common/cli.js';
import { connectPlan, connectFailure } from '../../../tools/common/connection.js';

const long8 = (n: bigint) => { const b = Buffer.alloc(8); b.writeBigInt64BE(n); return b; };

describe('tools/common: text forms', function () {
  it('formatDuration: the largest unit that divides exactly, as queue arguments are written', function () {
    expect(formatDuration(604800000)).to.equal('7d');
    expect(formatDuration(60000)).to.equal('1m');
    expect(formatDuration(5400000)).to.equal('90m');
    expect(formatDuration(500)).to.equal('500ms');
    expect(formatDuration(1500)).to.equal('1500ms');
    expect(formatDuration(3000)).to.equal('3s');
    expect(formatDuration(0)).to.equal('0s');
    expect(formatDuration('7d')).to.equal('7d');
  });

  it('commandLine: records print their body; markers, deletes and OOF a line of their own', function () {
    const sym = (s: string) => s;
    expect(commandLine(undefined, {})).to.equal(undefined);
    expect(commandLine('publish', { 'x-opt-tm-key': '5' })).to.equal(undefined);
    expect(commandLine('sow', { 'x-opt-tm-key': '5' })).to.equal(undefined);
    expect(commandLine('delete', { 'x-opt-tm-key': '5' })).to.equal('-- delete key=5 --');
    expect(commandLine('oof', { 'x-opt-tm-key': '2', 'x-opt-tm-oof-reason': sym('match') })).to.equal('OOF(match) key=2');
    expect(commandLine('group_begin', {})).to.equal('-- group_begin --');
    expect(commandLine('group_begin', { 'x-opt-tm-checkpoint': { consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: 9 } })).to.equal('-- group_begin --');
    expect(commandLine('group_begin', { 'x-opt-tm-checkpoint': { consumption_mode: 'BOOTSTRAP_SNAPSHOT', snapshot_offset: 'K7' } })).to.equal('-- group_begin (resumed after key K7) --');
    expect(commandLine('group_begin', { 'x-opt-tm-checkpoint': { consumption_mode: 'BOOTSTRAP_SNAPSHOT', bootstrap_since_scn: 42 } })).to.equal('-- group_begin (changes since SCN 42) --');
    expect(commandLine('group_begin', { 'x-opt-tm-checkpoint': { consumption_mode: 'BOOTSTRAP_SNAPSHOT', bootstrap_since_scn: 0 } })).to.equal('-- group_begin --');
    expect(commandLine('group_end', { 'x-opt-tm-scn': 4 })).to.equal('-- group_end --');
    expect(commandLine('completed', {})).to.equal('-- completed --');
    expect(commandLine('future_cmd', {})).to.equal('-- future_cmd --');
  });
});

describe('tools/common: checkpoints', function () {
  it('longPlain / checkpointPlain: numbers when exact, decimal strings beyond 2^53 (from rhea\'s 8 bytes)', function () {
    expect(longPlain(42)).to.equal(42);
    expect(longPlain(long8(1796086256855000064n))).to.equal('1796086256855000064');
    expect(longPlain(long8(-1n))).to.equal(-1);
    expect(longPlain(1796086256855000064n)).to.equal('1796086256855000064');
    const cp = checkpointPlain({ consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: 59, tsNsecs: long8(1796086256855000064n), snapshot_offset: '11' });
    expect(cp).to.deep.equal({ consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: 59, tsNsecs: '1796086256855000064', snapshot_offset: '11' });
  });

  it('typedCheckpoint: string fields stay strings whatever they look like; integer fields become longs, exactly', function () {
    const t = typedCheckpoint({ consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: 59, prevScn: '59', windowOffset: -1, snapshot_offset: '11', tsNsecs: '1796086256855000064' });
    expect(t.snapshot_offset).to.equal('11');
    expect(t.consumption_mode).to.equal('BOOTSTRAP_SNAPSHOT');
    for (const k of ['windowScn', 'prevScn', 'windowOffset', 'tsNsecs']) expect((t[k] as any).type.name, k).to.match(/^(Small)?Long$/);
    expect((t.windowScn as any).value).to.equal(59);
    expect((t.prevScn as any).value).to.equal(59);
    expect(Buffer.from((t.tsNsecs as any).value).readBigInt64BE(0)).to.equal(1796086256855000064n);
    expect(() => typedCheckpoint({ windowScn: 'x' })).to.throw(/windowScn must be an integer/);
    expect(() => typedCheckpoint({ tsNsecs: '99999999999999999999' })).to.throw(/does not fit a long/);
  });

  it('removeStaleTmp: removes FILE.tmp-<pid> of processes that are gone, keeps the live ones and other files', function () {
    const dir = mkdtempSync(path.join(tmpdir(), 'tm-cp-'));
    try {
      const file = path.join(dir, 'cp.json');
      for (const name of ['cp.json', 'cp.json.tmp-111', 'cp.json.tmp-222', 'cp.json.tmp-abc', 'other.json.tmp-111', `cp.json.tmp-${process.pid}`]) writeFileSync(path.join(dir, name), '');
      const removed = removeStaleTmp(file, (pid) => pid === 222);
      expect(removed.sort()).to.deep.equal(['cp.json.tmp-111', `cp.json.tmp-${process.pid}`].sort());
      expect(readdirSync(dir).sort()).to.deep.equal(['cp.json', 'cp.json.tmp-222', 'cp.json.tmp-abc', 'other.json.tmp-111'].sort());
      expect(tmpName(file, 7)).to.equal(`${file}.tmp-7`);
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });
});

describe('tools/common: flags and connection failures', function () {
  it('integer and seconds flags name what was typed', function () {
    expect(intOption('top-n', '5')).to.equal(5);
    expect(intOption('count', 0)).to.equal(0);
    expect(() => intOption('top-n', 'abc')).to.throw("--top-n expects an integer >= 0, got 'abc'");
    expect(() => intOption('top-n', '')).to.throw("--top-n expects an integer >= 0, got ''");
    expect(() => intOption('c', ['1', 'x'])).to.throw("got '1,x'");
    expect(() => secondsOption('timeout', 'soon')).to.throw("--timeout expects a number of seconds >= 0, got 'soon'");
  });

  it('connectFailure: what happened and what to do, for each way authentication fails', function () {
    const plain = connectPlan({ broker: 'amqp://dev:pw@127.0.0.1:5672' });
    const none = connectPlan({ broker: '127.0.0.1:5672' });
    const anon = connectPlan({ broker: '127.0.0.1:5672', connectionOptions: '{sasl_mechanisms: ANONYMOUS}' });
    expect([plain.mechanism, plain.user, none.mechanism, anon.mechanism]).to.deep.equal(['PLAIN', 'dev', 'none', 'ANONYMOUS']);
    expect(connectFailure(none, { name: 'ProtocolError', message: 'SASL layer not enabled' }, 'lost'))
      .to.match(/^cannot connect to amqp:\/\/127\.0\.0\.1:5672: authentication required: the broker does not allow anonymous connections; give user\/password in the URL/);
    const refused = { condition: 'amqp:unauthorized-access', description: 'Failed to authenticate: 1' };
    expect(connectFailure(plain, refused, 'refused')).to.equal("authentication failed at amqp://127.0.0.1:5672 for user 'dev' (SASL PLAIN, outcome auth): wrong user name or password");
    expect(connectFailure(anon, refused, 'refused')).to.match(/^authentication failed at amqp:\/\/127\.0\.0\.1:5672: the broker refused SASL ANONYMOUS \(outcome auth\): it does not allow anonymous connections; give/);
    expect(connectFailure(anon, { condition: 'amqp:unauthorized-access', description: 'No suitable mechanism; server supports PLAIN' }, 'refused'))
      .to.match(/does not allow anonymous connections \(it offers SASL PLAIN\); give/);
    expect(connectFailure(plain, { condition: 'amqp:internal-error', description: 'Failed to authenticate: 2' }, 'refused')).to.match(/could not check the credentials \(SASL outcome sys\)/);
    expect(connectFailure(plain, {}, 'refused')).to.equal('connection to amqp://127.0.0.1:5672 refused: the broker closed it without giving a reason');
    expect(connectFailure(plain, { condition: 'amqp:resource-limit-exceeded', description: 'too many connections' }, 'refused')).to.equal('connection to amqp://127.0.0.1:5672 refused: amqp:resource-limit-exceeded: too many connections');
    expect(connectFailure(plain, { message: 'connect ECONNREFUSED 127.0.0.1:5672' }, 'lost')).to.equal('cannot connect to amqp://127.0.0.1:5672: connect ECONNREFUSED 127.0.0.1:5672');
  });
});
