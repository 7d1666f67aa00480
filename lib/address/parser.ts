/**
 * Qpid address strings (qpid::messaging grammar), parsed without I/O.
 *
 *   address := name [ '/' subject ] [ ';' [ map ] ]
 *   name    := quoted | word-without('/', ';')
 *   subject := quoted | word-without(';')
 *   map     := '{' [ key ':' value { ',' key ':' value } [ ',' ] ] '}'
 *   list    := '[' [ value { ',' value } [ ',' ] ] ']'
 *   key     := word | quoted
 *   value   := word | quoted | map | list
 *   quoted  := '"' any-but-'"' '"' | "'" any-but-"'" "'"      (no escapes, as in Qpid)
 *   word    := one or more characters that are neither whitespace nor one of  ' " { } [ ] , :
 *
 * Qpid also reserves '/' inside options; we accept it in bare keys and values (a strict
 * superset) because Tidemark's SOW key paths start with it: {sow.key: /id}.
 *
 * A bare word value is typed the way qpid::types::Variant::parse types it: `True`, `False`,
 * `true`, `false` are booleans, decimal integers are integers, decimal floats are floats,
 * anything else is a string. A quoted value is always a string.
 */

/** Qpid map/list value after parsing: string, number (integer or float), boolean, null, QpidMap, QpidValue[] */
export type QpidValue = string | number | boolean | null | QpidValue[] | { [k: string]: QpidValue };

export interface ParsedAddress {
  name: string;
  subject?: string;
  options: { [k: string]: QpidValue };
}

/**
 * A malformed address or an address option that cannot be honoured.
 * `position` is the 0-based character offset in the parsed text where the problem was found;
 * it is -1 for problems found after parsing (option validation in addressToLinkOptions).
 */
export class AddressSyntaxError extends Error {
  readonly position: number;
  constructor(message: string, position = -1) {
    super(message);
    this.name = 'AddressSyntaxError';
    this.position = position;
  }
}

/** Characters that end a bare word inside a map or list (Qpid's set minus '/', see above). */
const RESERVED = '\'"{}[],:';
const WHITESPACE = ' \t\n\v\f\r';
/** `name; {…}`: an address carrying Qpid options (the broker reads such attach addresses too). */
export const QPID_OPTIONS = /;\s*\{/;
/** Levels of maps and lists an address may nest (addresses nest 3 or 4 deep; AMQP values allow 256). */
export const MAX_DEPTH = 64;

const INT_RE = /^[+-]?\d+$/;
const FLOAT_RE = /^[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?$/;

/** Types a bare word as qpid::types::Variant::parse does (booleans, integers, floats, else string). */
export function typeWord(word: string): QpidValue {
  if (word === 'True' || word === 'true') return true;
  if (word === 'False' || word === 'false') return false;
  if (INT_RE.test(word)) {
    const n = Number(word);
    // Beyond 2^53 a JS number would silently change the value: keep the text instead.
    return Number.isSafeInteger(n) ? n : word;
  }
  if (FLOAT_RE.test(word)) {
    const n = Number(word);
    return Number.isFinite(n) ? n : word;
  }
  return word;
}

/** Sets a key on a plain object without ever touching its prototype (`__proto__` is just a key). */
export function setKey(map: { [k: string]: QpidValue }, key: string, value: QpidValue): void {
  Object.defineProperty(map, key, { value, enumerable: true, writable: true, configurable: true });
}

class Parser {
  pos = 0;
  constructor(private readonly input: string) {}

  fail(message: string, position: number = this.pos): never {
    throw new AddressSyntaxError(
      `${message} at position ${position} of ${JSON.stringify(this.input)}`,
      position,
    );
  }

  eos(): boolean {
    return this.pos >= this.input.length;
  }

  isWs(): boolean {
    return WHITESPACE.includes(this.input[this.pos]!);
  }

  skipWs(): void {
    while (!this.eos() && this.isWs()) this.pos++;
  }

  /** Skips whitespace; consumes `c` if it is next. */
  readChar(c: string): boolean {
    this.skipWs();
    if (!this.eos() && this.input[this.pos] === c) {
      this.pos++;
      return true;
    }
    return false;
  }

  peek(): string | undefined {
    this.skipWs();
    return this.eos() ? undefined : this.input[this.pos];
  }

  readQuoted(): string | undefined {
    this.skipWs();
    const q = this.input[this.pos];
    if (q !== '"' && q !== "'") return undefined;
    const start = this.pos;
    const end = this.input.indexOf(q, start + 1);
    if (end < 0) this.fail(`Unterminated string (opening ${q} never closed)`, start);
    this.pos = end + 1;
    return this.input.slice(start + 1, end);
  }

  readWord(delims: string): string | undefined {
    this.skipWs();
    const start = this.pos;
    while (!this.eos() && !this.isWs() && !delims.includes(this.input[this.pos]!)) this.pos++;
    return this.pos > start ? this.input.slice(start, this.pos) : undefined;
  }

  readValueIfExists(): QpidValue | undefined {
    const word = this.readWord(RESERVED);
    if (word !== undefined) return typeWord(word);
    const quoted = this.readQuoted();
    if (quoted !== undefined) return quoted;
    const map = this.readMap();
    if (map !== undefined) return map;
    return this.readList();
  }

  readValue(): QpidValue {
    const v = this.readValueIfExists();
    if (v === undefined) {
      const c = this.peek();
      this.fail(c === undefined ? 'Expected a value but the text ended' : `Expected a value, found '${c}'`);
    }
    return v;
  }

  /** Maps and lists open around the value being read. */
  depth = 0;

  /** Past MAX_DEPTH levels the reader would recurse until the stack overflowed (a broker reads addresses too). */
  enter(open: number): void {
    if (++this.depth > MAX_DEPTH) this.fail(`Nested too deeply (more than ${MAX_DEPTH} levels of maps and lists)`, open);
  }

  readMap(): { [k: string]: QpidValue } | undefined {
    this.skipWs();
    const open = this.pos;
    if (!this.readChar('{')) return undefined;
    this.enter(open);
    try { return this.readMapBody(open); } finally { this.depth--; }
  }

  readMapBody(open: number): { [k: string]: QpidValue } {
    const map: { [k: string]: QpidValue } = {};
    for (;;) {
      const keyPos = (this.skipWs(), this.pos);
      const key = this.readWord(RESERVED) ?? this.readQuoted();
      if (key === undefined) break; // empty map or trailing comma
      if (!this.readChar(':')) {
        const c = this.peek();
        this.fail(
          `Expected ':' after key '${key}' (key at position ${keyPos})` +
            (c === undefined ? ' but the text ended' : `, found '${c}'`),
        );
      }
      setKey(map, key, this.readValue());
      if (!this.readChar(',')) break;
    }
    if (!this.readChar('}')) {
      const c = this.peek();
      this.fail(
        `Unmatched '{' (opened at position ${open}): expected ',' or '}'` +
          (c === undefined ? ' but the text ended' : `, found '${c}'`),
      );
    }
    return map;
  }

  readList(): QpidValue[] | undefined {
    this.skipWs();
    const open = this.pos;
    if (!this.readChar('[')) return undefined;
    this.enter(open);
    try { return this.readListBody(open); } finally { this.depth--; }
  }

  readListBody(open: number): QpidValue[] {
    const list: QpidValue[] = [];
    for (;;) {
      const item = this.readValueIfExists();
      if (item === undefined) break; // empty list or trailing comma
      list.push(item);
      if (!this.readChar(',')) break;
    }
    if (!this.readChar(']')) {
      const c = this.peek();
      this.fail(
        `Unmatched '[' (opened at position ${open}): expected ',' or ']'` +
          (c === undefined ? ' but the text ended' : `, found '${c}'`),
      );
    }
    return list;
  }

  expectEnd(what: string): void {
    this.skipWs();
    if (!this.eos()) this.fail(`Unexpected characters after ${what}: '${this.input.slice(this.pos)}'`);
  }
}

/** qpid::messaging address grammar: name[/subject][; {options}], bare words, quoted strings ('..' or ".."), nested maps {k: v, ...} and lists [a, b], True/False (and true/false), integers and floats, keys may be quoted or bare (dotted words like qpid.max_count allowed bare). */
export function parseAddress(text: string): ParsedAddress {
  if (typeof text !== 'string') throw new AddressSyntaxError('Address must be a string', 0);
  const p: Parser = new Parser(text);
  const name = p.readQuoted() ?? p.readWord('/;');
  if (name === undefined) p.fail(p.eos() ? 'Expected a name but the address is empty' : 'Expected a name');
  const result: ParsedAddress = { name, options: {} };
  if (p.readChar('/')) {
    const subject = p.readQuoted() ?? p.readWord(';');
    if (subject) result.subject = subject;
  }
  if (p.readChar(';')) {
    const c = p.peek();
    if (c !== undefined) {
      if (c !== '{') p.fail(`Expected '{' after ';', found '${c}'`);
      result.options = p.readMap()!;
    }
  }
  p.expectEnd('address');
  return result;
}

/** Parses a Qpid map literal alone, e.g. "{username: guest, sasl_mechanisms: PLAIN}" (used for --connection-options). */
export function parseQpidMap(text: string): { [k: string]: QpidValue } {
  if (typeof text !== 'string') throw new AddressSyntaxError('Map must be a string', 0);
  const p: Parser = new Parser(text);
  const c = p.peek();
  if (c !== '{') p.fail(c === undefined ? "Expected '{' but the text is empty" : `Expected '{', found '${c}'`);
  const map = p.readMap()!;
  p.expectEnd('map');
  return map;
}
