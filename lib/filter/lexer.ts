import { FILTER_LIMITS } from './limits.js';
import { FilterSyntaxError } from './errors.js';

/** Words that can never be identifiers (matched case-insensitively). */
export const RESERVED = new Set(['AND', 'OR', 'NOT', 'BETWEEN', 'IN', 'LIKE', 'IS', 'NULL', 'TRUE', 'FALSE']);

export type Token =
  /** Integer or decimal literal; `decimal` when written with '.' or an exponent. */
  | { readonly type: 'number'; readonly pos: number; readonly end: number; readonly value: number | bigint; readonly decimal: boolean }
  /** String literal, quotes removed and doubled quotes unescaped. */
  | { readonly type: 'string'; readonly pos: number; readonly end: number; readonly value: string }
  /** JSON body path, split into segments: names are strings, `[n]` indexes are numbers. */
  | { readonly type: 'path'; readonly pos: number; readonly end: number; readonly segments: readonly (string | number)[] }
  /** Identifier as written; `upper` is for matching contextual words (BEGINS, ESCAPE, UPPER, ...). */
  | { readonly type: 'ident'; readonly pos: number; readonly end: number; readonly name: string; readonly upper: string }
  /** Reserved word, upper-cased. */
  | { readonly type: 'keyword'; readonly pos: number; readonly end: number; readonly word: string }
  /** Operator, normalised: '==' becomes '=', '!=' becomes '<>'. */
  | { readonly type: 'op'; readonly pos: number; readonly end: number; readonly op: string }
  | { readonly type: 'punct'; readonly pos: number; readonly end: number; readonly char: '(' | ')' | ',' }
  | { readonly type: 'eof'; readonly pos: number; readonly end: number };

const UNICODE_LETTER_AT = /\p{L}/uy;
const UNICODE_PART_AT = /[\p{L}\p{N}]/uy;

/** Code units the character at text[i] takes when it matches `re` (two for one outside the BMP), else 0. */
function unicodeWidth(re: RegExp, text: string, i: number): number {
  re.lastIndex = i;
  return re.test(text) ? re.lastIndex - i : 0;
}
/** Width of an identifier's first character at text[i] (letter, `_`, `$`; any Unicode letter, read by code point), or 0. */
function identStartWidth(text: string, i: number): number {
  if (i >= text.length) return 0;
  const c = text.charCodeAt(i);
  if (c < 128) return (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 36 ? 1 : 0;
  return unicodeWidth(UNICODE_LETTER_AT, text, i);
}
/** Width of a later identifier character at text[i] (also digits, any Unicode number), or 0. */
function identPartWidth(text: string, i: number): number {
  if (i >= text.length) return 0;
  const c = text.charCodeAt(i);
  if (c < 128) return (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || (c >= 48 && c <= 57) || c === 95 || c === 36 ? 1 : 0;
  return unicodeWidth(UNICODE_PART_AT, text, i);
}
function isDigit(ch: string): boolean {
  return ch >= '0' && ch <= '9' && ch.length === 1;
}

/** True when a '/' after the last token is the division operator rather than the start of a path. */
function endsOperand(tokens: readonly Token[]): boolean {
  const t = tokens[tokens.length - 1];
  if (t === undefined) return false;
  switch (t.type) {
    case 'number': case 'string': case 'path': return true;
    case 'ident': {
      if (t.upper !== 'WITH') return true;
      // WITH is a word only after BEGINS/ENDS (`BEGINS WITH /prefix` reads a path); elsewhere a property (`with / 2`).
      const before = tokens[tokens.length - 2];
      return !(before?.type === 'ident' && (before.upper === 'BEGINS' || before.upper === 'ENDS'));
    }
    case 'keyword': return t.word === 'TRUE' || t.word === 'FALSE' || t.word === 'NULL';
    case 'punct': return t.char === ')';
    default: return false;
  }
}

/**
 * Splits a filter expression into tokens. A '/' starts a body path where an operand is
 * expected (at the start, after an operator, '(' or ',') and is division after an operand.
 * Inside a path, '/' directly followed by a letter, '_', '$' or a quote continues the path,
 * so write division with a space or a non-name operand: `/a / 2`, `/a/2` (a segment never
 * starts with a digit).
 */
export function tokenize(text: string): Token[] {
  if (text.length > FILTER_LIMITS.MAX_EXPRESSION_LENGTH) {
    throw new FilterSyntaxError(`at most ${FILTER_LIMITS.MAX_EXPRESSION_LENGTH} characters`, FILTER_LIMITS.MAX_EXPRESSION_LENGTH, text,
      `expression too long (${text.length} characters, max ${FILTER_LIMITS.MAX_EXPRESSION_LENGTH})`);
  }
  const tokens: Token[] = [];
  const n = text.length;
  let i = 0;

  const fail = (expected: string, pos: number, detail?: string): never => {
    throw new FilterSyntaxError(expected, pos, text, detail);
  };

  /** Reads a quoted literal starting at the quote at `start`; returns [value, end]. */
  const readQuoted = (start: number): [string, number] => {
    const q = text[start]!;
    let j = start + 1;
    let value = '';
    let chunk = j;
    for (;;) {
      if (j >= n) fail(`closing ${q}`, n);
      if (text[j] === q) {
        if (text[j + 1] === q) { // doubled quote: one literal quote
          value += text.slice(chunk, j + 1);
          j += 2;
          chunk = j;
          continue;
        }
        value += text.slice(chunk, j);
        if (value.length > FILTER_LIMITS.MAX_LITERAL_LENGTH) {
          fail(`a literal of at most ${FILTER_LIMITS.MAX_LITERAL_LENGTH} characters`, start,
            `literal too long (${value.length} characters, max ${FILTER_LIMITS.MAX_LITERAL_LENGTH})`);
        }
        return [value, j + 1];
      }
      j++;
    }
  };

  while (i < n) {
    const ch = text[i]!;
    if (ch === ' ' || ch === '\t' || ch === '\n' || ch === '\r' || ch === '\f' || ch === '\v') { i++; continue; }
    const start = i;

    if (ch === '/' && !endsOperand(tokens)) {
      const segments: (string | number)[] = [];
      for (;;) {
        i++; // the '/'
        const c = text[i] ?? '';
        const w = identStartWidth(text, i);
        if (c === '"' || c === "'") {
          const [value, end] = readQuoted(i);
          if (value === '') fail('a path segment', i);
          segments.push(value);
          i = end;
        } else if (w > 0) {
          let j = i + w;
          for (let k = identPartWidth(text, j); k > 0; k = identPartWidth(text, j)) j += k;
          segments.push(text.slice(i, j));
          i = j;
        } else {
          fail('a path segment', i);
        }
        while (text[i] === '[') {
          let j = i + 1;
          while (j < n && isDigit(text[j]!)) j++;
          if (j === i + 1 || j - i - 1 > 15) fail('an array index', i + 1);
          if (text[j] !== ']') fail("']'", j);
          segments.push(Number(text.slice(i + 1, j)));
          i = j + 1;
        }
        const next = text[i + 1] ?? '';
        if (text[i] === '/' && (identStartWidth(text, i + 1) > 0 || next === '"' || next === "'")) continue;
        break;
      }
      tokens.push({ type: 'path', pos: start, end: i, segments });
      continue;
    }

    if (isDigit(ch) || (ch === '.' && isDigit(text[i + 1] ?? ''))) {
      let j = i;
      while (j < n && isDigit(text[j]!)) j++;
      let decimal = false;
      if (text[j] === '.') {
        decimal = true;
        j++;
        while (j < n && isDigit(text[j]!)) j++;
      }
      if ((text[j] === 'e' || text[j] === 'E')) {
        let k = j + 1;
        if (text[k] === '+' || text[k] === '-') k++;
        if (isDigit(text[k] ?? '')) {
          decimal = true;
          while (k < n && isDigit(text[k]!)) k++;
          j = k;
        }
      }
      const raw = text.slice(i, j);
      if (raw.length > FILTER_LIMITS.MAX_LITERAL_LENGTH) {
        fail(`a literal of at most ${FILTER_LIMITS.MAX_LITERAL_LENGTH} characters`, i,
          `literal too long (${raw.length} characters, max ${FILTER_LIMITS.MAX_LITERAL_LENGTH})`);
      }
      let value: number | bigint = Number(raw);
      // Integers beyond 2^53 stay exact (AMQP longs such as timestamps in ns).
      if (!decimal && !Number.isSafeInteger(value)) value = BigInt(raw);
      tokens.push({ type: 'number', pos: start, end: j, value, decimal });
      i = j;
      continue;
    }

    if (ch === "'" || ch === '"') {
      const [value, end] = readQuoted(i);
      tokens.push({ type: 'string', pos: start, end, value });
      i = end;
      continue;
    }

    const identWidth = identStartWidth(text, i);
    if (identWidth > 0) {
      let j = i + identWidth;
      // '.' is allowed inside a property name (not first): `qpid.subject`.
      for (;;) {
        const k = text[j] === '.' ? 1 : identPartWidth(text, j);
        if (k === 0) break;
        j += k;
      }
      const name = text.slice(i, j);
      const upper = name.toUpperCase();
      if (RESERVED.has(upper)) tokens.push({ type: 'keyword', pos: start, end: j, word: upper });
      else tokens.push({ type: 'ident', pos: start, end: j, name, upper });
      i = j;
      continue;
    }

    if (ch === '(' || ch === ')' || ch === ',') {
      tokens.push({ type: 'punct', pos: start, end: i + 1, char: ch });
      i++;
      continue;
    }

    const two = text.slice(i, i + 2);
    let op: string | undefined;
    let len = 2;
    switch (two) {
      case '==': op = '='; break;
      case '!=': case '<>': op = '<>'; break;
      case '<=': case '>=': op = two; break;
      default:
        len = 1;
        if ('=<>+-*/%'.includes(ch)) op = ch;
    }
    if (op === undefined) fail('an operand or operator', i, `unexpected character '${String.fromCodePoint(text.codePointAt(i)!)}'`);
    tokens.push({ type: 'op', pos: start, end: i + len, op: op! });
    i += len;
  }
  tokens.push({ type: 'eof', pos: n, end: n });
  return tokens;
}
