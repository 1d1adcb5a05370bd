import { LIMITS } from '../outbox.constants';

/** How much a new call's duration moves the running estimate of a target's call (an exponential average). */
const WEIGHT = 0.2;
/**
 * The longest a share waits on its lane for a slot of its target, by the estimate: beyond it, writing
 * the share back to the table and taking it again later costs less than the lane held meanwhile.
 */
const WAIT_ON_LANE_MS = 20;

/**
 * How many calls of one delivery target (a handler, a route) run at once on this instance: never more
 * than its `concurrency`. A share of an event that finds every slot taken waits on its lane when the
 * target's calls are short (a slot frees within `WAIT_ON_LANE_MS`, by the estimate), and otherwise goes
 * back to the table, due when a call of the target is expected to have ended. The estimate: the
 * target's average call so far, spread over its slots; each share given back is queued behind the one
 * before, so a backlog comes back at the rate the target serves it, not all at once. Per instance: each
 * instance bounds its own calls.
 */
// The global `performance`, not node:perf_hooks': a test can move its clock alone (jest's fake timers).
export class TargetBound {
  private running = 0;
  private readonly waiting: Array<() => void> = [];
  /** The average call, in ms; 0 until one ended. */
  private averageMs = 0;
  /** When the first call started, by `performance.now()`: until one ends, the longest any has run. */
  private firstStart = -1;
  /** When the last share given back is expected to find a free slot, by `performance.now()`. */
  private horizon = 0;

  constructor(readonly concurrency: number) {}

  /** A slot for one call, when one is free; the caller gives it back with `give` once the call settled. */
  take(): boolean {
    if (this.running >= this.concurrency) return false;
    this.running++;
    if (this.firstStart < 0) this.firstStart = performance.now();
    return true;
  }

  /**
   * Whether a share that found every slot taken should wait on its lane (`wait`) rather than go back to
   * the table (`deferralMs`): a slot is expected to free soon.
   */
  worthWaiting(): boolean {
    return this.perSlotMs() <= WAIT_ON_LANE_MS;
  }

  /**
   * How long, by the estimate, until one more slot frees: the average call spread over the slots; until
   * a call has ended, how long the first has run, a lower bound of the first call.
   */
  private perSlotMs(): number {
    return this.averageMs > 0 ? this.averageMs / this.concurrency : performance.now() - this.firstStart;
  }

  /** Resolves once a slot is this caller's, handed over by a `give`, first come first served. */
  wait(): Promise<void> {
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** The moment a call with a slot starts, to hand to `give`. */
  now(): number {
    return performance.now();
  }

  /**
   * A call that started at `startedAt` (from `now()`) settled: its outcome, or its timeout. Without
   * `startedAt`, a slot given back unused (its call was aborted before it could start).
   */
  give(startedAt?: number): void {
    if (startedAt !== undefined) {
      const took = Math.max(performance.now() - startedAt, 0);
      this.averageMs = this.averageMs === 0 ? Math.max(took, 0.001) : this.averageMs + WEIGHT * (took - this.averageMs);
    }
    const next = this.waiting.shift();
    if (next) next();
    else this.running--;
  }

  /** In how many ms a share that found every slot taken should be tried again; queued behind those before it. */
  deferralMs(): number {
    const now = performance.now();
    this.horizon = Math.max(this.horizon, now) + Math.max(this.perSlotMs(), 1);
    return Math.min(Math.ceil(this.horizon - now), LIMITS.retryDelayMs.max);
  }
}
