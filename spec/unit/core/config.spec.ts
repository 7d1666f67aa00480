import { expect } from 'chai';
import { loadConfig } from '../../../lib/core/config.js';

// README "Configuration": a value the broker cannot run with is refused at load, naming the key.
describe('config: limits the broker could not run with', function () {
  const refused: Array<[string, Record<string, unknown>, RegExp]> = [
    ['maxFrameSize under AMQP\'s 512', { limits: { maxFrameSize: 100 } }, /^config\.limits\.maxFrameSize: expected an integer from 512/],
    ['maxFrameSize not an integer', { limits: { maxFrameSize: 1.5 } }, /^config\.limits\.maxFrameSize: .*got 1\.5/],
    ['no sessions', { limits: { maxSessionsPerConnection: 0 } }, /^config\.limits\.maxSessionsPerConnection: expected an integer from 1 to 65536/],
    ['more sessions than 16-bit channels', { limits: { maxSessionsPerConnection: 70000 } }, /^config\.limits\.maxSessionsPerConnection: .*got 70000/],
    ['no connections', { limits: { maxConnections: 0 } }, /^config\.limits\.maxConnections: expected an integer from 1/],
    ['no producer credit', { limits: { senderCredit: 0 } }, /^config\.limits\.senderCredit: expected an integer from 1/],
    ['no message fits', { limits: { maxMessageSize: 0 } }, /^config\.limits\.maxMessageSize/],
    ['an idle time-out the broker refuses from peers', { limits: { idleTimeoutMs: 50 } }, /^config\.limits\.idleTimeoutMs: expected an integer from 200 .* or 0 \(no idle time-out\)/],
    ['an empty commit batch', { commit: { maxBatch: 0 } }, /^config\.commit\.maxBatch/],
    // Node fires a timer past 2^31 - 1 ms after 1 ms: re-armed, it spun every millisecond (session 22).
    ['a compaction quiet time past a timer', { compaction: { idleMs: 3e9 } }, /^config\.compaction\.idleMs: expected an integer from 1 to 2147483647 or 0 \(off\)/],
    ['a memory quiet time past a timer', { memory: { idleMs: 3e9 } }, /^config\.memory\.idleMs: expected an integer from 1 to 2147483647 or 0 \(off\)/],
    ['a negative quiet time', { memory: { idleMs: -1 } }, /^config\.memory\.idleMs/],
    ['allowedHosts not a list of names', { http: { allowedHosts: 'example.com' } }, /^config\.http\.allowedHosts: expected an array of host names/],
  ];
  for (const [what, over, want] of refused) {
    it(`refuses ${what}`, function () {
      expect(() => loadConfig(undefined, over)).to.throw(want);
    });
  }

  it('keeps the values that mean "off" and the bounds themselves', function () {
    const c = loadConfig(undefined, { limits: { idleTimeoutMs: 0, openTimeoutMs: 0, maxPendingBytesPerConnection: 0, maxFrameSize: 512, maxSessionsPerConnection: 65536 }, http: { allowedHosts: ['broker.example'] } });
    expect(c.limits.idleTimeoutMs).to.equal(0);
    expect(loadConfig(undefined, { compaction: { idleMs: 0 }, memory: { idleMs: 0 } }).memory.idleMs, '0 = off').to.equal(0);
    expect(c.limits.maxFrameSize).to.equal(512);
    expect(c.limits.maxSessionsPerConnection).to.equal(65536);
    expect(c.http.allowedHosts).to.deep.equal(['broker.example']);
    expect(loadConfig().http.allowedHosts).to.deep.equal([]);
  });
  it('a tls listener without a port takes 5671, the amqps port (it listened on a random one)', () => {
    expect(loadConfig(undefined, { tls: { key: 'k.pem', cert: 'c.pem' } }).tls?.port).to.equal(5671);
    expect(loadConfig(undefined, { tls: { key: 'k.pem', cert: 'c.pem', port: 0 } }).tls?.port, '0: any free port').to.equal(0);
    expect(loadConfig(undefined, {}).tls).to.equal(null);
  });
});
