/**
 * Hostile-input audit (docs/sow.md "What a publish must hold", docs/decisions.md): the parsers
 * and checks of the SOW, checkpoint and management extensions refuse bad input with an error
 * naming it, instead of turning it into something else. spec/integration/input-validation
 * drives the same cases through a broker.
 */
import { expect } from 'chai';
import { Writable } from 'node:stream';
import { parseBookmark } from '../../../lib/ext/sow/bookmark.js';
import { parseOptions, MAX_CONFLATION_MS } from '../../../lib/ext/sow/options.js';
import { parseKeySpec, extractKey, wellFormed, keyFault } from '../../../lib/ext/sow/sow-key.js';
import { SowStructure } from '../../../lib/ext/sow/sow-structure.js';
import { sowDeleteRequest } from '../../../lib/ext/sow/index.js';
import { parseCheckpoint } from '../../../lib/ext/checkpoints/checkpoint.js';
import { checkpointPlan } from '../../../lib/ext/checkpoints/index.js';
import { jsonBody, jsonTooDeep, jsonObjectMembers, MAX_JSON_DEPTH } from '../../../lib/codec/json-body.js';
import { encodeMessage, decodeMessage } from '../../../lib/codec/message-bytes.js';
import { amqpMessage } from '../../../lib/codec/amqp.js';
import { TidemarkError } from '../../../lib/core/errors.js';
import { setLogDestination, setLogLevel, getLogLevel } from '../../../lib/core/log.js';

/** The error `fn` throws (fails when it throws none). */
function thrown(fn: () => unknown): TidemarkError {
  try { fn(); } catch (e) { return e as TidemarkError; }
  expect.fail('expected an error');
}

describe('time bookmarks: every field within the calendar (item 8)', () => {
  const at = (t: string) => { const b = parseBookmark(t); if (b.kind !== 'time') throw new Error(b.kind); return b.ms; };

  it('out-of-range fields are "malformed bookmark" naming the field, not rolled over', () => {
    for (const [t, field] of [
      ['20261301T000000Z', 'month 13'], ['20260001T000000Z', 'month 00'], ['20260230T000000Z', 'day 30'], ['20250229T000000Z', 'day 29'],
      ['20260100T000000Z', 'day 00'], ['20260431T000000Z', 'day 31'], ['20260101T250000Z', 'hour 25'], ['20260101T240000Z', 'hour 24'],
      ['20260101T006000Z', 'minute 60'], ['20260101T000060Z', 'second 60'], ['2026-02-30T00:00:00Z', 'day 30'], ['2026-01-01T24:00:00Z', 'hour 24'],
      ['2026-13-01T00:00:00Z', 'month 13'], ['2026-01-01T00:60Z', 'minute 60'],
    ]) {
      const e = thrown(() => parseBookmark(t));
      expect(e.condition, t).to.equal('amqp:invalid-field');
      expect(e.message, t).to.include(`malformed bookmark "${t}"`).and.include(field);
    }
  });

  it('valid instants are read exactly (leap days, both forms, fractions, years below 100)', () => {
    expect(at('20240229T000000Z')).to.equal(Date.UTC(2024, 1, 29));
    expect(at('20000229T120000Z')).to.equal(Date.UTC(2000, 1, 29, 12));
    expect(at('20261231T235959.999Z')).to.equal(Date.UTC(2026, 11, 31, 23, 59, 59, 999));
    expect(at('2026-06-01T09:30Z')).to.equal(Date.UTC(2026, 5, 1, 9, 30));
    expect(at('2026-06-01T09:30:15.25Z')).to.equal(Date.UTC(2026, 5, 1, 9, 30, 15, 250));
    expect(new Date(at('00500101T000000Z')).getUTCFullYear(), 'not 1950').to.equal(50);
  });
});

describe('conflation options (item 3)', () => {
  const opt = (o: Record<string, unknown>) => thrown(() => parseOptions(o));

  it('conflation_key entries must be /paths into the body', () => {
    for (const [k, why] of [[['not a path'], /not a \/path/], [[''], /not a \/path/], [['/a[0]'], /array index/], [[5], /must be a string/], [['/a', 'b'], /conflation_key\[1\] "b"/], ['/a', /list/], [['/a = 1'], /not a \/path/]] as const) {
      const e = opt({ conflation: '1s', conflation_key: k });
      expect(e.condition, JSON.stringify(k)).to.equal('amqp:invalid-field');
      expect(e.message, JSON.stringify(k)).to.match(why);
    }
    expect(parseOptions({ conflation_key: ['/sym', "/order/'ref no'"] }).conflation_key).to.deep.equal(['/sym', '/order/ref no']);
  });

  it('conflation: negative, fractional, NaN and intervals past 2^31-1 ms are refused by name', () => {
    for (const [v, why] of [[-1, /got -1/], [NaN, /got NaN/], [1.5, /got 1\.5/], [Infinity, /got Infinity/], [3e9, /3000000000 is 3000000000000 ms, longer than .*2147483647 ms/], ['3000000000ms', /longer than/], ['25d', /longer than/]] as const) {
      const e = opt({ conflation: v });
      expect(e.condition, String(v)).to.equal('amqp:invalid-field');
      expect(e.message, String(v)).to.match(why);
    }
    expect(parseOptions({ conflation: `${MAX_CONFLATION_MS}ms` }).conflation).to.equal(MAX_CONFLATION_MS);
    expect(parseOptions({ conflation: 2 }).conflation).to.equal(2000); // a bare number is seconds
  });
});

describe('checkpoint SCNs ahead of the head (item 2)', () => {
  const queue = { name: 'cq', committedScn: 5 } as any;
  const plan = (cp: Record<string, unknown>) => checkpointPlan(queue, parseCheckpoint(cp), 0, true);

  it('every SCN field past the head is invalid-field naming the field', () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: 1, prevScn: 1, windowOffset: -1, bootstrap_start_scn: 1, bootstrap_target_scn: 2, catchup_offset: 1000 }, 'catchup_offset 1000'],
      [{ consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: 1, prevScn: 1, windowOffset: -1, bootstrap_start_scn: 1, bootstrap_target_scn: 9 }, 'bootstrap_target_scn 9'],
      [{ consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: 1, prevScn: 1, windowOffset: -1, bootstrap_start_scn: 1000 }, 'bootstrap_start_scn 1000'],
      [{ consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: 1000, prevScn: 1000, windowOffset: -1, bootstrap_start_scn: 1000 }, 'windowScn 1000'],
      [{ consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: 1, prevScn: 1, windowOffset: -1, bootstrap_start_scn: 1, bootstrap_since_scn: 6 }, 'bootstrap_since_scn 6'],
      [{ windowScn: 6, prevScn: 6, windowOffset: -1 }, 'windowScn 6'],
    ];
    for (const [cp, field] of cases) {
      const e = thrown(() => plan(cp));
      expect(e.condition, field).to.equal('amqp:invalid-field');
      expect(e.message, field).to.include(field).and.include('ahead of the head of cq (5)');
    }
  });

  it('a catch-up target before its start, or an offset past its target, is refused', () => {
    expect(thrown(() => plan({ consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: 1, prevScn: 1, windowOffset: -1, bootstrap_start_scn: 3, bootstrap_target_scn: 1 })).message).to.include('bootstrap_target_scn 1 is before bootstrap_start_scn 3');
    expect(thrown(() => plan({ consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: 1, prevScn: 1, windowOffset: -1, bootstrap_start_scn: 1, bootstrap_target_scn: 3, catchup_offset: 4 })).message).to.include('catchup_offset 4 is past bootstrap_target_scn 3');
  });

  it('a snapshot_offset that is not well-formed Unicode (JSON text can carry one) is refused', () => {
    const e = thrown(() => parseCheckpoint('{"consumption_mode":"BOOTSTRAP_SNAPSHOT","windowScn":1,"prevScn":1,"windowOffset":-1,"bootstrap_start_scn":1,"snapshot_offset":"k\\ud800"}'));
    expect(e.condition).to.equal('amqp:invalid-field');
    expect(e.message).to.include('snapshot_offset is not well-formed Unicode');
  });

  it('checkpoints at or below the head still resume', () => {
    expect(plan({ consumption_mode: 'BOOTSTRAP_CATCHUP', windowScn: 2, prevScn: 2, windowOffset: -1, bootstrap_start_scn: 2, bootstrap_target_scn: 5, catchup_offset: 3 }).position).to.equal(3);
    expect(plan({ consumption_mode: 'BOOTSTRAP_SNAPSHOT', windowScn: 5, prevScn: 5, windowOffset: -1, bootstrap_start_scn: 5, snapshot_offset: 'k' }).position).to.equal(5);
    expect(plan({ windowScn: 5, prevScn: 5, windowOffset: -1 }).position).to.equal(5);
  });
});

describe('SOW keys and x-opt-tm-key (items 4, 6)', () => {
  const fakeQueue = () => ({ name: 'kq', id: 7, browseOnly: false }) as any;
  const structure = () => new SowStructure(fakeQueue(), { key: parseKeySpec('/id'), historyGranularity: 0 });
  const inbound = (message: any, bytes = encodeMessage({ body: null })) => ({ bytes, message, receivedAt: 1, attrs: {} });

  it('wellFormed: lone surrogates are not well-formed, pairs are', () => {
    expect(wellFormed('a\ud83d\ude00b')).to.equal(true);
    for (const s of ['\ud800', 'x\udbff', '\udc00x', '\ude00\ud83d']) expect(wellFormed(s), JSON.stringify(s)).to.equal(false);
  });

  it('a key value with a lone surrogate is refused, from the body and from an application property', () => {
    expect(extractKey(parseKeySpec('/id'), { id: '\ud800-order-1' }, undefined)).to.include({ malformed: '/id', value: '\ud800-order-1' });
    expect(extractKey(parseKeySpec('sym'), {}, { sym: 'x\udfff' })).to.include({ malformed: 'sym', value: 'x\udfff' });
    expect(extractKey(parseKeySpec('/a,/b'), { a: 'ok', b: '\ud800' }, undefined)).to.have.property('malformed', '/b');
    expect(extractKey(parseKeySpec('/id'), { id: '\ufffd-order-1' }, undefined)).to.deep.equal({ key: '\ufffd-order-1' });
    const e = thrown(() => structure().prepare(inbound({ body: '{"id":"\\ud800-order-1"}' }), 1, undefined));
    expect(e.condition).to.equal('amqp:invalid-field');
    expect(e.message).to.include('queue kq').and.include('/id').and.include('well-formed');
  });

  it('a key value holding NUL is refused: hist rows end a key with NUL, so "a" and "a\\0\\0x" would share a range', () => {
    expect(keyFault('a\u0000\u0000x')).to.include('NUL');
    expect(keyFault('a\u0001b')).to.equal(undefined);
    expect(extractKey(parseKeySpec('/id'), { id: 'a\u0000b' }, undefined)).to.have.property('malformed', '/id');
    expect(extractKey(parseKeySpec('/a,/b'), { a: 'ok', b: '\u0000' }, undefined)).to.have.property('malformed', '/b');
    const e = thrown(() => structure().prepare(inbound({ body: '{"id":"a\\u0000\\u0000x"}' }), 1, undefined));
    expect(e.condition).to.equal('amqp:invalid-field');
    expect(e.message).to.include('queue kq').and.include('/id').and.include('NUL');
    const d = thrown(() => structure().prepare(inbound({ message_annotations: { 'x-opt-tm-op': 'delete', 'x-opt-tm-key': 'a\u0000' }, body: null }), 1, undefined));
    expect(d.condition).to.equal('amqp:invalid-field');
    expect(d.message).to.include('NUL').and.include('nothing was deleted');
  });

  it('a missing key named without a leading / says it names an application property, and the body field\'s path', () => {
    const byProperty = new SowStructure(fakeQueue(), { key: parseKeySpec('id'), historyGranularity: 0 });
    const e = thrown(() => byProperty.prepare(inbound({ body: '{"id":"a"}' }), 1, undefined));
    expect(e.condition).to.equal('amqp:invalid-field');
    expect(e.message).to.include('no SOW key at id').and.include('id names an application property, a JSON body field is /id');
    const e2 = thrown(() => structure().prepare(inbound({ body: '{"name":"a"}' }), 1, undefined));
    expect(e2.message).to.include('no SOW key at /id').and.not.include('application property');
  });

  it('x-opt-tm-key on a delete: a string or a number; a list, map, binary, boolean, empty or lone surrogate is refused', () => {
    const del = (key: unknown) => inbound({ message_annotations: { 'x-opt-tm-op': 'delete', 'x-opt-tm-key': key }, body: null });
    for (const [key, why] of [[[1, 2], 'got a list'], [{ a: 1 }, 'got a map'], [Buffer.from('k'), 'got binary'], [true, 'got a boolean'], ['', 'is empty'], ['\ud800', 'well-formed'], [NaN, 'got a number (NaN)']] as const) {
      const e = thrown(() => structure().prepare(del(key), 1, undefined));
      expect(e.condition, String(key)).to.equal('amqp:invalid-field');
      expect(e.message, String(key)).to.include('queue kq').and.include(why).and.include('nothing was deleted');
    }
    const s = structure();
    s.prepare(inbound({ body: '{"id":"7"}' }, encodeMessage({ body: '{"id":"7"}' })), 1, undefined);
    s.prepare(del(7), 2, undefined);
    expect(s.records.has('7'), 'the number 7 names the key "7", as a body key 7 does').to.equal(false);
  });

  it('an internal error while preparing an event is logged with its cause, and the client gets internal-error', () => {
    const lines: string[] = [];
    const level = getLogLevel();
    setLogDestination(new Writable({ write(chunk, _enc, cb) { lines.push(String(chunk)); cb(); } }) as any);
    setLogLevel('error');
    try {
      const message = { get body(): unknown { throw new RangeError('Maximum call stack size exceeded'); } };
      const e = thrown(() => structure().prepare(inbound(message), 1, undefined));
      expect(e.condition).to.equal('amqp:internal-error');
      expect(e.message).to.include('queue kq').and.include('Maximum call stack size exceeded');
      const line = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'SOW event could not be prepared');
      expect(line, lines.join('')).to.not.equal(undefined);
      expect(line.queue).to.equal('kq');
      expect(line.err.message).to.equal('Maximum call stack size exceeded');
      expect(line.err.stack).to.be.a('string');
    } finally { setLogDestination(undefined); setLogLevel(level); }
  });
});

describe('JSON nesting limit (item 7)', () => {
  const nested = (d: number) => '['.repeat(d) + ']'.repeat(d);

  it('jsonTooDeep counts objects and arrays, not brackets inside strings', () => {
    expect(jsonTooDeep(nested(MAX_JSON_DEPTH), MAX_JSON_DEPTH)).to.equal(false);
    expect(jsonTooDeep(nested(MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH)).to.equal(true);
    expect(jsonTooDeep(JSON.stringify({ s: '['.repeat(5000), t: '\\"[[[' }), 10)).to.equal(false);
    expect(jsonTooDeep(nested(200_000), MAX_JSON_DEPTH)).to.equal(true);
  });

  it('jsonBody with maxDepth refuses deep text, data and map bodies; without it reads them as before', () => {
    const deepMap = (d: number) => { let o: any = { a: 1 }; for (let i = 1; i < d; i++) o = { n: o }; return o; };
    for (const message of [
      { body: `{"id":1,"x":${nested(MAX_JSON_DEPTH)}}` },
      { content_type: 'application/json', body: Buffer.from(`{"id":1,"x":${nested(MAX_JSON_DEPTH)}}`) },
      { body: deepMap(MAX_JSON_DEPTH + 1) },
    ]) {
      const r = jsonBody(message, { maxDepth: MAX_JSON_DEPTH });
      expect(r.ok).to.equal(false);
      expect((r as any).reason).to.match(/nested too deeply \(more than 256 levels/);
      expect(jsonBody(message).ok).to.equal(true);
    }
    expect(jsonBody({ body: deepMap(MAX_JSON_DEPTH) }, { maxDepth: MAX_JSON_DEPTH }).ok).to.equal(true);
    expect(jsonBody({ body: `{"x":${nested(MAX_JSON_DEPTH - 1)}}` }, { maxDepth: MAX_JSON_DEPTH }).ok).to.equal(true);
  });

  it('jsonObjectMembers gives each member as written', () => {
    expect(jsonObjectMembers(' { "a" : 1.10 , "b\\"c":"}]", "n":{"x":[1,{"y":"]"}]} ,"z":null} ')).to.deep.equal([
      { keyRaw: '"a"', raw: '1.10' }, { keyRaw: '"b\\"c"', raw: '"}]"' }, { keyRaw: '"n"', raw: '{"x":[1,{"y":"]"}]}' }, { keyRaw: '"z"', raw: 'null' },
    ]);
    expect(jsonObjectMembers('{}')).to.deep.equal([]);
    for (const bad of ['[1]', '"s"', '{"a":1', '{"a":1}x', '{"a" 1}']) expect(jsonObjectMembers(bad), bad).to.equal(null);
  });
});

describe('SOW-DELETE body (item 1)', () => {
  it('refuses every body that is not {filter: non-empty string} or {all: true}', () => {
    const cases: Array<[unknown, RegExp]> = [
      ["/id = 'k1'", /must be an amqp-value map.*got a string/], [["/id = 'k1'"], /got a list/], [Buffer.from('{}'), /got binary/],
      [decodeMessage(encodeMessage({ content_type: 'application/json', body: amqpMessage.data_section(Buffer.from('{"filter":"/a = 1"}')) })).body, /got binary/],
      [null, /got null/], [{}, /give filter .* or all: true/], [{ Filter: "/id = 'k1'" }, /unknown key "Filter" \(known: filter, all\)/],
      [{ filtre: 'x', zz: 1 }, /unknown keys "filtre", "zz"/], [{ filter: null }, /got null/], [{ filter: '' }, /got an empty string/], [{ filter: '  ' }, /got an empty string/],
      [{ filter: 42 }, /got number/], [{ filter: ['x'] }, /got a list/], [{ filter: { expr: 'x' } }, /got object/], [{ all: 'true' }, /all must be the boolean true/],
      [{ all: false }, /give filter/], [{ filter: '/a = 1', all: true }, /not both/],
    ];
    for (const [body, why] of cases) {
      const e = thrown(() => sowDeleteRequest(body, 'sq'));
      expect(e.condition, JSON.stringify(body)).to.equal('amqp:invalid-field');
      expect(e.message, JSON.stringify(body)).to.match(why).and.include('SOW-DELETE sq').and.include('nothing was deleted');
    }
    expect(sowDeleteRequest({ filter: "/id = 'k1'" }, 'sq')).to.deep.equal({ filter: "/id = 'k1'", all: false });
    expect(sowDeleteRequest({ filter: "/id = 'k1'", all: false }, 'sq')).to.deep.equal({ filter: "/id = 'k1'", all: false });
    expect(sowDeleteRequest({ all: true }, 'sq')).to.deep.equal({ all: true });
  });
});
