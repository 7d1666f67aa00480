/**
 * Codec audit (session 23): maps with an odd item count, strings that are not valid UTF-8,
 * JSON content types and encodings, users configured with a hash under `password`.
 */
import { expect } from 'chai';
import rhea from 'rhea';
import { indexSections, rewriteMessage, oddMapSection, invalidUtf8Section } from '../../../lib/codec/message-bytes.js';
import { typed } from '../../../lib/codec/amqp.js';
import { jsonBody, isJsonContentType } from '../../../lib/codec/json-body.js';
import { loadConfig } from '../../../lib/core/config.js';
import { hashPassword } from '../../../lib/core/auth.js';

const r: any = rhea;
const H = (s: string) => Buffer.from(s.replace(/\s+/g, ''), 'hex');
const sec = (code: number, val: Buffer) => Buffer.concat([H('0053'), Buffer.from([code]), val]);
const symsec = (name: string, val: Buffer) => Buffer.concat([H('00a3'), Buffer.from([name.length]), Buffer.from(name), val]);
const str8 = (s: string | Buffer) => { const b = Buffer.isBuffer(s) ? s : Buffer.from(s); return Buffer.concat([Buffer.from([0xa1, b.length]), b]); };
const sym8 = (s: string) => { const b = Buffer.from(s); return Buffer.concat([Buffer.from([0xa3, b.length]), b]); };
const vbin8 = (b: Buffer) => Buffer.concat([Buffer.from([0xa0, b.length]), b]);
const map8 = (...items: Buffer[]) => { const c = Buffer.concat(items); return Buffer.concat([Buffer.from([0xc1, c.length + 1, items.length]), c]); };
const map32 = (...items: Buffer[]) => { const c = Buffer.concat(items); const h = Buffer.alloc(9); h[0] = 0xd1; h.writeUInt32BE(c.length + 4, 1); h.writeUInt32BE(items.length, 5); return Buffer.concat([h, c]); };
const list8 = (...items: Buffer[]) => { const c = Buffer.concat(items); return Buffer.concat([Buffer.from([0xc0, c.length + 1, items.length]), c]); };
const body = sec(0x77, str8('{"id":"k1"}'));
const OURS = { 'x-opt-tm-cmd': typed.symbol('sow'), 'x-opt-tm-key': 'k1', 'x-opt-tm-scn': typed.ulong(7) };

describe('codec audit: maps with an odd item count', function () {
  const cases: Array<[string, Buffer]> = [
    ['symbol keys (the structural walk)', map8(sym8('x-opt-a'), str8('A'), sym8('x-opt-dangling'))],
    ['map32, the dangling item a list', map32(sym8('x-opt-a'), str8('A'), list8(H('40')))],
    ['an integer key (the decoding walk)', map8(H('5401'), str8('one'), sym8('x-opt-b'), str8('B'), H('5402'))],
  ];
  for (const [what, ma] of cases) {
    it(`a stored message whose message-annotations map has an odd count is rewritten without its dangling item: ${what}`, function () {
      const bytes = Buffer.concat([sec(0x72, ma), body]);
      // Before: RangeError (the pairs loop read past the map), on every delivery of the record.
      const out = rewriteMessage(bytes, indexSections(bytes), null, OURS);
      const m = r.message.decode(out);
      const plainKeys = Object.keys(m.message_annotations).filter((k) => !k.startsWith('x-opt-tm-'));
      const want = r.message.decode(bytes).message_annotations; // rhea's reading: pairs, dangling dropped
      expect(plainKeys).to.deep.equal(Object.keys(want));
      for (const k of plainKeys) expect(m.message_annotations[k]).to.deep.equal(want[k]);
      expect(m.message_annotations['x-opt-tm-key']).to.equal('k1');
      expect(m.body).to.equal('{"id":"k1"}');
      // the map written is well formed: an even count
      const ann = indexSections(out).annotations!;
      expect(out.readUInt32BE(ann[0] + 3 + 5) % 2).to.equal(0);
    });
  }

  it('oddMapSection names each map section with an odd count, and passes even ones', function () {
    const odd = map8(sym8('a'), str8('A'), sym8('b'));
    const even = map8(sym8('a'), str8('A'));
    expect(oddMapSection(Buffer.concat([sec(0x72, even), sec(0x74, map8(str8('p'), str8('1'))), body]))).to.equal(undefined);
    expect(oddMapSection(Buffer.concat([sec(0x71, odd), body]))).to.deep.equal({ section: 'delivery-annotations', count: 3 });
    expect(oddMapSection(Buffer.concat([sec(0x72, odd), body]))).to.deep.equal({ section: 'message-annotations', count: 3 });
    expect(oddMapSection(Buffer.concat([sec(0x70, list8(H('41'))), sec(0x72, even), sec(0x73, list8(H('40'))), sec(0x74, map32(str8('p'))), body]))).to.deep.equal({ section: 'application-properties', count: 1 });
    expect(oddMapSection(Buffer.concat([body, sec(0x78, odd)]))).to.deep.equal({ section: 'footer', count: 3 });
    expect(oddMapSection(Buffer.concat([symsec('amqp:message-annotations:map', odd), body]))).to.deep.equal({ section: 'message-annotations', count: 3 });
    // an odd map inside the body is a value, not a section: not judged
    expect(oddMapSection(sec(0x77, odd))).to.equal(undefined);
    expect(oddMapSection(Buffer.concat([sec(0x72, H('40')), body]))).to.equal(undefined);
  });
});

describe('codec audit: strings that are not valid UTF-8', function () {
  const bad = Buffer.concat([Buffer.from('{"id":"bad'), Buffer.from([0xff]), Buffer.from('"}')]);
  it('invalidUtf8Section finds an invalid str8 in the body, in a nested map, in message annotations', function () {
    expect(invalidUtf8Section(sec(0x77, str8(bad)))).to.equal('amqp-value body');
    expect(invalidUtf8Section(Buffer.concat([sec(0x74, map8(str8('p'), list8(str8(Buffer.from([0x61, 0xc3]))))), body]))).to.equal('application-properties');
    expect(invalidUtf8Section(Buffer.concat([sec(0x72, map8(sym8('x-opt-tm-key'), str8(Buffer.from([0x80])))), body]))).to.equal('message-annotations');
  });
  it('invalidUtf8Section looks into arrays of strings (str8 elements), and passes valid ones', function () {
    const arr = (...els: Buffer[]) => { const c = Buffer.concat(els.map((e) => Buffer.concat([Buffer.from([e.length]), e]))); return Buffer.concat([Buffer.from([0xe0, c.length + 2, els.length, 0xa1]), c]); };
    expect(invalidUtf8Section(sec(0x77, arr(Buffer.from('ok'), Buffer.from([0x61, 0xff]))))).to.equal('amqp-value body');
    expect(invalidUtf8Section(sec(0x77, arr(Buffer.from('ok'), Buffer.from('é'))))).to.equal(undefined);
  });

  it('invalidUtf8Section passes valid text (U+FFFD written as such included) and binary data', function () {
    expect(invalidUtf8Section(sec(0x77, str8('{"id":"bad\ufffd"}')))).to.equal(undefined);
    expect(invalidUtf8Section(Buffer.concat([sec(0x73, list8(H('40'))), sec(0x75, vbin8(bad))]))).to.equal(undefined);
    expect(invalidUtf8Section(sec(0x77, map8(str8('id'), str8('é'))))).to.equal(undefined);
  });

  const data = (b: Buffer, ct = 'application/json', ce?: string) => ({ body: { typecode: 0x75, content: b }, content_type: ct, content_encoding: ce });
  it('a data body that is not valid UTF-8 is refused, where U+FFFD used to stand for the bad byte', function () {
    const j = jsonBody(data(bad));
    expect(j).to.deep.equal({ ok: false, reason: 'body is not valid UTF-8' });
    expect(jsonBody({ body: bad, content_type: 'application/json' })).to.deep.equal({ ok: false, reason: 'body is not valid UTF-8' });
    expect(jsonBody(data(Buffer.from('{"id":"bad\ufffd"}')))).to.deep.equal({ ok: true, value: { id: 'bad\ufffd' } });
  });
  it('a leading byte-order mark is dropped (RFC 8259 8.1)', function () {
    expect(jsonBody(data(Buffer.concat([H('efbbbf'), Buffer.from('{"id":"a"}')])))).to.deep.equal({ ok: true, value: { id: 'a' } });
  });
});

describe('codec audit: JSON content types and content-encoding', function () {
  const data = (ct: string | undefined, ce?: string) => ({ body: { typecode: 0x75, content: Buffer.from('{"id":"a"}') }, content_type: ct, content_encoding: ce });
  it('compares media types case-insensitively, with parameters and +json suffixes', function () {
    for (const ct of ['application/json', 'Application/JSON', 'application/json; charset=utf-8', 'APPLICATION/JSON;charset=UTF-8', 'application/vnd.x+json', 'application/VND.X+JSON'])
      expect(jsonBody(data(ct)), ct).to.deep.equal({ ok: true, value: { id: 'a' } });
    for (const ct of [undefined, 'text/plain', 'application/jsonx', '+json']) expect(jsonBody(data(ct)).ok, String(ct)).to.equal(false);
    expect(isJsonContentType('application/json-seq')).to.equal(false);
  });
  it('reads an amqp-value binary with a +json content-type as a data section', function () {
    expect(jsonBody({ body: Buffer.from('{"id":"b"}'), content_type: 'application/vnd.x+json' })).to.deep.equal({ ok: true, value: { id: 'b' } });
    expect(jsonBody({ body: Buffer.from('{"id":"b"}'), content_type: 'Application/Json' })).to.deep.equal({ ok: true, value: { id: 'b' } });
  });
  it('refuses a content-encoding it would not decode (gzip), takes identity and utf-8', function () {
    const g = jsonBody(data('application/json', 'gzip'));
    expect(g.ok).to.equal(false);
    expect((g as { reason: string }).reason).to.match(/^content-encoding "gzip" is not read/);
    for (const ce of ['identity', 'utf-8', 'UTF8', '']) expect(jsonBody(data('application/json', ce)).ok, ce).to.equal(true);
  });
});

describe('codec audit: auth.users', function () {
  it('refuses an scrypt hash under password, without quoting it', function () {
    const h = hashPassword('s3cret', 1024, 8, 1);
    let msg = '';
    try { loadConfig(undefined, { auth: { users: { bob: { password: h } } } }); } catch (e) { msg = (e as Error).message; }
    expect(msg).to.match(/^config\.auth\.users\.bob\.password: this is an scrypt hash; put it under scrypt/);
    expect(msg).to.not.include(h.split('$')[5]);
  });
  it('refuses a user with neither password nor scrypt, or both', function () {
    expect(() => loadConfig(undefined, { auth: { users: { bob: {} } } })).to.throw(/^config\.auth\.users\.bob: give the user a password or an scrypt hash/);
    const h = hashPassword('s3cret', 1024, 8, 1);
    expect(() => loadConfig(undefined, { auth: { users: { bob: { password: 'x', scrypt: h } } } })).to.throw(/^config\.auth\.users\.bob: give the user either password or scrypt, not both/);
  });
  it('still takes one of them', function () {
    const h = hashPassword('s3cret', 1024, 8, 1);
    expect(loadConfig(undefined, { auth: { users: { a: { password: 'plain' }, b: { scrypt: h } } } }).auth.users.b.scrypt).to.equal(h);
  });
});
