/**
 * Qpid address strings and queue argument values: pure functions, no I/O.
 * See docs/addresses.md for the grammar and the attach each address produces.
 */
export { AddressSyntaxError, parseAddress, parseQpidMap, QPID_OPTIONS } from './parser.js';
export type { ParsedAddress, QpidValue } from './parser.js';
export {
  addressToLinkOptions,
  SELECTOR_FILTER_CODE,
  LEGACY_DIRECT_FILTER_CODE,
  LEGACY_TOPIC_FILTER_CODE,
  SELECTOR_FILTER_SYMBOL,
  LEGACY_DIRECT_FILTER_SYMBOL,
  LEGACY_TOPIC_FILTER_SYMBOL,
} from './link-options.js';
export type { AddressLinkOptions, DescribedValue } from './link-options.js';
export { parseDuration, toBool, toInt, toStr, toDurationMs } from './values.js';
