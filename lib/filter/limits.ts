/**
 * Safety limits of the filter language. Every one is enforced at compile time (a breach is
 * a FilterSyntaxError) except MAX_MATCH_INPUT and MAX_EVAL_STEPS, which bound the work of
 * one evaluation (a breach makes the operation NULL).
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
  /** Most regex program instructions of all the content LIKE patterns of one filter together. */
  MAX_FILTER_REGEX_PROGRAM: 50000,
  /**
   * Work one evaluation of a filter over one message may do where it grows with the message,
   * in steps: LIKE (an NFA thread examined or state visited, a code unit scanned), INSTR,
   * UPPER/LOWER and BEGINS/ENDS with computed items (a code unit), array elements visited by
   * comparisons, IN, BETWEEN and body paths (an element), strings compared (16 code units) or
   * read as numbers (a code unit). An operation that would go past it is NULL, and so is
   * every such operation after it in that evaluation (docs/filters.md "Limits").
   */
  MAX_EVAL_STEPS: 2_000_000,
} as const;

export type FilterLimits = typeof FILTER_LIMITS;
