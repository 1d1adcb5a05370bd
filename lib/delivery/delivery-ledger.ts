import type { Logger } from '@nestjs/common';
import type { OutboxDrainResult } from './drain-result';
import type { LazyAbort } from './lazy-abort';

/** One claim within a run: the token that fences its writes, and the drain result its outcomes count into. */
export interface ClaimScope {
  readonly token: string;
  readonly total: OutboxDrainResult;
}

/** An event whose handlers run now: its claim's token, and one abort per handler call. */
export interface RunningEvent {
  readonly token: string;
  readonly abort: readonly LazyAbort[];
}

/** What shutdown takes over when it stops waiting: the handlers still running, the claimed events not started by claim. */
export interface AbandonedWork {
  running: Array<[id: string, event: RunningEvent]>;
  unstarted: Array<{ ids: string[]; scope: ClaimScope }>;
}

/**
 * The one owner of what a worker's deliveries hold while they run: the claimed events waiting for a
 * lane (and those a run holds behind its key's earlier event), the events whose handlers run with their
 * aborts, the successes not yet written, the lease renewals, the drain results counted into, and the
 * shutdown flags. The worker, its claimed batches, the renewals and the recorder change it only through
 * its verbs; whoever waits for a condition on it (`until`) is told when it may hold (`changed`).
 */
export class DeliveryLedger {
  private stoppingNow = false;
  private closedNow = false;
  private readonly waiting = new Map<string, ClaimScope>();
  /** Those of the waiting events that start on an earlier event's lane (a run): they do not hold back the next claim. */
  private readonly behind = new Set<string>();
  private readonly running = new Map<string, RunningEvent>();
  private readonly ackBuffers = new Set<{ flush(): Promise<void> }>();
  private readonly renewals = new Set<{ stop(): Promise<void> }>();
  private readonly totals = new Set<OutboxDrainResult>();
  private waiters: Array<{ holds: () => boolean; resolve: () => void }> = [];
  /** Told of every retry scheduled, with its delay: the scheduled worker wakes for it. */
  retryScheduled: ((delayMs: number) => void) | undefined;
  /** For each drain result, when the last share deferred into it falls due (epoch ms), until taken. */
  private readonly deferredDue = new WeakMap<OutboxDrainResult, number>();

  /** Shutdown has begun: nothing new is claimed or started. */
  get stopping(): boolean {
    return this.stoppingNow;
  }

  /** Shutdown stopped waiting: from then on only shutdown itself writes; a handler that ends is not recorded. */
  get closed(): boolean {
    return this.closedNow;
  }

  stop(): void {
    this.stoppingNow = true;
    this.changed();
  }

  close(): void {
    this.closedNow = true;
  }

  /** A claim's events, and the runs it took behind them, wait for their lanes under `scope`. */
  claimed(scope: ClaimScope, events: readonly { id: string }[], followers: readonly { id: string }[]): void {
    for (const event of events) this.waiting.set(event.id, scope);
    for (const event of followers) {
      this.waiting.set(event.id, scope);
      this.behind.add(event.id);
    }
  }

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

  /** Claimed events waiting for a lane of their own: the next claim waits until none is left. */
  get unstarted(): number {
    return this.waiting.size - this.behind.size;
  }

  isWaiting(id: string): boolean {
    return this.waiting.has(id);
  }

  /** `id`'s handlers start under `token`. */
  started(id: string, token: string, abort: readonly LazyAbort[]): void {
    this.running.set(id, { token, abort });
  }

  /** `id`'s handlers under `token` have ended (an event claimed again since is another claim's). */
  ended(id: string, token: string): void {
    if (this.running.get(id)?.token === token) this.running.delete(id);
  }

  /** Whether `token`'s claim still has `id` waiting or running. */
  holds(id: string, token: string): boolean {
    return this.waiting.get(id)?.token === token || this.running.get(id)?.token === token;
  }

  /** The events of `token`'s claim waiting for a lane or running. */
  unfinished(token: string): string[] {
    const ids: string[] = [];
    for (const map of [this.waiting, this.running]) {
      for (const [id, held] of map) if (held.token === token) ids.push(id);
    }
    return ids;
  }

  /** `scope`'s claim lost the lease of `ids`: none starts, and the running ones' handlers are told with `reason`. */
  lost(ids: readonly string[], scope: ClaimScope, reason: (id: string) => Error): void {
    for (const id of ids) {
      this.leaveWaiting(id, scope);
      for (const abort of this.running.get(id)?.abort ?? []) abort.giveUp(reason(id));
    }
  }

  /** A batch's successes not yet written, until it ends: shutdown and a crash suspect flush them. */
  trackAcks(acks: { flush(): Promise<void> }): () => void {
    this.ackBuffers.add(acks);
    return () => this.ackBuffers.delete(acks);
  }

  /** Writes every success buffered now. */
  async flushAcks(): Promise<void> {
    await Promise.all([...this.ackBuffers].map((acks) => acks.flush()));
  }

  /** A lease renewal that runs until it stops, or shutdown stops it. */
  trackRenewal(renewal: { stop(): Promise<void> }): () => void {
    this.renewals.add(renewal);
    return () => this.renewals.delete(renewal);
  }

  get renewalCount(): number {
    return this.renewals.size;
  }

  /** Ends every renewal: one on its way finishes first. */
  async stopRenewals(): Promise<void> {
    await Promise.all([...this.renewals].map((renewal) => renewal.stop()));
  }

  /** An event's share for a full target went back, due in `delayMs`, counted into `total`. */
  deferred(total: OutboxDrainResult, delayMs: number): void {
    const at = Date.now() + delayMs;
    if (at > (this.deferredDue.get(total) ?? 0)) this.deferredDue.set(total, at);
    this.retryScheduled?.(delayMs);
  }

  /** When the last share deferred into `total` since the previous call falls due (epoch ms); undefined if none was. */
  takeDeferredDue(total: OutboxDrainResult): number | undefined {
    const at = this.deferredDue.get(total);
    this.deferredDue.delete(total);
    return at;
  }

  /** A drain result counted into from now until the returned function is called: shutdown reports from it. */
  countInto(total: OutboxDrainResult): () => void {
    this.totals.add(total);
    return () => this.totals.delete(total);
  }

  /**
   * Says, as shutdown begins, what it waits for when anything runs; returns what says, at the end,
   * what became of it.
   */
  shutdownReport(logger: Logger, timeoutMs: number): (finished: boolean) => void {
    const { running, waiting } = this;
    if (running.size + waiting.size === 0) return () => undefined;
    const started = Date.now();
    const runs = [...this.totals];
    const sum = (key: 'delivered' | 'released') => runs.reduce((n, total) => n + total[key], 0);
    const before = { delivered: sum('delivered'), released: sum('released') };
    logger.log(
      `Shutdown: waiting up to ${timeoutMs} ms for ${running.size} running handler(s); ` +
        `${waiting.size} claimed event(s) not started go back to the outbox`,
    );
    return (finished) =>
      logger.log(
        `Shutdown ${finished ? 'finished' : 'stopped waiting'} after ${Date.now() - started} ms: ` +
          `${sum('delivered') - before.delivered} event(s) delivered, ${sum('released') - before.released} released`,
      );
  }

  /**
   * Shutdown stopped waiting: hands it the handlers running now and every waiting event, by claim, and
   * forgets the waiting ones (a lane that frees up later starts none of them).
   */
  abandon(): AbandonedWork {
    const running = [...this.running.entries()];
    const byToken = new Map<string, { ids: string[]; scope: ClaimScope }>();
    for (const [id, scope] of this.waiting) {
      const claim = byToken.get(scope.token) ?? { ids: [], scope };
      claim.ids.push(id);
      byToken.set(scope.token, claim);
    }
    this.waiting.clear();
    this.behind.clear();
    return { running, unstarted: [...byToken.values()] };
  }

  /**
   * Something a wait may be for has changed: an event started, a lane or a claim ended, or shutdown
   * began. Every waiter whose condition now holds is resumed.
   */
  changed(): void {
    const { waiters } = this;
    if (waiters.length === 0) return;
    // Called on every start and every lane given back: nothing is allocated until a waiter is ready.
    let ready: typeof waiters | undefined;
    for (const waiter of waiters) if (waiter.holds()) (ready ??= []).push(waiter);
    if (!ready) return;
    this.waiters = waiters.filter((w) => !ready.includes(w));
    for (const waiter of ready) waiter.resolve();
  }

  /** Resolves once `holds()` is true (at once if it is); a wait costs nothing until `changed()` finds it holds. */
  until(holds: () => boolean): Promise<void> {
    if (holds()) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ holds, resolve }));
  }
}
