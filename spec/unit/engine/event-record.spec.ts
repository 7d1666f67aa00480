/** lib/core/engine/event-record.ts: the log/SOW/history row format, current (v2) and older (v1). */
import { expect } from 'chai';
import { encodeEvent, decodeEvent, eventTs, eventIsDelete, eventMessage, eventKept, type EventMeta } from '../../../lib/core/engine/event-record.js';

const msg = Buffer.from([0x00, 0x53, 0x77, 0xa1, 0x02, 0x68, 0x69]); // amqp-value "hi"

/** A version-1 row as the first brokers wrote it: JSON meta. */
function v1(meta: EventMeta, message: Buffer): Buffer {
  const m = Buffer.from(JSON.stringify(meta), 'utf8');
  const out = Buffer.alloc(5 + m.length + message.length);
  out[0] = 1; out.writeUInt32BE(m.length, 1); m.copy(out, 5); message.copy(out, 5 + m.length);
  return out;
}

describe('event records', () => {
  const cases: EventMeta[] = [
    { ts: 1767225600000 },
    { ts: 1767225600000.5, op: 'publish', key: 'k1' },
    { ts: 1, op: 'delta', key: 'ünï/cødé key', w: 9007199254740991 },
    { ts: 2, op: 'delete', key: '', exp: 1767225601234, w: 12, expired: true },
    { ts: 3, op: 'publish', exp: 4 },
  ];

  for (const meta of cases) {
    it(`round-trips ${JSON.stringify(meta)}`, () => {
      const row = encodeEvent(meta, msg);
      expect(row[0]).to.equal(2);
      const back = decodeEvent(row);
      expect(back.meta).to.deep.equal(meta);
      expect(Buffer.compare(back.message, msg)).to.equal(0);
      expect(eventTs(row)).to.equal(meta.ts);
      expect(eventIsDelete(row)).to.equal(meta.op === 'delete');
      expect(Buffer.compare(eventMessage(row), msg)).to.equal(0);
    });
  }

  it('reads version-1 rows (JSON meta) written by earlier brokers', () => {
    const meta: EventMeta = { ts: 5, op: 'delete', key: 'a', w: 7 };
    const row = v1(meta, msg);
    expect(decodeEvent(row).meta).to.deep.equal(meta);
    expect(Buffer.compare(decodeEvent(row).message, msg)).to.equal(0);
    expect(eventTs(row)).to.equal(5);
    expect(eventIsDelete(row)).to.equal(true);
    expect(Buffer.compare(eventMessage(row), msg)).to.equal(0);
  });

  it('refuses an unknown version and an unknown op', () => {
    const row = encodeEvent({ ts: 1 }, msg);
    row[0] = 9;
    expect(() => decodeEvent(row)).to.throw(/unknown event record version 9/);
    expect(() => encodeEvent({ ts: 1, op: 'upsert' }, msg)).to.throw(/unknown op/);
  });

  it('carries a history row\'s `kept` time (session 23) after the other fields; a row without it has none', () => {
    for (const meta of [{ ts: 5, op: 'publish', kept: 1_780_000_000_123 }, { ts: 5, op: 'delete', kept: 7 }, { ts: 5, op: 'publish', key: 'k\u00e9', w: 9, exp: 11, kept: 3 }] as EventMeta[]) {
      const body = meta.op === 'delete' ? Buffer.alloc(0) : msg;
      const row = encodeEvent(meta, body);
      expect(decodeEvent(row).meta).to.deep.equal(meta);
      expect(eventKept(row)).to.equal(meta.kept);
      expect(Buffer.compare(eventMessage(row), body)).to.equal(0);
      expect(eventTs(row)).to.equal(5);
      expect(eventIsDelete(row)).to.equal(meta.op === 'delete');
    }
    expect(eventKept(encodeEvent({ ts: 5, op: 'publish' }, msg))).to.equal(undefined);
    expect(eventKept(v1({ ts: 5, op: 'publish' }, msg))).to.equal(undefined);
  });

  it('keeps an empty message (a history tombstone)', () => {
    const row = encodeEvent({ ts: 1, op: 'delete' }, Buffer.alloc(0));
    expect(decodeEvent(row).message.length).to.equal(0);
  });
});
