/**
 * mergeDelta (lib/ext/sow/delta-merge.ts, docs/sow.md "Delta merge"): a delta changes only
 * the fields it names. Every other field keeps its exact encoding (its AMQP type in a map
 * body, its text in JSON), and the record's properties and application properties their bytes.
 */
import { expect } from 'chai';
import { mergeDelta } from '../../../lib/ext/sow/delta-merge.js';
import { encodeMessage, decodeMessage } from '../../../lib/codec/message-bytes.js';
import { amqpTypes as T, amqpMessage } from '../../../lib/codec/amqp.js';
import { rawSections, jsonBody } from '../../../lib/codec/json-body.js';

const enc = (v: unknown) => { const w = new T.Writer(); w.write(v); return w.toBuffer() as Buffer; };
/** The encoding of one map entry: a string key, then the typed value. */
const entry = (k: string, typed: unknown) => Buffer.concat([enc(T.wrap_string(k)), enc(typed)]);
const section = (bytes: Buffer, code: number) => { const s = rawSections(bytes).find((x) => x.code === code); return s && bytes.subarray(s.start, s.end); };
const view = (bytes: Buffer) => { const j = jsonBody(decodeMessage(bytes)); if (!j.ok) throw new Error(j.reason); return j.value; };

describe('delta merge keeps what the delta does not touch (item 5)', () => {
  const typedFields: Record<string, unknown> = {
    ts: T.wrap_timestamp(1700000000123),
    big: T.wrap_ulong(Buffer.from('1000000000000001', 'hex')), // 2^60 + 1
    bin: T.wrap_binary(Buffer.from([1, 2, 3])),
    sym: T.wrap_symbol('SYM'),
    dbl: T.wrap_double(1.0),
    neg0: T.wrap_double(-0),
    u: T.wrap_uuid(Buffer.alloc(16, 7)),
    ch: T.wrap_char(65),
    arr: T.wrap_array([1, 2], 0x71),
    nested: T.wrap_map({ a: T.wrap_ubyte(3) }),
  };
  const mapRecord = () => encodeMessage({
    durable: true, priority: 7, ttl: 60000, message_id: 'm-1', subject: 'px', absolute_expiry_time: new Date(2e12), group_sequence: 9, reply_to_group_id: 'g',
    application_properties: { region: T.wrap_symbol('EU'), n: T.wrap_ulong(5) },
    body: T.wrap_map({ id: 'm', ...typedFields, px: 1 }),
  });

  it('a map record: every untouched entry keeps its bytes (type included) after a JSON-text delta', () => {
    const prev = mapRecord();
    const delta = encodeMessage({ message_annotations: { 'x-opt-tm-op': 'delta' }, body: '{"id":"m","px":5}' });
    const out = mergeDelta(prev, { id: 'm', px: 5 }, 'q', delta);
    for (const [k, v] of Object.entries(typedFields)) expect(out.includes(entry(k, v)), k).to.equal(true);
    expect(out.includes(entry('px', T.wrap_uint(5))), 'the delta field, encoded from JSON').to.equal(true);
    const m = decodeMessage(out);
    expect(m.body.ts).to.be.instanceOf(Date);
    expect(m.body.px).to.equal(5);
    expect(Object.keys(m.body)).to.deep.equal(['id', ...Object.keys(typedFields), 'px']);
  });

  it('a map record: without the delta bytes (the JSON view only) the untouched entries are kept all the same', () => {
    const out = mergeDelta(mapRecord(), { id: 'm', px: 5, added: [1, 'x'] }, 'q');
    for (const [k, v] of Object.entries(typedFields)) expect(out.includes(entry(k, v)), k).to.equal(true);
    expect(decodeMessage(out).body.added).to.deep.equal([1, 'x']);
  });

  it('a map delta into a map record keeps the delta\'s own types', () => {
    const delta = encodeMessage({ body: T.wrap_map({ id: 'm', px: T.wrap_double(5), when: T.wrap_timestamp(5), big: T.wrap_ulong(Buffer.from('1000000000000002', 'hex')) }) });
    const out = mergeDelta(mapRecord(), view(delta) as Record<string, unknown>, 'q', delta);
    expect(out.includes(entry('px', T.wrap_double(5)))).to.equal(true);
    expect(out.includes(entry('when', T.wrap_timestamp(5)))).to.equal(true);
    expect(out.includes(entry('big', T.wrap_ulong(Buffer.from('1000000000000002', 'hex'))))).to.equal(true);
    expect(out.includes(entry('bin', typedFields.bin))).to.equal(true);
  });

  it('properties and application properties keep their bytes; the header keeps durable and priority, not the publish\'s ttl', () => {
    const prev = mapRecord();
    const out = mergeDelta(prev, { id: 'm', px: 5 }, 'q');
    expect(section(out, 0x73)!.equals(section(prev, 0x73)!)).to.equal(true);
    expect(section(out, 0x74)!.equals(section(prev, 0x74)!)).to.equal(true);
    const m = decodeMessage(out);
    expect([m.durable, m.priority, m.ttl]).to.deep.equal([true, 7, undefined]);
    expect([m.group_sequence, m.reply_to_group_id, m.subject]).to.deep.equal([9, 'g', 'px']);
  });

  it('a map record with symbol keys gets new keys as symbols', () => {
    const prev = encodeMessage({ body: T.wrap_symbolic_map({ id: 'k', a: 1 }) });
    const out = mergeDelta(prev, { id: 'k', b: 2 }, 'q');
    expect(out.includes(Buffer.concat([enc(T.wrap_symbol('b')), enc(T.wrap(2))]))).to.equal(true);
    expect(view(out)).to.deep.equal({ id: 'k', a: 1, b: 2 });
  });

  it('JSON text: untouched members keep their text (big integers, 1.10, escapes); the delta\'s members theirs', () => {
    const text = '{ "id" : "n", "big": 12345678901234567890, "f": 1.10, "e": "\\u00e9", "nest": {"a": [1, {"b": "}"}]}, "px": 0 }';
    const prev = encodeMessage({ body: text });
    const delta = encodeMessage({ body: '{"id":"n","px":98765432109876543210,"new":1e2}' });
    const out = mergeDelta(prev, JSON.parse('{"id":"n","px":98765432109876543210,"new":1e2}'), 'q', delta);
    expect(decodeMessage(out).body).to.equal('{"id":"n","big":12345678901234567890,"f":1.10,"e":"\\u00e9","nest":{"a": [1, {"b": "}"}]},"px":98765432109876543210,"new":1e2}');
  });

  it('JSON text: the merged view is the record\'s view with the delta\'s fields, whatever the keys look like', () => {
    const records = ['{}', '{"a":1}', '{"a":1,"a":2,"b":3}', '{"\\u0061":1,"b":[1,2]}', '{"__proto__":{"x":1},"k":"v"}', '{"a":"\\"}{","b":{"c":"]"}}', '{"ключ":"значение","a":null}'];
    const deltas = ['{"a":9}', '{"b":{"z":1},"c":"new"}', '{"a":1,"a":7}', '{"ключ":true}', '{}'];
    for (const r of records) {
      for (const d of deltas) {
        const prev = encodeMessage({ body: r });
        const delta = encodeMessage({ body: d });
        const out = mergeDelta(prev, JSON.parse(d), 'q', delta);
        expect(JSON.parse(decodeMessage(out).body), `${r} + ${d}`).to.deep.equal({ ...JSON.parse(r), ...JSON.parse(d) });
      }
    }
  });

  it('application/json data: merged as bytes, the record stays a data section with its content type', () => {
    const raw = Buffer.from('{"id":"k","a":"é","big":12345678901234567890,"z":1}', 'utf8');
    const prev = encodeMessage({ content_type: 'application/json', body: amqpMessage.data_section(raw) });
    const out = mergeDelta(prev, { id: 'k', z: 2 }, 'q', encodeMessage({ body: T.wrap_map({ id: 'k', z: 2 }) }));
    const m = decodeMessage(out);
    expect(m.content_type).to.equal('application/json');
    expect(Buffer.from(m.body.content ?? m.body).toString('utf8')).to.equal('{"id":"k","a":"é","big":12345678901234567890,"z":2}');
  });

  it('an amqp-value binary JSON record (rhea\'s form of a Buffer body) merges into a data section, untouched text kept', () => {
    const prev = encodeMessage({ content_type: 'application/json', body: Buffer.from('{"id":"b","big":12345678901234567890,"z":1}') });
    const delta = encodeMessage({ content_type: 'application/json', body: Buffer.from('{"id":"b","z":2.50}') });
    const out = mergeDelta(prev, { id: 'b', z: 2.5 }, 'q', delta);
    const m = decodeMessage(out);
    expect(m.body.typecode).to.equal(0x75);
    expect(Buffer.from(m.body.content).toString('utf8')).to.equal('{"id":"b","big":12345678901234567890,"z":2.50}');
  });

  it('refuses a delta that is not an object, or a record that is not one', () => {
    expect(() => mergeDelta(encodeMessage({ body: '{"id":1}' }), [1] as any, 'q')).to.throw(/delta body must be a JSON object/);
    expect(() => mergeDelta(encodeMessage({ body: '[1]' }), { id: 1 }, 'q')).to.throw(/existing record is not a JSON object/);
    expect(() => mergeDelta(encodeMessage({ body: T.wrap_list([1]) }), { id: 1 }, 'q')).to.throw(/existing record is not a JSON object/);
  });
});
