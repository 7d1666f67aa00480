/** Time is injected (architecture invariant 7) so TTL, history and retention are testable without sleeping. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}
export const systemClock: Clock = { now: () => Date.now() };

/** A clock tests move by hand. */
export class ManualClock implements Clock {
  #t: number;
  constructor(start = Date.UTC(2026, 0, 1)) { this.#t = start; }
  now(): number { return this.#t; }
  advance(ms: number): void { this.#t += ms; }
  set(ms: number): void { this.#t = ms; }
}
