/** Small statistics helpers: percentiles over a sample, medians of ratios. */

/** The p-th percentile (0..100) by nearest rank; NaN for an empty sample. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  // (p / 100) * n in floating point can land just above an integer (99.9 / 100 * 5000 =
  // 4995.000000000001), which would take the next rank: round it to 9 decimals first.
  const rank = Math.ceil(Math.round((p / 100) * sorted.length * 1e9) / 1e9);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
}

export function median(values: number[]): number {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return NaN;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

/** Rounds for printing/JSON: 3 significant decimals below 10, 1 above. */
export function round(n: number): number {
  if (!Number.isFinite(n)) return n;
  return Math.abs(n) < 10 ? Math.round(n * 1000) / 1000 : Math.round(n * 10) / 10;
}
