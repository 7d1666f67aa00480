/**
 * What qpid::messaging's AMQP 1.0 codec puts in an attach for a parsed address (wire.md 2.1,
 * 2.2), as plain data in rhea's option shape. Learned from the behaviour of Qpid's
 * AddressHelper; see docs/addresses.md for every rule and the few deliberate deviations.
 */
import { AddressSyntaxError, setKey, type ParsedAddress, type QpidValue } from './parser.js';
import { toBool, toInt, toStr } from './values.js';

type QpidMap = { [k: string]: QpidValue };

/** A described value as plain data: wrap with `rhea.types.wrap_described(value, descriptor)`
 * (a number descriptor becomes a ulong code, a string one a symbol). */
export interface DescribedValue {
  descriptor: number | string;
  value: QpidValue;
}

/** Filter descriptor codes Qpid sends (ulong form); the broker also accepts the symbols. */
export const SELECTOR_FILTER_CODE = 0x0000468c00000004;
export const LEGACY_DIRECT_FILTER_CODE = 0x0000468c00000000;
export const LEGACY_TOPIC_FILTER_CODE = 0x0000468c00000001;
export const SELECTOR_FILTER_SYMBOL = 'apache.org:selector-filter:string';
export const LEGACY_DIRECT_FILTER_SYMBOL = 'apache.org:legacy-amqp-direct-binding:string';
export const LEGACY_TOPIC_FILTER_SYMBOL = 'apache.org:legacy-amqp-topic-binding:string';

export interface AddressLinkOptions {
  /** link: {name: ...} */
  name?: string;
  /** rhea source terminus: {address, capabilities, dynamic, dynamic_node_properties, distribution_mode, filter, durable, expiry_policy, timeout} */
  source?: Record<string, unknown>;
  /** rhea target terminus: {address, capabilities, dynamic, dynamic_node_properties, durable, expiry_policy, timeout} */
  target?: Record<string, unknown>;
  /** link: {reliability}: 1 (settled) for unreliable/at-most-once and for a browser with no
   * reliability given; 0 (unsettled) for at-least-once/exactly-once; absent otherwise. */
  snd_settle_mode?: 0 | 1;
}

const POLICIES = ['always', 'sender', 'receiver', 'never'];
const TOP_KEYS = ['create', 'assert', 'delete', 'mode', 'node', 'link'];
const NODE_KEYS = ['type', 'durable', 'properties', 'capabilities', 'x-declare', 'x-bindings'];
const LINK_KEYS = [
  'name', 'durable', 'reliability', 'timeout', 'sender-source', 'receiver-target',
  'x-subscribe', 'x-declare', 'x-bindings', 'selector', 'filter',
];
const RELIABILITY = ['unreliable', 'at-most-once', 'at-least-once', 'exactly-once'];

/** A Map: the policy name is the client's (`toString` found Object.prototype's function). */
const LIFETIME_POLICIES = new Map([
  ['delete-on-close', 'amqp:delete-on-close:list'],
  ['delete-if-unused', 'amqp:delete-on-no-links:list'],
  ['delete-if-empty', 'amqp:delete-on-no-messages:list'],
  ['delete-if-unused-and-empty', 'amqp:delete-on-no-links-or-messages:list'],
]);

function refuse(message: string): never {
  throw new AddressSyntaxError(message);
}

function isMap(v: unknown): v is QpidMap {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function mapOption(where: string, v: QpidValue | undefined): QpidMap {
  if (v === undefined) return {};
  if (!isMap(v)) refuse(`Option ${where} must be a map, got ${JSON.stringify(v)}`);
  return v;
}

function checkKeys(where: string, map: QpidMap, allowed: string[]): void {
  for (const k of Object.keys(map)) {
    if (!allowed.includes(k)) {
      // (x-bindings and delete are recognised only to be refused with their own reason)
      refuse(`Unrecognised option: ${where}${k} (allowed: ${allowed.filter((a) => a !== 'x-bindings' && a !== 'delete').join(', ')})`);
    }
  }
}

/** Wraps a lenient-value TypeError as an AddressSyntaxError. */
function lenient<T>(fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    if (e instanceof TypeError) refuse(`Invalid address option ${e.message}`);
    throw e;
  }
}

function policy(key: string, v: QpidValue | undefined): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || !POLICIES.includes(v)) {
    refuse(`Invalid value for ${key}: ${JSON.stringify(v)}; must be one of ${POLICIES.join(', ')}`);
  }
  return v;
}

function applies(p: string | undefined, role: 'sender' | 'receiver'): boolean {
  return p === 'always' || p === role;
}

function filterDescriptor(v: QpidValue | undefined): number | string {
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return v;
  if (typeof v === 'string') {
    const s = v.trim();
    if (/^\d+$/.test(s) || /^0x[0-9a-f]+$/i.test(s)) {
      const n = Number(s);
      if (Number.isSafeInteger(n)) return n;
    } else if (s.length > 0) {
      return s;
    }
  }
  return refuse(
    `Filter descriptor must be a symbol or a non-negative integer code, got ${JSON.stringify(v)}`,
  );
}

function rawFilter(f: QpidValue, filters: Record<string, DescribedValue>): void {
  if (!isMap(f)) refuse('Filter must be a map or a list of maps, each containing name, descriptor and value.');
  for (const field of ['name', 'descriptor', 'value']) {
    if (!(field in f)) refuse(`Filter entry must specify ${field}`);
  }
  const name = lenient(() => toStr('link.filter name', f['name']));
  // Defined, not assigned: a filter named __proto__ set the object's prototype and vanished.
  Object.defineProperty(filters, name, { value: { descriptor: filterDescriptor(f['descriptor']), value: f['value']! }, enumerable: true, writable: true, configurable: true });
}

/** Produces what qpid::messaging sends over AMQP 1.0 for that address, as rhea link options: for role 'sender' the target terminus, for 'receiver' the source (and for a receiver the link-level options). */
export function addressToLinkOptions(addr: ParsedAddress, role: 'sender' | 'receiver'): AddressLinkOptions {
  if (role !== 'sender' && role !== 'receiver') {
    throw new TypeError(`role must be 'sender' or 'receiver', got ${JSON.stringify(role)}`);
  }
  const options = addr.options ?? {};

  // Refusals first, with the messages qpid::messaging gives over AMQP 1.0.
  if ('delete' in options) refuse('Delete policies are not supported over AMQP 1.0 (option delete)');
  if ('x-bindings' in options) refuse('x-bindings are not supported over AMQP 1.0');
  checkKeys('', options, TOP_KEYS);
  const node = mapOption('node', options['node']);
  const link = mapOption('link', options['link']);
  if ('x-bindings' in node) refuse('x-bindings are not supported over AMQP 1.0 (node scoped x-bindings)');
  if ('x-bindings' in link) refuse('x-bindings are not supported over AMQP 1.0 (link scoped x-bindings)');
  if ('x-subscribe' in link) refuse('Link scoped x-subscribe is not supported over AMQP 1.0');
  if ('x-declare' in link) refuse('Link scoped x-declare is not supported over AMQP 1.0; use node: {x-declare: ...}');
  checkKeys('node.', node, NODE_KEYS);
  checkKeys('link.', link, LINK_KEYS);

  const create = policy('create', options['create']);
  const assert = policy('assert', options['assert']);

  let browse = false;
  const mode = options['mode'];
  if (mode !== undefined) {
    if (mode === 'browse') browse = true;
    else if (mode !== 'consume') refuse(`Invalid value for mode: ${JSON.stringify(mode)}; must be 'browse' or 'consume'`);
  }

  let type: 'queue' | 'topic' | undefined;
  if (node['type'] !== undefined) {
    if (node['type'] !== 'queue' && node['type'] !== 'topic') {
      refuse(`Invalid value for node.type: ${JSON.stringify(node['type'])}; must be 'queue' or 'topic'`);
    }
    type = node['type'];
  }
  const durableNode = node['durable'] !== undefined && lenient(() => toBool('node.durable', node['durable']));
  // qpid::messaging sends `durable` only when true; Tidemark declares queues durable unless told
  // otherwise (docs/decisions.md), so an explicit `durable: False` is sent too, or it would be lost.
  const transientNode = node['durable'] !== undefined && !durableNode;
  const durableLink = link['durable'] !== undefined && lenient(() => toBool('link.durable', link['durable']));

  // Node properties: node.properties, then x-declare with `type` renamed and `arguments` spliced in.
  const properties: QpidMap = {};
  for (const [k, v] of Object.entries(mapOption('node.properties', node['properties']))) setKey(properties, k, v);
  if (node['x-declare'] !== undefined) {
    const xd = mapOption('node.x-declare', node['x-declare']);
    const flat: QpidMap = {};
    for (const [k, v] of Object.entries(xd)) {
      if (k === 'arguments') continue;
      setKey(flat, k === 'type' ? 'exchange-type' : k, v);
    }
    for (const [k, v] of Object.entries(mapOption('node.x-declare.arguments', xd['arguments']))) setKey(flat, k, v);
    for (const [k, v] of Object.entries(flat)) setKey(properties, k, v);
  }

  const isTemporary = addr.name.startsWith('#');
  const isNull = addr.name === '<null>';
  if (isTemporary && !('lifetime-policy' in properties) && !('auto-delete' in properties)) {
    properties['lifetime-policy'] = 'delete-on-close';
  }

  const terminus: Record<string, unknown> = {};
  let createOnDemand = false;
  let sendProperties = false;
  if (isTemporary) {
    terminus['dynamic'] = true;
    sendProperties = true;
  } else if (!isNull) {
    terminus['address'] = addr.name;
    if (applies(create, role)) {
      createOnDemand = true;
      sendProperties = true;
    } else if (applies(assert, role)) {
      sendProperties = true;
    }
  }

  // Capabilities: node.capabilities, then create-on-demand, the node type, durable.
  const capabilities: string[] = [];
  const nodeCaps = node['capabilities'];
  if (nodeCaps !== undefined) {
    const list = Array.isArray(nodeCaps) ? nodeCaps : [nodeCaps];
    for (const c of list) capabilities.push(lenient(() => toStr('node.capabilities', c)));
  }
  if (createOnDemand) capabilities.push('create-on-demand');
  if (type) capabilities.push(type);
  if (durableNode) capabilities.push('durable');
  if (capabilities.length > 0) terminus['capabilities'] = capabilities;

  if (sendProperties && (type || durableNode || transientNode || Object.keys(properties).length > 0)) {
    const dnp: QpidMap = {};
    if (type) dnp['supported-dist-modes'] = type === 'topic' ? 'copy' : 'move';
    if (durableNode) dnp['durable'] = true;
    else if (transientNode) dnp['durable'] = false;
    for (const [k, v] of Object.entries(properties)) {
      if (k === 'lifetime-policy') {
        const p = lenient(() => toStr('node lifetime-policy', v));
        setKey(dnp, k, { descriptor: LIFETIME_POLICIES.get(p) ?? p, value: [] });
      } else {
        setKey(dnp, k, v);
      }
    }
    terminus['dynamic_node_properties'] = dnp;
  }

  if (durableLink) {
    terminus['durable'] = 2;
    terminus['expiry_policy'] = 'never';
  }
  if (link['timeout'] !== undefined) {
    terminus['timeout'] = lenient(() => toInt('link.timeout', link['timeout'], { min: 0 }));
  }

  const result: AddressLinkOptions = {};
  if (link['name'] !== undefined) result.name = lenient(() => toStr('link.name', link['name']));

  if (role === 'receiver') {
    if (browse) terminus['distribution_mode'] = 'copy';
    const filters: Record<string, DescribedValue> = {};
    if (link['selector'] !== undefined) {
      const selector = lenient(() => toStr('link.selector', link['selector']));
      filters['selector'] = { descriptor: SELECTOR_FILTER_CODE, value: selector };
    }
    if (addr.subject) {
      const wild = addr.subject.includes('*') || addr.subject.includes('#');
      filters['subject-filter'] = {
        descriptor: wild ? LEGACY_TOPIC_FILTER_CODE : LEGACY_DIRECT_FILTER_CODE,
        value: addr.subject,
      };
    }
    const f = link['filter'];
    if (f !== undefined) {
      if (Array.isArray(f)) for (const item of f) rawFilter(item, filters);
      else rawFilter(f, filters);
    }
    if (Object.keys(filters).length > 0) terminus['filter'] = filters;
    result.source = terminus;
    if (link['receiver-target'] !== undefined) {
      result.target = { address: lenient(() => toStr('link.receiver-target', link['receiver-target'])) };
    }
  } else {
    result.target = terminus;
    if (link['sender-source'] !== undefined) {
      result.source = { address: lenient(() => toStr('link.sender-source', link['sender-source'])) };
    }
  }

  const reliability = link['reliability'];
  if (reliability !== undefined) {
    if (typeof reliability !== 'string' || !RELIABILITY.includes(reliability)) {
      refuse(`Invalid value for link.reliability: ${JSON.stringify(reliability)}; must be one of ${RELIABILITY.join(', ')}`);
    }
    result.snd_settle_mode = reliability === 'unreliable' || reliability === 'at-most-once' ? 1 : 0;
  } else if (browse && role === 'receiver') {
    result.snd_settle_mode = 1; // a browser defaults to unreliable, as in qpid::messaging
  }
  return result;
}
