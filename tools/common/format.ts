/**
 * Printing messages and tables: plain JS values from what rhea decoded (bigints, buffers,
 * described and typed values), a JSON-ish text form, and aligned tables.
 */

/** A JSON-safe form of a decoded AMQP value. */
export function toPlain(v: unknown): unknown {
  if (v === null || v === undefined) return null;
  if (typeof v === 'bigint') return Number.isSafeInteger(Number(v)) ? Number(v) : v.toString();
  if (typeof v === 'number') return Number.isFinite(v) ? v : String(v);
  if (typeof v === 'string' || typeof v === 'boolean') return v;
  if (v instanceof Date) return v.toISOString();
  if (Buffer.isBuffer(v) || v instanceof Uint8Array) {
    const b = Buffer.from(v);
    const text = b.toString('utf8');
    return Buffer.from(text, 'utf8').equals(b) ? text : { binary: b.toString('base64') };
  }
  if (Array.isArray(v)) return v.map(toPlain);
  if (typeof v === 'object') {
    const o = v as Record<string, any>;
    // a data section (rhea: {typecode: 0x75, content}) or a sequence section
    if (typeof o.typecode === 'number' && 'content' in o && Object.keys(o).length <= 3) return toPlain(o.content);
    // a described value rhea could not map
    if ('descriptor' in o && 'value' in o && Object.keys(o).length <= 3 && typeof o.descriptor === 'object') {
      return { descriptor: toPlain(o.descriptor?.value ?? o.descriptor), value: toPlain(o.value) };
    }
    // a typed value ({type, value})
    if (o.type && typeof o.type === 'object' && 'value' in o && typeof o.type.name === 'string') return toPlain(o.value);
    if (v instanceof Map) {
      const out: Record<string, unknown> = {};
      for (const [k, val] of v) out[String(k)] = toPlain(val);
      return out;
    }
    const out: Record<string, unknown> = {};
    for (const [k, val] of Object.entries(o)) out[k] = toPlain(val);
    return out;
  }
  return String(v);
}

/** A message body as text: strings as they are, everything else as JSON. */
export function bodyText(body: unknown): string {
  const p = toPlain(body);
  if (p === null) return '';
  if (typeof p === 'string') return p;
  return JSON.stringify(p);
}

const PROPERTY_FIELDS = ['message_id', 'user_id', 'to', 'subject', 'reply_to', 'correlation_id', 'content_type', 'content_encoding', 'absolute_expiry_time', 'creation_time', 'group_id', 'group_sequence', 'reply_to_group_id'];
const HEADER_FIELDS = ['durable', 'priority', 'ttl', 'first_acquirer', 'delivery_count'];

function pick(m: any, fields: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of fields) if (m[f] !== undefined && m[f] !== null) out[f] = toPlain(m[f]);
  return out;
}

export function messageProperties(m: any): Record<string, unknown> { return pick(m, PROPERTY_FIELDS); }
export function messageHeader(m: any): Record<string, unknown> { return pick(m, HEADER_FIELDS); }

/** The object `drain -p json` prints for a message. */
export function messageObject(m: any): { body: unknown; properties: Record<string, unknown>; application_properties: unknown; annotations: Record<string, unknown>; header: Record<string, unknown> } {
  return {
    body: toPlain(m.body),
    properties: messageProperties(m),
    application_properties: toPlain(m.application_properties ?? {}),
    annotations: (toPlain(m.message_annotations ?? {}) ?? {}) as Record<string, unknown>,
    header: messageHeader(m),
  };
}

/** One JSON object per message (`drain -p json`). */
export function messageJson(m: any): string {
  return JSON.stringify(messageObject(m));
}

const DURATION_UNITS: Array<[string, number]> = [['d', 86400000], ['h', 3600000], ['m', 60000], ['s', 1000]];

/**
 * Milliseconds as a duration of the queue-argument syntax (wire.md 2.3): the largest unit
 * that divides it exactly (`7d`, `90m`, `1500ms`); 0 is `0s`. Anything but a non-negative
 * integer is returned as text unchanged.
 */
export function formatDuration(ms: unknown): string {
  if (typeof ms !== 'number' || !Number.isSafeInteger(ms) || ms < 0) return typeof ms === 'string' ? ms : JSON.stringify(ms);
  if (ms === 0) return '0s';
  for (const [unit, size] of DURATION_UNITS) if (ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}

const LABELS: Record<string, string> = {
  message_id: 'Message-Id', user_id: 'User-Id', to: 'To', subject: 'Subject', reply_to: 'Reply-To',
  correlation_id: 'Correlation-Id', content_type: 'Content-Type', content_encoding: 'Content-Encoding',
  absolute_expiry_time: 'Absolute-Expiry-Time', creation_time: 'Creation-Time', group_id: 'Group-Id',
  group_sequence: 'Group-Sequence', reply_to_group_id: 'Reply-To-Group-Id',
  durable: 'Durable', priority: 'Priority', ttl: 'TTL', first_acquirer: 'First-Acquirer', delivery_count: 'Delivery-Count',
};

/** Header lines (`drain --print-headers`), one `Label: value` each, like qpid's drain. */
export function headerLines(m: any): string[] {
  const lines: string[] = [];
  for (const [k, v] of Object.entries({ ...messageProperties(m), ...messageHeader(m) })) lines.push(`${LABELS[k] ?? k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`);
  lines.push(`Properties: ${JSON.stringify(toPlain(m.application_properties ?? {}))}`);
  lines.push(`Annotations: ${JSON.stringify(toPlain(m.message_annotations ?? {}))}`);
  return lines;
}

/** An aligned text table; the header row is underlined. */
export function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]))).join('  ').trimEnd();
  return [line(headers), line(widths.map((w) => '='.repeat(w))), ...rows.map(line)].join('\n');
}

/**
 * The text-mode line for a message with `x-opt-tm-cmd` that is not a record (undefined for a
 * record: `publish`, `sow`, or no command, whose body is printed):
 * `-- group_begin --` (`-- group_begin (resumed after key K) --` when its checkpoint resumes a
 * bootstrap snapshot after key K, `-- group_begin (changes since SCN N) --` for an incremental
 * bootstrap), `-- group_end --`, `-- completed --`, `OOF(<reason>) key=K`,
 * `-- delete key=K --`, and `-- <cmd> key=K --` for any other command.
 */
export function commandLine(cmd: string | undefined, ann: Record<string, unknown>): string | undefined {
  if (cmd === undefined || cmd === 'publish' || cmd === 'sow') return undefined;
  const key = ann['x-opt-tm-key'] !== undefined && ann['x-opt-tm-key'] !== null ? String(toPlain(ann['x-opt-tm-key'])) : undefined;
  if (cmd === 'oof') {
    const reason = ann['x-opt-tm-oof-reason'] !== undefined ? String(ann['x-opt-tm-oof-reason']) : '';
    return `OOF(${reason}) key=${key ?? ''}`;
  }
  if (cmd === 'group_begin') {
    const cp = toPlain(ann['x-opt-tm-checkpoint']) as Record<string, unknown> | null;
    const after = cp && typeof cp === 'object' ? cp.snapshot_offset : undefined;
    if (after !== undefined && after !== null) return `-- group_begin (resumed after key ${after}) --`;
    // An incremental bootstrap (semantics.md 8): what changed since SCN N, tombstones included.
    const since = cp && typeof cp === 'object' ? Number(cp.bootstrap_since_scn ?? 0) : 0;
    return since > 0 ? `-- group_begin (changes since SCN ${since}) --` : '-- group_begin --';
  }
  if (cmd === 'group_end' || cmd === 'completed') return `-- ${cmd} --`;
  return `-- ${cmd}${key !== undefined ? ` key=${key}` : ''} --`;
}
