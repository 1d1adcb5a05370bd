/** Retry times kept at most: beyond it, two retries share the later one's time. */
export const MAX_RETRY_TIMES = 1_000;

/**
 * Wakes the worker for each retry that falls due before the next poll: a failure retried in 141 ms is
 * claimed then, not at the poll after. One timer runs at a time, for the earliest; when it fires, the claim it
 * starts takes every retry due by then, and the timer is set again for the next one. A retry the
 * poll will find first sets nothing. The times are kept in order and bounded: past `MAX_RETRY_TIMES`,
 * two retries share the later one's time — a new one the next later time, or, later than all, the
 * last time's retry the new one's.
 */
export class RetryAlarm {
  /** Epoch ms of the retries to come, earliest first. */
  private readonly times: number[] = [];
  private timer: { at: number; handle: NodeJS.Timeout } | undefined;

  constructor(
    private readonly pollIntervalMs: number,
    private readonly wake: () => void,
    private readonly maxTimes = MAX_RETRY_TIMES,
  ) {}

  /** A retry was scheduled `delayMs` from now. */
  retryIn(delayMs: number): void {
    if (delayMs >= this.pollIntervalMs) return;
    const at = Date.now() + delayMs;
    const { times } = this;
    const place = firstAfter(times, at);
    if (times[place - 1] === at) return;
    if (times.length < this.maxTimes) times.splice(place, 0, at);
    else if (place === times.length) times[place - 1] = at;
    else return;
    this.arm();
  }

  /** How many retry times are waiting for their alarm. */
  get pending(): number {
    return this.times.length;
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer.handle);
    this.timer = undefined;
    this.times.length = 0;
  }

  /** Sets the timer for the earliest time, unless it is set for that one already. */
  private arm(): void {
    const at = this.times[0];
    if (at === undefined || this.timer?.at === at) return;
    if (this.timer) clearTimeout(this.timer.handle);
    const handle = setTimeout(() => this.fire(), Math.max(0, at - Date.now()));
    // A retry to come never keeps the process alive on its own.
    handle.unref();
    this.timer = { at, handle };
  }

  private fire(): void {
    this.timer = undefined;
    // The claim this starts takes every retry due by now.
    this.times.splice(0, firstAfter(this.times, Date.now()));
    this.arm();
    this.wake();
  }
}

/** The index of the first of the ascending `times` later than `at`. */
function firstAfter(times: readonly number[], at: number): number {
  let low = 0;
  let high = times.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (times[middle] <= at) low = middle + 1;
    else high = middle;
  }
  return low;
}
