/**
 * The JSON view of a message body (wire.md 3): an amqp-value string holding JSON text, an
 * amqp-value map, or data section(s) with content-type application/json.
 */
export type JsonResult = { ok: true; value: unknown } | { ok: false; reason: string };

function plain(v: unknown): unknown {
  if (v === null || v === undefined) return null;
  if (typeof v === 'bigint') return Number(v);
  if (Buffer.isBuffer(v)) return v.toString('base64');
  if (v instanceof Date) return v.getTime();
  if (Array.isArray(v)) return v.map(plain);
  if (typeof v === 'object') {
    const anyv = v as any;
    if (anyv.typecode !== undefined && anyv.content !== undefined) return plain(anyv.content);
    const o: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) o[k] = plain(x);
    return o;
  }
  return v;
}

export function jsonBody(message: any): JsonResult {
  const body = message?.body;
  if (typeof body === 'string') {
    try { return { ok: true, value: JSON.parse(body) }; }
    catch (e) { return { ok: false, reason: 'body is not JSON text: ' + (e as Error).message }; }
  }
  if (body && typeof body === 'object' && body.typecode === 0x75) {
    const ct = String(message.content_type ?? '');
    if (!ct.startsWith('application/json') && !ct.endsWith('+json')) return { ok: false, reason: `data body with content-type ${ct || '(none)'} is not application/json` };
    const buf: Buffer = body.multiple ? Buffer.concat(body.content) : body.content;
    try { return { ok: true, value: JSON.parse(buf.toString('utf8')) }; }
    catch (e) { return { ok: false, reason: 'application/json body does not parse: ' + (e as Error).message }; }
  }
  if (Buffer.isBuffer(body)) {
    const ct = String(message.content_type ?? '');
    if (ct.startsWith('application/json')) {
      try { return { ok: true, value: JSON.parse(body.toString('utf8')) }; } catch (e) { return { ok: false, reason: 'application/json body does not parse: ' + (e as Error).message }; }
    }
    return { ok: false, reason: 'binary body is not JSON' };
  }
  if (body && typeof body === 'object' && !Array.isArray(body) && body.typecode === undefined) return { ok: true, value: plain(body) };
  return { ok: false, reason: 'body is not a JSON string, map or application/json data' };
}
