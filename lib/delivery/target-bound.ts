import { LIMITS } from '../outbox.constants';

/** How much a new call's duration moves the running estimate of a target's call (an exponential average). */
const WEIGHT = 0.2;
/**
 * The longest a share waits on its lane for a slot of its target, by the estimate: beyond it, writing
 * the share back to the table and taking it again later costs less than the lane held meanwhile.
 */
const WAIT_ON_LANE_MS = 20;
/**
 * How recently another target of the worker must have started a call for a lane to count as wanted:
 * without such a call, a share given back to the table would only be taken again by this worker, for
 * the same full target, and the lane it freed would have served nothing else meanwhile.
 */
const LANES_WANTED_WITHIN_MS = 1000;

/**
 * When the targets of one worker last started a call: the latest start, and the latest by a target
 * other than the one that made it, so each target can tell whether any other has had work lately.
 */
export class TargetActivity {
  private latestBound: TargetBound | undefined;
  private latestAt = -Infinity;
  /** The latest start by a target other than `latestBound`. */
  private previousAt = -Infinity;

  started(bound: TargetBound, at: number): void {
    if (this.latestBound !== bound) {
      this.previousAt = this.latestAt;
      this.latestBound = bound;
    }
    this.latestAt = at;
  }

  /** When a target other than `bound` last started a call, by `performance.now()`; -Infinity if none has. */
  lastStartBesides(bound: TargetBound): number {
    return this.latestBound === bound ? this.previousAt : this.latestAt;
  }
}

/**
 * How many calls of one delivery target (a handler, a route) run at once on this instance: never more
 * than its `concurrency`. A share of an event that finds every slot taken waits on its lane when the
 * target's calls are short (a slot frees within `WAIT_ON_LANE_MS`, by the estimate), and otherwise goes
 * back to the table, due when a call of the target is expected to have ended. The estimate: the
 * target's average call so far, spread over its slots; each share given back is queued behind the one
 * before, so a backlog comes back at the rate the target serves it, not all at once. A share goes back
 * only while lanes are wanted (another target of the worker started a call within the last second):
 * otherwise nothing else would use the lane, and a backlog for this one target alone would only be
 * written back and taken again, over and over. Per instance: each instance bounds its own calls.
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

  constructor(
    readonly concurrency: number,
    /** Shared by the targets of one worker. */
    private readonly activity: TargetActivity = new TargetActivity(),
  ) {}

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
   * Whether a lane held by a share waiting for this target would be missed: another target of the
   * worker has started a call within the last second. When none has, the share waits on its lane
   * however long the calls, as a share going back to the table would only come back to this target.
   */
  lanesWanted(): boolean {
    return performance.now() - this.activity.lastStartBesides(this) <= LANES_WANTED_WITHIN_MS;
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

  /** A call with a slot starts: returns the moment, to hand to `give`. */
  started(): number {
    const at = performance.now();
    this.activity.started(this, at);
    return at;
  }

  /**
   * A call that started at `startedAt` (from `started()`) settled: its outcome, or its timeout. Without
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
