/**
 * spout's record of outcomes: a count of the settled deliveries and the few that were not
 * accepted (to list them at the end). An accepted delivery is only counted, so `spout -c 0`
 * runs in bounded memory however long it runs; so do the listed ones, at most `keep` of
 * them (the rest are counted).
 */
export interface Outcome { n: number; state: string; condition?: string; description?: string }

export class Outcomes {
  /** settled deliveries, accepted or not */
  settled = 0;
  /** deliveries not accepted, listed in `bad` or (past `keep`) only counted */
  notAccepted = 0;
  readonly bad: Outcome[] = [];

  constructor(readonly keep = 1000) {}

  record(n: number, state: string, error?: { condition?: unknown; description?: unknown }): void {
    this.settled++;
    if (state === 'accepted') return;
    this.notAccepted++;
    if (this.bad.length < this.keep) {
      this.bad.push({ n, state, condition: error?.condition ? String(error.condition) : undefined, description: error?.description ? String(error.description) : undefined });
    }
  }

  /** The stderr lines: one per listed outcome in message order, then how many were not listed. */
  lines(id: string): string[] {
    const out = [...this.bad].sort((a, b) => a.n - b.n)
      .map((o) => `message ${id}:${o.n} ${o.state}${o.condition ? `: ${o.condition}` : ''}${o.description ? `: ${o.description}` : ''}`);
    if (this.notAccepted > this.bad.length) out.push(`(and ${this.notAccepted - this.bad.length} more not accepted, not listed)`);
    return out;
  }
}
