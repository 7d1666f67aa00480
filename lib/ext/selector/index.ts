/**
 * Message-selecting source filters (wire.md 4): the JMS selector, the legacy direct/topic
 * subject bindings, and Tidemark's content filter. Each compiles once per link into a
 * predicate the structures evaluate per message.
 */
import type { Extension, FilterSpec } from '../../core/extensions.js';
import { TidemarkError, Conditions } from '../../core/errors.js';
import { compileFilter, compileSubjectFilter, FilterSyntaxError } from '../../filter/index.js';

function text(name: string, v: unknown): string {
  if (typeof v === 'string') return v;
  if (Buffer.isBuffer(v)) return v.toString('utf8');
  throw new TidemarkError(Conditions.invalidField, `${name} filter value must be a string, got ${v === null ? 'null' : typeof v}`);
}

/** Runs a compile step; a FilterSyntaxError (bad syntax, a limit) is the client's: amqp:invalid-field. */
function refusingSyntax<T>(name: string, compileStep: () => T): T {
  try { return compileStep(); }
  catch (e) {
    if (e instanceof FilterSyntaxError) throw new TidemarkError(Conditions.invalidField, `${name}: ${e.message}`);
    throw e;
  }
}

function compile(name: string, expr: string, dialect: 'content' | 'selector') {
  return refusingSyntax(name, () => compileFilter(expr, dialect));
}

function compileSubject(name: string, pattern: string, kind: 'direct' | 'topic') {
  return refusingSyntax(name, () => compileSubjectFilter(pattern, kind));
}

export const SELECTOR = 'apache.org:selector-filter:string';
export const DIRECT_BINDING = 'apache.org:legacy-amqp-direct-binding:string';
export const TOPIC_BINDING = 'apache.org:legacy-amqp-topic-binding:string';
export const CONTENT_FILTER = 'tidemark:content-filter:string';

export function selectorExtension(): Extension {
  const filters: FilterSpec[] = [
    {
      symbol: SELECTOR, code: 0x0000468c00000004n,
      parse(v) { const f = compile('selector', text('selector', v), 'selector'); return { predicate: (env) => f.matches(env), data: f }; },
    },
    {
      symbol: DIRECT_BINDING, code: 0x0000468c00000000n,
      // The message's subject (wire.md 4), not an application property that happens to be called `subject`.
      parse(v) { const f = compileSubject('direct binding', text('direct binding', v), 'direct'); return { predicate: (env) => f.matches(env.subject() as string | undefined) }; },
    },
    {
      symbol: TOPIC_BINDING, code: 0x0000468c00000001n,
      parse(v) { const f = compileSubject('topic binding', text('topic binding', v), 'topic'); return { predicate: (env) => f.matches(env.subject() as string | undefined) }; },
    },
    {
      symbol: CONTENT_FILTER,
      parse(v) { const f = compile('content filter', text('content filter', v), 'content'); return { predicate: (env) => f.matches(env), data: f }; },
    },
  ];
  return { name: 'selector', filters };
}
