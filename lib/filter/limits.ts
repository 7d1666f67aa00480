/**
 * Safety limits of the filter language. Every one is enforced at compile time (a breach is
 * a FilterSyntaxError) except MAX_MATCH_INPUT, which bounds the work of one LIKE test.
 */
export const FILTER_LIMITS = {
  /** Longest accepted expression text, in UTF-16 code units (64 KiB). */
  MAX_EXPRESSION_LENGTH: 65536,
  /** Deepest nesting: parentheses, unary operators, and the depth of the expression tree. */
  MAX_DEPTH: 64,
  /** Most nodes in one expression tree (literals, lookups, operators, list items). */
  MAX_NODES: 10000,
  /** Longest string or number literal, in code units (after quote unescaping). */
  MAX_LITERAL_LENGTH: 8192,
  /** Longest string a LIKE pattern / BEGINS / ENDS is tested against (64 KiB); longer is NULL. */
  MAX_MATCH_INPUT: 65536,
  /** Largest repetition count in a regex quantifier `{n,m}`. */
  MAX_REGEX_REPEAT: 1000,
  /** Most instructions in one compiled regex program (bounds memory and time per character). */
  MAX_REGEX_PROGRAM: 20000,
} as const;

export type FilterLimits = typeof FILTER_LIMITS;
