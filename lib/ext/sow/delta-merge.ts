/**
 * The `delta` operation's merge of a delta message into a SOW record (semantics.md 2), on the
 * encoded bytes of both: split from sow-structure.ts, which only calls mergeDelta.
 */
import { TidemarkError, Conditions } from '../../core/errors.js';
import { jsonText, rawSections, jsonObjectMembers, mapEntries, encodeAmqpValue, type RawSection } from '../../codec/json-body.js';
import { encodeMessage } from '../../codec/message-bytes.js';
import { amqpTypes } from '../../codec/amqp.js';
import { ownCopy } from '../../codec/own-bytes.js';

/**
 * Delta merge (semantics.md 2): top-level fields of the delta replace the record's; nested
 * objects and arrays are replaced whole. The result keeps the body form of the record it
 * merged into (amqp-value string, amqp-value map, or application/json data), its properties
 * and application properties byte for byte, and its header's durable and priority.
 *
 * The merge splices; it does not re-encode the JSON view. Every field the delta does not name
 * keeps its exact encoding: in a map body its AMQP type (a timestamp, a ulong past 2^53,
 * binary, a symbol, a uuid, a double 1.0, ...), which the JSON view (a Date as ms, a Buffer as
 * base64, a bigint as a double) used to change; in JSON text the text as written
 * (12345678901234567890 stays so, where JSON.parse keeps 17 digits). The delta's own fields
 * keep the delta's encoding when it has the record's form (its map entries, or its members'
 * JSON text); across forms they are encoded from its JSON view, as before.
 * `deltaBytes`: the delta message as received (without it, the fields come from `delta`).
 */
export function mergeDelta(prevBytes: Buffer, delta: Record<string, unknown>, queueName: string, deltaBytes?: Buffer): Buffer {
  if (typeof delta !== 'object' || delta === null || Array.isArray(delta)) throw new TidemarkError(Conditions.decodeError, `queue ${queueName}: delta body must be a JSON object`);
  const notObject = () => new TidemarkError(Conditions.decodeError, `queue ${queueName}: existing record is not a JSON object; delta cannot merge`);
  let secs: RawSection[];
  try { secs = rawSections(prevBytes); } catch { throw notObject(); }
  const kept: Buffer[] = [];
  const body: RawSection[] = [];
  let header: Buffer | undefined;
  for (const s of secs) {
    if (s.code === 0x70) {
      const h = amqpTypes.unwrap(s.value) as unknown[] | undefined; // [durable, priority, ttl, first-acquirer, delivery-count]
      header = headerSection(h?.[0], h?.[1]);
    } else if (s.code === 0x73 || s.code === 0x74) kept.push(prevBytes.subarray(s.start, s.end));
    else if (s.code === 0x75 || s.code === 0x76 || s.code === 0x77) body.push(s);
  }
  const fields = deltaFields(delta, deltaBytes);
  let merged: Buffer | undefined;
  const first = body[0];
  if (first && first.code === 0x77 && body.length === 1) {
    const c = prevBytes[first.valueStart];
    if (c === 0xa1 || c === 0xb1 || c === 0xa3 || c === 0xb3) {
      const text = spliceJson(String(amqpTypes.unwrap(first.value)), false, fields);
      if (text !== undefined) merged = withDescriptor(prevBytes, first, sized(0xa1, 0xb1, Buffer.from(text, 'utf8')));
    } else if (c === 0xc1 || c === 0xd1) {
      merged = spliceMap(prevBytes, first, fields);
    } else if (c === 0xa0 || c === 0xb0) {
      // Binary with content-type application/json (what rhea sends for a Buffer body): merged
      // as data, as the JSON-view merge always made it (wire-contract spec, wire.md 3).
      const text = spliceJson((amqpTypes.unwrap(first.value) as Buffer).toString('latin1'), true, fields);
      if (text !== undefined) merged = Buffer.concat([DATA_DESCRIPTOR, sized(0xa0, 0xb0, Buffer.from(text, 'latin1'))]);
    }
  } else if (first && body.every((s) => s.code === 0x75)) {
    // JSON text in data sections: spliced as bytes (latin1 maps each byte to one char), so
    // untouched members keep their bytes even where they are not valid UTF-8.
    const data = Buffer.concat(body.map((s) => amqpTypes.unwrap(s.value) as Buffer));
    const text = spliceJson(data.toString('latin1'), true, fields);
    if (text !== undefined) merged = withDescriptor(prevBytes, first, sized(0xa0, 0xb0, Buffer.from(text, 'latin1')));
  }
  if (!merged) throw notObject();
  return ownCopy(Buffer.concat(header ? [header, ...kept, merged] : [...kept, merged])); // kept: bytes of its own
}

const DATA_DESCRIPTOR = Buffer.from([0x00, 0x53, 0x75]);

/** A delta's fields: each as JSON text (for a JSON-text record) and as AMQP bytes (for a map record). */
type DeltaFields = Map<string, { text(): string; amqp(): Buffer }>;

function deltaFields(delta: Record<string, unknown>, deltaBytes: Buffer | undefined): DeltaFields {
  const fromView = (): DeltaFields => new Map(Object.keys(delta).map((k) => [k, { text: () => jsonText(delta[k]), amqp: () => encodeAmqpValue(delta[k]) }]));
  if (!deltaBytes) return fromView();
  let secs: RawSection[];
  try { secs = rawSections(deltaBytes); } catch { return fromView(); }
  const body = secs.filter((s) => s.code === 0x75 || s.code === 0x76 || s.code === 0x77);
  const out: DeltaFields = new Map();
  const one = body.length === 1 && body[0].code === 0x77 ? body[0] : undefined;
  if (one && (deltaBytes[one.valueStart] === 0xc1 || deltaBytes[one.valueStart] === 0xd1)) {
    const m = mapEntries(deltaBytes, one.valueStart, one.end);
    if (!m) return fromView();
    for (const e of m.entries) out.set(e.key, { text: () => jsonText(delta[e.key]), amqp: () => deltaBytes.subarray(e.keyEnd, e.end) });
  } else {
    let text: string | undefined;
    if (one) { const v = amqpTypes.unwrap(one.value); if (typeof v === 'string') text = v; else if (Buffer.isBuffer(v)) text = v.toString('utf8'); }
    else if (body.length && body.every((s) => s.code === 0x75)) text = Buffer.concat(body.map((s) => amqpTypes.unwrap(s.value) as Buffer)).toString('utf8');
    const members = text === undefined ? null : jsonObjectMembers(text);
    if (!members) return fromView();
    for (const mm of members) {
      let k: string;
      try { k = JSON.parse(mm.keyRaw); } catch { return fromView(); }
      out.set(k, { text: () => mm.raw, amqp: () => encodeAmqpValue(delta[k]) }); // a repeated key: the last one, as JSON.parse
    }
  }
  // The raw fields are the view's fields (the view was read from the same body); if not, the view.
  const keys = Object.keys(delta);
  return out.size === keys.length && keys.every((k) => out.has(k)) ? out : fromView();
}

/** The record's JSON object text with the delta's fields spliced in, or undefined if it is not one. */
function spliceJson(text: string, latin1: boolean, fields: DeltaFields): string | undefined {
  const members = jsonObjectMembers(text);
  if (!members) return undefined;
  const enc = (t: string) => (latin1 ? Buffer.from(t, 'utf8').toString('latin1') : t);
  const parts: string[] = [];
  const done = new Set<string>();
  for (const m of members) {
    let k: string;
    try { k = JSON.parse(latin1 ? Buffer.from(m.keyRaw, 'latin1').toString('utf8') : m.keyRaw); } catch { return undefined; }
    const f = fields.get(k);
    if (!f) parts.push(m.keyRaw + ':' + m.raw); // untouched: as written (a repeated key stays repeated)
    else if (!done.has(k)) { done.add(k); parts.push(m.keyRaw + ':' + enc(f.text())); }
  }
  for (const [k, f] of fields) if (!done.has(k)) parts.push(enc(JSON.stringify(k) + ':' + f.text()));
  return '{' + parts.join(',') + '}';
}

/** The record's map body section with the delta's entries spliced in (new keys of the record's key type). */
function spliceMap(b: Buffer, s: RawSection, fields: DeltaFields): Buffer | undefined {
  let m: ReturnType<typeof mapEntries>;
  try { m = mapEntries(b, s.valueStart, s.end); } catch { return undefined; }
  if (!m) return undefined;
  const parts: Buffer[] = [];
  let n = 0;
  const done = new Set<string>();
  for (const e of m.entries) {
    const f = fields.get(e.key);
    if (!f) { parts.push(b.subarray(e.start, e.end)); n++; }
    else if (!done.has(e.key)) { done.add(e.key); parts.push(b.subarray(e.start, e.keyEnd), f.amqp()); n++; }
  }
  const symbolic = m.entries.length > 0 && (m.entries[0].keyCode === 0xa3 || m.entries[0].keyCode === 0xb3);
  for (const [k, f] of fields) {
    if (done.has(k)) continue;
    const kb = Buffer.from(k, 'utf8');
    parts.push(symbolic ? sized(0xa3, 0xb3, kb) : sized(0xa1, 0xb1, kb), f.amqp());
    n++;
  }
  const size = parts.reduce((a, p) => a + p.length, 0);
  let head: Buffer;
  if (m.code === 0xc1 && size + 1 <= 0xff && 2 * n <= 0xff) head = Buffer.from([0xc1, size + 1, 2 * n]);
  else { head = Buffer.alloc(9); head[0] = 0xd1; head.writeUInt32BE(size + 4, 1); head.writeUInt32BE(2 * n, 5); }
  return Buffer.concat([b.subarray(s.start, s.valueStart), head, ...parts]);
}

/** A variable-width value: the 1-byte-size constructor when it fits, else the 4-byte one. */
function sized(code8: number, code32: number, data: Buffer): Buffer {
  if (data.length <= 0xff) return Buffer.concat([Buffer.from([code8, data.length]), data]);
  const h = Buffer.alloc(5); h[0] = code32; h.writeUInt32BE(data.length, 1);
  return Buffer.concat([h, data]);
}

/** A new section value under the descriptor of the section it replaces. */
function withDescriptor(b: Buffer, s: RawSection, value: Buffer): Buffer {
  return Buffer.concat([b.subarray(s.start, s.valueStart), value]);
}

/** A header with the record's durable and priority (its ttl and counts are per publish); undefined if neither is set. */
function headerSection(durable: unknown, priority: unknown): Buffer | undefined {
  const fields: Record<string, unknown> = {};
  if (durable !== undefined && durable !== null) fields.durable = durable;
  if (priority !== undefined && priority !== null) fields.priority = priority;
  if (!Object.keys(fields).length) return undefined;
  const enc = encodeMessage(fields);
  const h = rawSections(enc).find((x) => x.code === 0x70);
  return h ? Buffer.from(enc.subarray(h.start, h.end)) : undefined;
}

