import { expect } from 'chai';
import rhea from 'rhea';
import { jsonBody, jsonText, encodeAmqpValue } from '../../../lib/codec/json-body.js';

// semantics.md 2-3: integers beyond 2^53 in a JSON body stay exact (keys, filters, merges).
describe('JSON view of a body: integers beyond 2^53', function () {
  it('parses them as exact bigints, and everything else as JSON.parse does', function () {
    const r = jsonBody({ body: '{"a":9007199254740993,"b":12345678901234567890,"c":1.5,"d":9007199254740991,"s":"12345678901234567890","n":-9007199254740993}' });
    expect(r.ok).to.equal(true);
    expect((r as any).value).to.deep.equal({ a: 9007199254740993n, b: 12345678901234567890n, c: 1.5, d: 9007199254740991, s: '12345678901234567890', n: -9007199254740993n });
  });

  it('a text with a repeated member name still parses as JSON.parse takes it (the last wins)', function () {
    const r = jsonBody({ body: '{"a":1,"a":2,"id":12345678901234567890}' });
    expect(r.ok).to.equal(true);
    expect((r as any).value.a).to.equal(2);
  });

  it('bad JSON with a long digit run is still refused with JSON.parse\'s reason', function () {
    const r = jsonBody({ body: '{"a":12345678901234567890' });
    expect(r.ok).to.equal(false);
    expect((r as any).reason).to.match(/^body is not JSON text: /);
  });

  it('jsonText writes bigints as their digits', function () {
    expect(jsonText([12345678901234567890n, 'q', 1])).to.equal('[12345678901234567890,"q",1]');
    expect(jsonText({ a: 1 })).to.equal('{"a":1}');
  });

  it('encodeAmqpValue writes a bigint as long or ulong (rhea alone wrote an empty map)', function () {
    const types: any = (rhea as any).types;
    const read = (b: Buffer) => new types.Reader(b).read();
    const long = read(encodeAmqpValue({ x: -9007199254740993n }));
    const ulong = read(encodeAmqpValue([12345678901234567890n]));
    const lv = long.value[1];
    expect(lv.type.name).to.equal('Long');
    expect(Buffer.from(lv.value).readBigInt64BE()).to.equal(-9007199254740993n);
    const uv = ulong.value[0];
    expect(uv.type.name).to.equal('Ulong');
    expect(Buffer.from(uv.value).readBigUInt64BE()).to.equal(12345678901234567890n);
  });
});
