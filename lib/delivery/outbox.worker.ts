import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { SchedulerRegistry } from '@nestjs/schedule';
import { AsyncResource } from 'node:async_hooks';
import { performance } from 'node:perf_hooks';
import { AckBuffer } from './ack-buffer';
import { describeError } from '../utils/describe-error';
import { LazyAbort } from './lazy-abort';
import type { OutboxReleaseReason } from './lifecycle-event';
import { OutboxEvents } from './outbox-events';
import { OUTBOX_OPTIONS, OUTBOX_STORE } from '../outbox.constants';
import { OutboxNonRetryableError, OutboxRetryLaterError } from '../errors/outbox.errors';
import type { StoredEvent } from '../dialects/shared/outbox-dialect.interface';
import { previousAttemptExpired } from '../dialects/shared/dialect.util';
import type { OutboxMessage } from '../interfaces/outbox-message.interface';
import { OutboxExplorer, type DeliveryTarget } from './outbox.explorer';
import type { ResolvedOutboxOptions } from '../outbox.options';
import type { ClaimResult, OutboxStore } from '../store/outbox.store';
import { backoffDelayMs } from '../utils/backoff';

/** What one `drain()` did. */
export interface OutboxDrainResult {
  /** Events whose every handler succeeded. */
  delivered: number;
  /** Events that failed and will be retried. */
  failed: number;
  /** Events dead-lettered (by a handler's failure on the last attempt, or an expired final lease). */
  deadLettered: number;
  /** Events given back unstarted (shutdown, or too little lease left to start). */
  released: number;
  /**
   * Acknowledgements, failures and releases the database rejected because the claim had lost its
   * lease. A database error while recording is logged and not counted here: the lease decides then.
   */
  lostLeases: number;
}

/** How a fenced write ended: applied, rejected for a lost lease, or not made (database error, shut down). */
type Recorded = 'done' | 'rejected' | 'not-made';

interface HandlerOutcome {
  handler: DeliveryTarget;
  error?: unknown;
}

class OutboxHandlerTimeoutError extends Error {
  constructor(ms: number) {
    super(`handler did not finish within its timeout of ${ms} ms`);
    this.name = 'OutboxHandlerTimeoutError';
  }
}

const MAX_ERROR_LENGTH = 4000;

/**
 * Why the claim dead-lettered an event: its last attempt outlived the lease (the note says so, and the
 * error of the attempt before, if any, follows), or no attempt is left after a recorded failure.
 */
function deadLetterReason(event: StoredEvent): string {
  if (event.lastExpiredAttempt !== event.attempts) return event.lastError ?? event.note ?? 'no attempt left';
  return event.lastError ? `${event.note}; last error: ${event.lastError}` : String(event.note);
}

function emptyResult(): OutboxDrainResult {
  return { delivered: 0, failed: 0, deadLettered: 0, released: 0, lostLeases: 0 };
}

/**
 * Claims due events, runs their handlers outside any transaction, and records the outcome fenced by
 * the claim token. Scheduled through `SchedulerRegistry` at bootstrap; stopped and drained in
 * `beforeApplicationShutdown`, before TypeORM destroys the DataSource.
 */
@Injectable()
export class OutboxWorker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('OutboxWorker');
  private readonly intervalName: string;
  private registry: SchedulerRegistry | undefined;
  /** The run in progress, if any; runs never overlap. */
  private current: Promise<unknown> = Promise.resolve();
  private busy = false;
  private stopping = false;
  /**
   * Set once shutdown stops waiting: from then on only shutdown itself writes, and a handler that
   * ends is not recorded.
   */
  private closed = false;
  private readonly inFlight = new Map<string, { token: string; abort: Set<LazyAbort> }>();
  /** Claimed events no handler has started yet: what shutdown gives back, uncounted, if it times out. */
  private readonly waiting = new Map<string, { token: string; total: OutboxDrainResult }>();
  /** The successes of the batches running now, not yet written. */
  private readonly ackBuffers = new Set<AckBuffer>();
  /** A wake-up asked for while a run was busy: run again right after it. */
  private kicked = false;
  /** The worker's own async context, so a wake-up from a request never runs in that request's. */
  private scope: AsyncResource | undefined;

  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    private readonly explorer: OutboxExplorer,
    private readonly moduleRef: ModuleRef,
    private readonly events: OutboxEvents,
  ) {
    this.intervalName = `outbox-worker:${store.table.path}`;
  }

  async onApplicationBootstrap(): Promise<void> {
    for (const transport of this.options.transports) await transport.onApplicationBootstrap?.();
    if (!this.options.worker.enabled) return;
    this.registry = this.schedulerRegistry();
    const handle = setInterval(() => this.poll(), this.options.worker.pollIntervalMs);
    this.registry.addInterval(this.intervalName, handle);
    this.scope = new AsyncResource('OutboxWorker');
    this.store.onCommitted(() => this.kick());
    this.store.onWakeUpError = (error) => this.logger.warn(`Outbox wake-up channel: ${describeError(error)}`);
    await this.store.wakeUp?.listen(() => this.kick());
    if (this.events.observed) this.events.emit({ type: 'worker.started' });
    this.poll();
  }

  /** Looks for work now: events were just committed here or, by notification, elsewhere. */
  private kick(): void {
    if (this.stopping || !this.scope) return;
    this.scope.runInAsyncScope(() => setImmediate(() => this.poll()));
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.stopping = true;
    await this.store.wakeUp?.close();
    if (this.registry?.doesExist('interval', this.intervalName)) {
      this.registry.deleteInterval(this.intervalName);
    }
    const timeoutMs = this.options.worker.shutdownTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const finished = await Promise.race([
      this.current.then(() => true),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
    ]);
    clearTimeout(timer);
    // From here on the worker writes nothing but what shutdown writes below: a handler that ends late
    // is not recorded, and nothing runs after TypeORM destroys the DataSource.
    this.closed = true;
    if (finished) await this.stopTransports();
    else await this.abandonRun(timeoutMs);
    if (this.scope && this.events.observed) this.events.emit({ type: 'worker.stopped', timedOut: !finished });
  }

  /**
   * Gives up the run that outlived the shutdown timeout, keeping all that already happened: the
   * successes that finished are acknowledged first, the claimed events no handler started go back
   * with their attempt uncounted, and those still running go back with theirs counted.
   */
  private async abandonRun(timeoutMs: number): Promise<void> {
    // Taken at once: an event whose handler ends from now on goes back with the running ones.
    const running = [...this.inFlight.entries()];
    const unstarted = new Map<string, { ids: string[]; total: OutboxDrainResult }>();
    for (const [id, { token, total }] of this.waiting) {
      const claim = unstarted.get(token) ?? { ids: [], total };
      claim.ids.push(id);
      unstarted.set(token, claim);
    }
    const unstartedCount = this.waiting.size;
    this.waiting.clear();
    await Promise.all([...this.ackBuffers].map((acks) => acks.flush()));
    await this.stopTransports();
    this.logger.warn(
      `Shutdown: ${running.length} handler(s) still running after ${timeoutMs} ms; releasing their events` +
        ` and the ${unstartedCount} claimed event(s) not started`,
    );
    await Promise.all([
      ...[...unstarted].map(([token, { ids, total }]) => this.releaseUnstarted(ids, token, total, 'shutdown')),
      ...running.map(async ([id, { token, abort }]) => {
        for (const signal of abort) signal.abort(new Error('the application is shutting down'));
        const released = await this.store
          .release(id, token, false)
          .catch((error) => this.logStoreError('release', id, error));
        if (released === undefined) return;
        this.emitWritten([id], released ? 1 : 0, 'release', { uncounted: false, why: 'shutdown' });
      }),
    ]);
  }

  private async stopTransports(): Promise<void> {
    for (const transport of this.options.transports) {
      try {
        await transport.beforeApplicationShutdown?.();
      } catch (error) {
        this.logger.error(`Outbox transport ${transport.name} failed to stop: ${describeError(error)}`);
      }
    }
  }

  /**
   * Delivers every event that is due now, claim after claim, and resolves when a claim comes back
   * empty. Waits for a run already in progress first. Handy in tests: no timers involved.
   */
  drain(): Promise<OutboxDrainResult> {
    return this.exclusive(() => this.runUntil((claimed) => claimed === 0));
  }

  private poll(): void {
    if (this.stopping) return;
    if (this.busy) {
      this.kicked = true;
      return;
    }
    // Back to back while batches come back full, and once more if woken meanwhile; the interval
    // picks up the rest.
    void this.exclusive(async () => {
      do {
        this.kicked = false;
        await this.runUntil((claimed) => claimed < this.options.worker.batchSize);
      } while (this.kicked && !this.stopping);
    }).catch((error) => this.logger.error(`Outbox worker run failed: ${describeError(error)}`));
  }

  private exclusive<T>(run: () => Promise<T>): Promise<T> {
    const next = this.current.then(async () => {
      this.busy = true;
      try {
        return await run();
      } finally {
        this.busy = false;
      }
    });
    this.current = next.catch(() => undefined);
    return next;
  }

  private async runUntil(done: (claimed: number) => boolean): Promise<OutboxDrainResult> {
    const total = emptyResult();
    const { batchSize, leaseMs } = this.options.worker;
    while (!this.stopping) {
      let claim;
      try {
        claim = await this.store.claim({ batchSize, leaseMs, maxAttempts: this.options.retry.maxAttempts });
      } catch (error) {
        this.logger.error(`Outbox claim failed; will retry at the next poll: ${describeError(error)}`);
        break;
      }
      const claimedAt = performance.now();
      if (this.events.observed) this.emitClaim(claim);
      for (const event of claim.events) this.waiting.set(event.id, { token: claim.token, total });
      for (const event of claim.deadLettered) {
        total.deadLettered++;
        this.logger.error(`Dead-lettered outbox event ${event.id} (${event.topic}): ${deadLetterReason(event)}`);
      }
      let gaveBack: number;
      try {
        for (const row of claim.undecodable) await this.deadLetterUndecodable(row, claim.token, total);
        gaveBack = await this.processBatch(claim.events, claim.token, claimedAt, total);
      } finally {
        for (const event of claim.events) this.waiting.delete(event.id);
      }
      // Events given back for isolation are due at once: claim again rather than wait for a poll.
      const claimed = claim.events.length + claim.deadLettered.length + claim.undecodable.length;
      if (gaveBack === 0 && done(claimed)) break;
    }
    return total;
  }

  /**
   * A claimed row the store could not decode (JSON cut short by MySQL's non-strict `sql_mode`, say):
   * no handler can be given it, and retrying cannot mend it. Dead-lettered alone, with the reason.
   */
  private async deadLetterUndecodable(
    row: ClaimResult['undecodable'][number],
    token: string,
    total: OutboxDrainResult,
  ): Promise<void> {
    const error = `the stored row cannot be decoded (${row.error}); it was dead-lettered without delivery`;
    if (!row.deadLettered) {
      const recorded = await this.record('failure', row.id, () =>
        this.store.fail(row.id, token, {
          deadLetter: true,
          error: error.slice(0, MAX_ERROR_LENGTH),
          completedHandlers: [],
          retryDelayMs: 0,
        }),
      );
      if (recorded === 'rejected') total.lostLeases++;
      if (recorded !== 'done') return;
    }
    // Else the claim dead-lettered it already, its attempts spent: only the reading failed.
    total.deadLettered++;
    if (this.events.observed) {
      const { id, topic, attempts: attempt } = row;
      this.events.emit({ type: 'dead-lettered', id, topic, attempt, error, reason: 'undecodable' });
    }
    this.logger.error(`Dead-lettered outbox event ${row.id}: ${error}`);
  }

  /**
   * Runs a claimed batch; returns how many events it gave back unstarted for a later claim.
   *
   * An event whose previous attempt's lease expired may be the one that stopped that worker (a
   * handler that ends the process every time). Run among others, it would take their attempts down
   * with it, again and again, until they too were dead-lettered. So it runs alone, after the rest of
   * the batch is acknowledged, and at most one per claim: the others like it go back at once,
   * uncounted, to be claimed again.
   */
  private async processBatch(
    events: StoredEvent[],
    token: string,
    claimedAt: number,
    total: OutboxDrainResult,
  ): Promise<number> {
    const suspects = events.filter(previousAttemptExpired);
    if (suspects.length === 0) {
      await this.runConcurrently(events, token, claimedAt, total);
      return 0;
    }
    const [alone, ...later] = suspects;
    let gaveBack = 0;
    if (later.length > 0) {
      gaveBack = await this.releaseUnstarted(later.map((e) => e.id), token, total);
    }
    await this.runConcurrently(events.filter((e) => !suspects.includes(e)), token, claimedAt, total);
    this.logger.log(
      `Outbox event ${alone.id} (${alone.topic}): attempt ${alone.attempts - 1} did not finish before its lease ` +
        `expired; running attempt ${alone.attempts} alone`,
    );
    await this.runConcurrently([alone], token, claimedAt, total);
    return gaveBack;
  }

  /** Gives claimed events back uncounted, in one statement. */
  private async releaseUnstarted(
    ids: string[],
    token: string,
    total: OutboxDrainResult,
    why: OutboxReleaseReason = 'isolation',
  ): Promise<number> {
    for (const id of ids) this.waiting.delete(id);
    try {
      const released = await this.store.releaseMany(ids, token, true);
      total.released += released;
      total.lostLeases += ids.length - released;
      this.emitWritten(ids, released, 'release', { uncounted: true, why });
      return released;
    } catch (error) {
      this.logStoreError('release', ids.join(', '), error);
      return 0;
    }
  }

  private async runConcurrently(
    events: StoredEvent[],
    token: string,
    claimedAt: number,
    total: OutboxDrainResult,
  ): Promise<void> {
    if (events.length === 0) return;
    const acks = new AckBuffer((ids) => this.acknowledge(ids, token, total, events));
    this.ackBuffers.add(acks);
    let next = 0;
    const lanes = Array.from({ length: Math.min(this.options.worker.concurrency, events.length) }, async () => {
      while (next < events.length) {
        const event = events[next++];
        if (!(await this.deliver(event, token, claimedAt, total))) continue;
        // Buffered successes are written by shutdown too; one that ends after it closed is not.
        if (!this.closed) acks.add(event.id);
        else this.logger.warn(`Outbox acknowledgement of event ${event.id} skipped: the worker has shut down`);
      }
    });
    try {
      await Promise.all(lanes);
    } finally {
      this.ackBuffers.delete(acks);
      await acks.close();
    }
  }

  /** One statement for a batch of successes, fenced by the claim token. */
  private async acknowledge(ids: string[], token: string, total: OutboxDrainResult, batch: StoredEvent[]): Promise<void> {
    try {
      const acknowledged = await this.store.acknowledge(ids, token);
      total.delivered += acknowledged;
      this.emitWritten(ids, acknowledged, 'acknowledge', batch);
      if (acknowledged < ids.length) {
        total.lostLeases += ids.length - acknowledged;
        this.logger.warn(
          `Outbox acknowledgement of ${ids.length - acknowledged} of ${ids.length} event(s) rejected: ` +
            'their lease expired and they may belong to another worker now',
        );
      }
    } catch (error) {
      this.logStoreError('acknowledgement', ids.join(', '), error);
    }
  }

  /** Runs an event's pending targets; true when all succeeded (the caller acknowledges in a batch). */
  private async deliver(
    event: StoredEvent,
    token: string,
    claimedAt: number,
    total: OutboxDrainResult,
  ): Promise<boolean> {
    // Given back by a shutdown that timed out while it waited for a lane.
    if (!this.waiting.delete(event.id)) return false;
    const handlers = this.explorer.targetsFor(event.topic);
    const pending = handlers.filter((h) => !event.completedHandlers.includes(h.name));
    const longest = Math.max(0, ...pending.map((h) => h.timeoutMs));
    const margin = Math.min(1000, Math.floor(this.options.worker.leaseMs / 10));
    const leaseLeft = this.options.worker.leaseMs - (performance.now() - claimedAt);
    if (this.stopping || longest + margin > leaseLeft) {
      // Not started: hand it back with its attempt, rather than start what the lease cannot cover.
      const recorded = await this.record('release', event.id, () => this.store.release(event.id, token, true));
      if (recorded === 'done') total.released++;
      else if (recorded === 'rejected') total.lostLeases++;
      if (recorded === 'done' && this.events.observed) {
        const why = this.stopping ? 'shutdown' : 'lease-budget';
        this.events.emit({ type: 'released', ids: [event.id], uncounted: true, why });
      }
      return false;
    }

    const abort = new Set<LazyAbort>();
    this.inFlight.set(event.id, { token, abort });
    let outcomes: HandlerOutcome[];
    try {
      outcomes =
        handlers.length === 0
          ? [] // reported below as "no handler"
          : await Promise.all(pending.map((handler, i) => this.runHandler(handler, event, abort, i > 0)));
    } finally {
      this.inFlight.delete(event.id);
    }

    const failures = outcomes.filter((o) => 'error' in o);
    if (handlers.length > 0 && failures.length === 0) return true;
    const succeeded = outcomes.filter((o) => !('error' in o)).map((o) => o.handler.name);
    const completed = [...event.completedHandlers, ...succeeded];

    const errorText =
      handlers.length === 0
        ? `no handler or route for topic "${event.topic}" in this application`
        : failures.map((f) => `${f.handler.name}: ${describeError(f.error)}`).join('; ');
    const nonRetryable = failures.some((f) => f.error instanceof OutboxNonRetryableError);
    const deadLetter = nonRetryable || event.attempts >= this.options.retry.maxAttempts;
    const policies = failures.length > 0 ? failures.map((f) => f.handler.retry) : [this.options.retry];
    // A target may name its own delay (Retry-After); the longest wish among the failures wins.
    const retryDelayMs = Math.max(
      ...policies.map((policy) => backoffDelayMs(event.attempts, policy)),
      ...failures.map((f) => (f.error instanceof OutboxRetryLaterError ? Math.min(f.error.retryAfterMs, 86_400_000) : 0)),
    );
    const recorded = await this.record('failure', event.id, () =>
      this.store.fail(event.id, token, {
        error: errorText.slice(0, MAX_ERROR_LENGTH),
        completedHandlers: completed,
        deadLetter,
        retryDelayMs,
      }),
    );
    if (recorded === 'rejected') total.lostLeases++;
    // Not recorded (logged by record()): the lease will expire and the event be claimed again.
    if (recorded !== 'done') return false;
    if (this.events.observed) {
      this.emitFailure(event, errorText, deadLetter ? (nonRetryable ? 'non-retryable' : 'handler') : retryDelayMs);
    }
    if (deadLetter) {
      total.deadLettered++;
      this.logger.error(
        `Dead-lettered outbox event ${event.id} (${event.topic}) after attempt ${event.attempts}` +
          `${nonRetryable ? ' (non-retryable)' : ''}: ${errorText}`,
      );
    } else {
      total.failed++;
      this.logger.warn(
        `Outbox event ${event.id} (${event.topic}) attempt ${event.attempts} of ${this.options.retry.maxAttempts} ` +
          `failed; retrying in ${retryDelayMs} ms or later: ${errorText}`,
      );
    }
    return false;
  }

  private async runHandler(
    handler: DeliveryTarget,
    event: StoredEvent,
    running: Set<LazyAbort>,
    copyPayload: boolean,
  ): Promise<HandlerOutcome> {
    // Aborted by the timeout below or by shutdown; built only if the handler reads `signal`.
    const abort = new LazyAbort();
    running.add(abort);
    const message = {
      id: event.id,
      topic: event.topic,
      key: event.key,
      // Each handler gets its own copy, so one cannot change what the next one sees.
      payload: copyPayload ? structuredClone(event.payload) : event.payload,
      headers: { ...event.headers },
      attempt: event.attempts,
      createdAt: event.createdAt,
      get signal() {
        return abort.signal;
      },
    } satisfies OutboxMessage;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const error = new OutboxHandlerTimeoutError(handler.timeoutMs);
        abort.abort(error);
        reject(error);
      }, handler.timeoutMs);
    });
    // Timed only while someone listens for the outcome.
    const started = this.events.observed ? performance.now() : -1;
    let outcome: HandlerOutcome;
    try {
      await Promise.race([Promise.resolve().then(() => handler.invoke(message)), timedOut]);
      outcome = { handler };
    } catch (error) {
      outcome = { handler, error };
    } finally {
      clearTimeout(timer);
      running.delete(abort);
    }
    if (started >= 0) this.emitHandlerRun(event, outcome, performance.now() - started);
    return outcome;
  }

  /** Runs a fenced state change, logging what did not happen. */
  private async record(what: string, id: string, change: () => Promise<boolean>): Promise<Recorded> {
    if (this.closed) {
      this.logger.warn(`Outbox ${what} of event ${id} skipped: the worker has shut down; its lease will expire`);
      return 'not-made';
    }
    try {
      if (await change()) return 'done';
      if (this.events.observed) {
        this.events.emit({ type: 'lease.lost', ids: [id], count: 1, what: what === 'release' ? 'release' : 'fail' });
      }
      this.logger.warn(
        `Outbox ${what} of event ${id} rejected: its lease expired and it may belong to another worker now`,
      );
      return 'rejected';
    } catch (error) {
      this.logStoreError(what, id, error);
      return 'not-made';
    }
  }

  private emitClaim(claim: ClaimResult): void {
    const leased = claim.undecodable.filter((row) => !row.deadLettered);
    const ids = [...claim.events.map((e) => e.id), ...leased.map((row) => row.id)];
    if (ids.length > 0) this.events.emit({ type: 'claimed', token: claim.token, count: ids.length, ids });
    for (const event of claim.deadLettered) {
      this.events.emit({
        type: 'dead-lettered',
        id: event.id,
        topic: event.topic,
        attempt: event.attempts,
        error: deadLetterReason(event),
        reason: 'attempts-exhausted-at-claim',
      });
    }
  }

  private emitHandlerRun(event: StoredEvent, outcome: HandlerOutcome, durationMs: number): void {
    const run = { id: event.id, topic: event.topic, handler: outcome.handler.name, attempt: event.attempts, durationMs };
    this.events.emit(
      'error' in outcome
        ? { type: 'handler.failed', ...run, error: describeError(outcome.error) }
        : { type: 'handler.succeeded', ...run },
    );
  }

  /** A recorded failure: dead-lettered for `reason`, or retried in `delayMs`. */
  private emitFailure(event: StoredEvent, error: string, outcome: 'handler' | 'non-retryable' | number): void {
    const { id, topic, attempts: attempt } = event;
    if (typeof outcome === 'number') {
      const dueAt = new Date(Date.now() + outcome);
      this.events.emit({ type: 'retry.scheduled', id, topic, attempt, delayMs: outcome, dueAt, error });
    } else {
      this.events.emit({ type: 'dead-lettered', id, topic, attempt, error, reason: outcome });
    }
  }

  /**
   * What a fenced write of several events did: `applied` of `ids` were written, the rest refused for a
   * lost lease. The database does not say which; a batch shares one lease, so it is all or none.
   */
  private emitWritten(
    ids: string[],
    applied: number,
    what: 'acknowledge' | 'release',
    detail: StoredEvent[] | { uncounted: boolean; why: OutboxReleaseReason },
  ): void {
    if (!this.events.observed) return;
    if (applied < ids.length) this.events.emit({ type: 'lease.lost', ids, count: ids.length - applied, what });
    if (applied !== ids.length) return;
    if (Array.isArray(detail)) {
      const byId = new Map(detail.map((e) => [e.id, e]));
      for (const id of ids) {
        const event = byId.get(id)!;
        this.events.emit({ type: 'delivered', id, topic: event.topic, attempt: event.attempts });
      }
    } else {
      this.events.emit({ type: 'released', ids, ...detail });
    }
  }

  private logStoreError(what: string, id: string, error: unknown): void {
    this.logger.error(`Outbox ${what} of event ${id} failed; its lease will expire: ${describeError(error)}`);
  }

  private schedulerRegistry(): SchedulerRegistry {
    try {
      return this.moduleRef.get(SchedulerRegistry, { strict: false });
    } catch {
      // The application did not import ScheduleModule.forRoot(): keep our own registry, so the
      // worker is scheduled the same way without importing a second orchestrator.
      return new SchedulerRegistry();
    }
  }
}
