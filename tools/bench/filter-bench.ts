/**
 * Filter evaluation speed: a typical 3-clause content filter over one ~200-byte JSON
 * record (parsed once), against a hand-written JS predicate doing the same checks.
 *
 *   npx tsx tools/bench/filter-bench.ts [iterations]
 *
 * Prints evaluations/s for the compiled filter, for the predicate reading the record
 * directly, and for the predicate reading through the same FilterEnv; and the ratios. Then
 * a selector over the broker's MessageEnv (application properties and a header field of a
 * decoded message), the path each consumer's selector takes per message.
 */
import rhea from 'rhea';
import { compileFilter, lookupJsonPath, type FilterEnv } from '../../lib/filter/index.js';
import { MessageEnv } from '../../lib/core/queue/filter-env.js';
import { decodeMessage } from '../../lib/codec/message-bytes.js';

const EXPR = "/price > 10 AND /sym IN ('A','B','C') AND /qty BETWEEN 1 AND 100";
const JSON_TEXT = JSON.stringify({
  id: 'ord-000123456', sym: 'B', price: 42.25, qty: 57, side: 'BUY', trader: 'alice',
  venue: 'XLON', ts: '2024-05-17T09:30:01.123Z', tags: ['block', 'dark'],
  account: { id: 'ACC-7781', region: 'EMEA' },
});
const record = JSON.parse(JSON_TEXT) as Record<string, unknown>;

const env: FilterEnv = {
  bodyPath: (path) => lookupJsonPath(record, path),
  property: () => undefined,
};

const filter = compileFilter(EXPR);
const SYMS = ['A', 'B', 'C'];
const direct = (r: Record<string, unknown>): boolean => {
  const price = r['price'], sym = r['sym'], qty = r['qty'];
  return typeof price === 'number' && price > 10 && typeof sym === 'string' && SYMS.includes(sym)
    && typeof qty === 'number' && qty >= 1 && qty <= 100;
};
const P_PRICE = ['price'], P_SYM = ['sym'], P_QTY = ['qty'];
const viaEnv = (e: FilterEnv): boolean => {
  const price = e.bodyPath(P_PRICE), sym = e.bodyPath(P_SYM), qty = e.bodyPath(P_QTY);
  return typeof price === 'number' && price > 10 && typeof sym === 'string' && SYMS.includes(sym)
    && typeof qty === 'number' && qty >= 1 && qty <= 100;
};

function rate(label: string, n: number, fn: () => boolean): number {
  let hits = 0;
  for (let i = 0; i < Math.min(n, 200_000); i++) if (fn()) hits++; // warm up
  hits = 0;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) if (fn()) hits++;
  const ns = Number(process.hrtime.bigint() - t0);
  if (hits !== n) throw new Error(`${label}: expected every evaluation to match, got ${hits}/${n}`);
  const perSec = n / (ns / 1e9);
  console.log(`${label.padEnd(34)} ${Math.round(perSec).toLocaleString('en-US').padStart(14)} evals/s  (${(ns / n).toFixed(1)} ns each)`);
  return perSec;
}

const n = Number(process.argv[2] ?? 5_000_000);
console.log(`record: ${Buffer.byteLength(JSON_TEXT)} bytes; filter: ${EXPR}`);
const f = rate('compiled filter', n, () => filter.matches(env));
const d = rate('hand-written predicate (direct)', n, () => direct(record));
const e = rate('hand-written predicate (via env)', n, () => viaEnv(env));
console.log(`filter/direct = ${(f / d).toFixed(3)}   filter/via-env = ${(f / e).toFixed(3)}`);
console.log(f >= 1e6 ? `OK: ${(f / 1e6).toFixed(2)}M evals/s >= 1M target` : `BELOW TARGET: ${(f / 1e6).toFixed(2)}M evals/s < 1M`);

const SELECTOR = "color = 'red' AND qty > 10 AND JMSPriority >= 4";
const message = decodeMessage((rhea as any).message.encode({
  priority: 5, subject: 'orders', application_properties: { color: 'red', qty: 57, region: 'EMEA' }, body: JSON_TEXT,
}));
const selector = compileFilter(SELECTOR, 'selector');
const messageEnv = new MessageEnv(message);
console.log(`selector: ${SELECTOR}`);
rate('selector over MessageEnv', n, () => selector.matches(messageEnv));

// LIKE in both dialects (session 22: the matchers count their steps against a budget per
// evaluation; these should cost what they did before).
const LIKE_CONTENT = "/trader LIKE '^al.*e$' AND /ts LIKE '^2024-05-\\d\\d' AND /account/region LIKE 'EM'";
const likeContent = compileFilter(LIKE_CONTENT);
console.log(`content LIKE: ${LIKE_CONTENT}`);
rate('content LIKE (regex)', n, () => likeContent.matches(env));
const LIKE_SELECTOR = "region LIKE 'EM%' AND color LIKE '%e_' AND subject LIKE 'ord%s'";
const likeSelector = compileFilter(LIKE_SELECTOR, 'selector');
console.log(`selector LIKE: ${LIKE_SELECTOR}`);
rate('selector LIKE over MessageEnv', n, () => likeSelector.matches(messageEnv));
