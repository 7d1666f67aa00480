/**
 * The filter language (semantics.md section 3, wire.md section 4): content filters,
 * JMS selectors, legacy subject filters and order_by. Pure: no I/O, no AMQP.
 * Reference: docs/filters.md.
 */
export type { Dialect, Filter, FilterEnv } from './types.js';
export { FilterSyntaxError } from './errors.js';
export { compileFilter } from './evaluate.js';
export { compileSubjectFilter, type SubjectFilter } from './subject.js';
export { compileOrderBy, type OrderBy, type OrderByKey } from './order-by.js';
export { lookupJsonPath } from './json-path.js';
export { FILTER_LIMITS, type FilterLimits } from './limits.js';
export type { Budget } from './search.js';
export { parseFilter } from './parser.js';
export { show as showExpr, type Expr } from './ast.js';
export { tokenize, type Token } from './lexer.js';
