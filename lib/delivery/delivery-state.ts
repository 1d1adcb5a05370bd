import type { OutboxDrainResult } from './drain-result';
import type { LazyAbort } from './lazy-abort';

/** One claim within a run: the token that fences its writes, and the drain result its outcomes count into. */
export interface ClaimScope {
  readonly token: string;
  readonly total: OutboxDrainResult;
}

/**
 * What the worker and its claimed batches share while they run: the shutdown flags, and what shutdown
 * must find if it stops waiting (the handlers running, the events not started, the unwritten successes).
 */
export class DeliveryState {
  /** Set when shutdown begins: nothing new is claimed or started. */
  stopping = false;
  /**
   * Set once shutdown stops waiting: from then on only shutdown itself writes, and a handler that
   * ends is not recorded.
   */
  closed = false;
  /** The events whose handlers run now, with one abort per handler call. */
  readonly inFlight = new Map<string, { token: string; abort: readonly LazyAbort[] }>();
  /** Claimed events no handler has started yet: what shutdown gives back, uncounted, if it times out. */
  readonly waiting = new Map<string, ClaimScope>();
  /**
   * Takes `id` off the waiting events when this claim (`scope`) is the one it waits under — an event
   * whose lease ran out may be claimed again while its earlier claim winds up; true when it was.
   */
  leaveWaiting(id: string, scope: ClaimScope): boolean {
    if (this.waiting.get(id) !== scope) return false;
    this.waiting.delete(id);
    this.behind.delete(id);
    this.changed();
    return true;
  }

  /**
   * Those of the waiting events that a run holds behind an earlier event of their key (per-key order):
   * they start on that event's lane after it, so they do not hold back the next claim.
   */
  readonly behind = new Set<string>();

  /** Claimed events waiting for a lane of their own: the next claim waits until none is left. */
  get unstarted(): number {
    return this.waiting.size - this.behind.size;
  }

  /** Shutdown gave every waiting event back. */
  clearWaiting(): void {
    this.waiting.clear();
    this.behind.clear();
  }

  /** The successes of the batches running now, not yet written (their `AckBuffer`s). */
  readonly ackBuffers = new Set<{ flush(): Promise<void> }>();
  /** The lease renewals of the batches running now: shutdown stops them once it has closed. */
  readonly renewals = new Set<{ stop(): Promise<void> }>();
  /** Told of every retry scheduled, with its delay: the scheduled worker wakes for it. */
  retryScheduled: ((delayMs: number) => void) | undefined;
  /** The drain results counted into now (the scheduled runs', a `drain()`'s): shutdown reports from them. */
  readonly totals = new Set<OutboxDrainResult>();
  /** Who waits for a condition on this state, with it: `changed()` checks it, so a wait costs nothing until it holds. */
  private waiter: { holds: () => boolean; resolve: () => void } | undefined;

  /**
   * Something a wait may be for has changed: an event started, a lane or a claim ended, or shutdown
   * began.
   */
  changed(): void {
    const { waiter } = this;
    if (waiter && waiter.holds()) {
      this.waiter = undefined;
      waiter.resolve();
    }
  }

  /** Resolves once `holds()` is true (at once if it is): one waiter at a time, the worker's claiming run. */
  until(holds: () => boolean): Promise<void> {
    if (holds()) return Promise.resolve();
    return new Promise((resolve) => (this.waiter = { holds, resolve }));
  }
}
