/**
 * A one-line progress bar on stderr (stdout stays clean for --json). Written here rather
 * than taken from cli-progress: it is ~40 lines, needs no dependency, and redraws at most
 * every 100 ms so it costs nothing measurable inside a timed loop.
 */
export class Progress {
  #enabled: boolean;
  #total = 0;
  #label = '';
  #start = 0;
  #last = 0;
  #drawn = false;

  constructor(enabled: boolean) { this.#enabled = enabled; }

  /** Starts a bar for `total` units. */
  begin(label: string, total: number): void {
    this.#label = label;
    this.#total = Math.max(1, total);
    this.#start = performance.now();
    this.#last = 0;
    this.update(0);
  }

  /** Redraws (throttled) with `done` units finished. */
  update(done: number): void {
    if (!this.#enabled) return;
    const now = performance.now();
    if (done < this.#total && now - this.#last < 100) return;
    this.#last = now;
    const frac = Math.min(1, done / this.#total);
    const width = 24;
    const fill = Math.round(frac * width);
    const secs = (now - this.#start) / 1000;
    const rate = secs > 0 ? done / secs : 0;
    const line = `[${'#'.repeat(fill)}${'.'.repeat(width - fill)}] ${(frac * 100).toFixed(0).padStart(3)}% ${this.#label} ${done}/${this.#total} ${formatRate(rate)}/s`;
    process.stderr.write(`\r${line.slice(0, 110).padEnd(110)}`);
    this.#drawn = true;
  }

  /** Clears the line. */
  end(): void {
    if (!this.#enabled || !this.#drawn) return;
    process.stderr.write(`\r${' '.repeat(110)}\r`);
    this.#drawn = false;
  }
}

export function formatRate(n: number): string {
  if (n >= 1e6) return (n / 1e6).toFixed(2) + 'M';
  if (n >= 1e3) return (n / 1e3).toFixed(1) + 'k';
  return n.toFixed(0);
}
