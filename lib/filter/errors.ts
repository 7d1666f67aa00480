/** Longest piece of the expression quoted in an error message. */
const MAX_QUOTED = 200;

function quote(text: string): string {
  return text.length > MAX_QUOTED ? `${text.slice(0, MAX_QUOTED)}…` : text;
}

/**
 * A filter, subject pattern or order_by spec that cannot be compiled: bad syntax or a
 * breached safety limit. The message reads `expected ')' at 11 in "/a > (1 + 2"`.
 */
export class FilterSyntaxError extends Error {
  /** 0-based offset (UTF-16 code units) in the text where the problem was found. */
  readonly position: number;
  /** What the parser expected there (or the limit that was breached). */
  readonly expected: string;
  /** The text being compiled. */
  readonly text: string;

  /**
   * @param expected what was expected at `position`
   * @param detail   replaces the leading `expected …` of the message when given
   */
  constructor(expected: string, position: number, text: string, detail?: string) {
    super(`${detail ?? `expected ${expected}`} at ${position} in "${quote(text)}"`);
    this.name = 'FilterSyntaxError';
    this.position = position;
    this.expected = expected;
    this.text = text;
  }
}
