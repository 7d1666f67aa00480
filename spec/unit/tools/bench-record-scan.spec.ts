/**
 * The bench's record scan (tools/bench/lib/record-scan.ts) reads `x-opt-tm-cmd` and
 * `x-opt-tm-scn` as rhea's full decode does, skips every other section and annotation by its
 * size, and hands anything it does not expect back to the full decode (undefined).
 */
import { expect } from 'chai';
import { createRequire } from 'node:module';
import { scanRecord, withRecordScan } from '../../../tools/bench/lib/record-scan.js';
import { skipAmqpValue } from '../../../lib/codec/message-bytes.js';

const rhea = createRequire(import.meta.url)('rhea');
const types = rhea.types;

/** What the bench reads from a message: its two annotations as rhea gives them. */
function viaRhea(b: Buffer): { cmd: unknown; scn: unknown } {
  const m = rhea.message.decode(b);
  const a = m.message_annotations ?? {};
  return { cmd: a['x-opt-tm-cmd'], scn: a['x-opt-tm-scn'] === undefined ? undefined : Number(a['x-opt-tm-scn']) };
}
function viaScan(b: Buffer): { cmd: unknown; scn: unknown } {
  const m = scanRecord(b);
  expect(m, 'scanned, not handed back').to.not.equal(undefined);
  const a = m!.message_annotations ?? {};
  return { cmd: a['x-opt-tm-cmd'], scn: a['x-opt-tm-scn'] };
}

describe('bench: record scan', () => {
  const bodies = [rhea.message.data_section(Buffer.from('{"id":"k1","v":' + 'x'.repeat(300) + '}')), '{"id":1}', { a: [1, 2, { b: null }] }, undefined];
  const annotationSets: Array<Record<string, unknown> | undefined> = [
    // a record as Tidemark sends it: five annotations, the SCN as a ulong
    { 'x-opt-tm-cmd': 'sow', 'x-opt-tm-key': 'k1', 'x-opt-tm-scn': types.wrap_ulong(123456789012), 'x-opt-tm-ts': types.wrap_timestamp(Date.UTC(2026, 0, 1)), 'x-opt-tm-qid': 'q1' },
    { 'x-opt-tm-scn': types.wrap_ulong(0), 'x-opt-tm-cmd': 'group_end' },
    { 'x-opt-tm-scn': types.wrap_ulong(200), 'x-opt-tm-cmd': types.wrap_symbol('publish') },
    { 'x-opt-tm-scn': types.wrap_long(-5), 'x-opt-tm-cmd': 'delete' },
    { 'x-opt-tm-scn': types.wrap_uint(70000), other: types.wrap_list([1, 'two', types.wrap_binary(Buffer.alloc(300))]), 'x-opt-tm-cmd': 'x'.repeat(300) },
    { unrelated: 1 },
    undefined,
  ];
  it('reads cmd and scn as rhea does, whatever the other sections', () => {
    let n = 0;
    for (const message_annotations of annotationSets) {
      for (const body of bodies) {
        for (const extra of [{}, { durable: true, ttl: 5000, message_id: 'm1', subject: 's', application_properties: { p: 1, q: 'x' }, footer: { f: 1 } }]) {
          const b = rhea.message.encode({ ...extra, ...(message_annotations ? { message_annotations } : {}), ...(body !== undefined ? { body } : {}) });
          expect(viaScan(b), JSON.stringify({ message_annotations, extra })).to.deep.equal(viaRhea(b));
          n++;
        }
      }
    }
    expect(n).to.equal(annotationSets.length * bodies.length * 2);
  });

  it('skips each value by exactly its encoded size', () => {
    const values = [null, true, 0, 1, 255, 70000, -1, types.wrap_ulong(2 ** 40), types.wrap_double(1.5), types.wrap_timestamp(1), types.wrap_uuid(Buffer.alloc(16, 1)),
      'short', 'x'.repeat(300), types.wrap_symbol('sym'), types.wrap_binary(Buffer.alloc(256)), [], [1, 'a'], { k: 'v' }, types.wrap_array([1, 2, 3], 0x71),
      types.described(types.wrap_ulong(0x77), types.wrap_string('body'))];
    for (const v of values) {
      const w = new types.Writer();
      w.write(types.wrap(v));
      w.write(types.wrap_ubyte(7)); // a sentinel after the value
      const b: Buffer = w.toBuffer();
      const end = skipAmqpValue(b, 0);
      expect(end, JSON.stringify(v)).to.equal(b.length - 2);
      expect(b[end]).to.equal(0x50);
    }
  });

  it('reads a section with a symbolic descriptor; hands back a cut buffer, an unknown constructor, a value of another type', () => {
    const b = rhea.message.encode({ message_annotations: { 'x-opt-tm-cmd': 'sow', 'x-opt-tm-scn': types.wrap_ulong(9) }, body: 'x' });
    expect(scanRecord(b)?.message_annotations).to.deep.equal({ 'x-opt-tm-cmd': 'sow', 'x-opt-tm-scn': 9 });
    const w = new types.Writer();
    w.write(types.described(types.wrap_symbol('amqp:message-annotations:map'), types.wrap_map({ 'x-opt-tm-cmd': 'sow' })));
    expect(scanRecord(w.toBuffer())?.message_annotations).to.deep.equal({ 'x-opt-tm-cmd': 'sow' });
    expect(scanRecord(b.subarray(0, 12))).to.equal(undefined);
    expect(scanRecord(rhea.message.encode({ message_annotations: { 'x-opt-tm-cmd': 5 } }))).to.equal(undefined);
    expect(scanRecord(Buffer.from([0x00, 0x53, 0x70, 0x3f]))).to.equal(undefined);
  });

  it('is rhea\'s decode only while the workload runs, and falls back to the full decode', async () => {
    const full = rhea.message.decode;
    const unread = rhea.message.encode({ message_annotations: { 'x-opt-tm-cmd': 5 }, body: 'b' });
    const got = await withRecordScan(true, async () => {
      expect(rhea.message.decode).to.not.equal(full);
      return rhea.message.decode(unread);
    });
    expect(got.message_annotations).to.deep.equal({ 'x-opt-tm-cmd': 5 });
    expect(got.body).to.equal('b');
    expect(rhea.message.decode).to.equal(full);
    await withRecordScan(true, async () => { throw new Error('boom'); }).catch(() => undefined);
    expect(rhea.message.decode).to.equal(full);
  });

  it('hands back to (and puts back) whatever decode was in place when the workload began, a tuned one included', async () => {
    const full = rhea.message.decode;
    const seen: Buffer[] = [];
    const tuned = function (this: unknown, b: Buffer) { seen.push(b); return full.call(this, b); };
    rhea.message.decode = tuned;
    try {
      await withRecordScan(true, async () => { rhea.message.decode(rhea.message.encode({ message_annotations: { 'x-opt-tm-cmd': 5 } })); });
      expect(seen).to.have.length(1);
      expect(rhea.message.decode).to.equal(tuned);
    } finally { rhea.message.decode = full; }
  });
});
