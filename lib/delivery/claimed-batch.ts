import { Logger } from '@nestjs/common';
import { performance } from 'node:perf_hooks';
import { previousAttemptExpired } from '../dialects/shared/dialect.util';
import type { ClaimedEvent } from '../dialects/shared/outbox-dialect.interface';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { ClaimResult, OutboxStore } from '../store/outbox.store';
import { leaseMarginMs } from '../utils/lease-margin';
import { AckBuffer } from './ack-buffer';
import type { DeliveryState } from './delivery-state';
import type { OutboxDrainResult } from './drain-result';
import { deadLetterReason, decideFailure, storableError, undecodableError } from './failure-policy';
import type { FencedWrites } from './fenced-writes';
import type { HandlerInvoker, HandlerOutcome } from './handler-invoker';
import { LazyAbort } from './lazy-abort';
import { DeliveredMessage } from './delivered-message';
import { LeaseRenewal } from './lease-renewal';
import type { OutboxEvents } from '../events/outbox-events';
import type { DeliveryTargets } from './delivery-targets';

/** What every claimed batch of one worker works with. */
export interface BatchContext {
  readonly options: ResolvedOutboxOptions;
  readonly store: OutboxStore;
  readonly targets: DeliveryTargets;
  readonly events: OutboxEvents;
  readonly state: DeliveryState;
  readonly writes: FencedWrites;
  readonly invoker: HandlerInvoker;
}

/**
 * One claim, from the rows the store leased to the record of each one's outcome: crash suspects
 * isolated, lanes of concurrent deliveries within the lease (renewed while they run, with
 * `worker.renewLease`), successes acknowledged in batches, failures and releases written one by one.
 * All of it fenced by the claim's token.
 */
export class ClaimedBatch {
  private readonly logger = new Logger('OutboxWorker');
  /** The lease's clock: every start is checked against what is left of it. */
  private readonly claimedAt = performance.now();
  private readonly token: string;
  /** With `worker.renewLease`, while the batch runs. */
  private renewal: LeaseRenewal | undefined;

  constructor(
    private readonly claim: ClaimResult,
    private readonly total: OutboxDrainResult,
    private readonly ctx: BatchContext,
  ) {
    this.token = claim.token;
  }

  /** Runs the claim; returns how many events it gave back unstarted for a later claim. */
  async process(): Promise<number> {
    const { claim, total, ctx } = this;
    if (ctx.events.observed) this.emitClaim();
    for (const event of claim.events) ctx.state.waiting.set(event.id, { token: this.token, total });
    const { leaseMs, renewLease } = ctx.options.worker;
    if (renewLease && claim.events.length > 0) {
      this.renewal = new LeaseRenewal(this.token, this.claimedAt, leaseMs, total, ctx);
    }
    for (const event of claim.deadLettered) {
      total.deadLettered++;
      this.logger.error(`Dead-lettered outbox event ${event.id} (${event.topic}): ${deadLetterReason(event)}`);
    }
    try {
      for (const row of claim.undecodable) await this.deadLetterUndecodable(row);
      return await this.isolatingSuspects(claim.events);
    } finally {
      for (const event of claim.events) ctx.state.waiting.delete(event.id);
      await this.renewal?.stop();
    }
  }

  /**
   * A claimed row the store could not decode (JSON cut short by MySQL's non-strict `sql_mode`, say):
   * no handler can be given it, and retrying cannot mend it. Dead-lettered alone, with the reason.
   */
  private async deadLetterUndecodable(row: ClaimResult['undecodable'][number]): Promise<void> {
    const error = undecodableError(row.error);
    if (!row.deadLettered) {
      const recorded = await this.ctx.writes.record('failure', row.id, () =>
        this.ctx.store.fail(row.id, this.token, {
          deadLetter: true,
          error: storableError(error),
          completedHandlers: [],
          retryDelayMs: 0,
        }),
      );
      if (recorded === 'rejected') this.total.lostLeases++;
      if (recorded !== 'done') return;
    }
    // Else the claim dead-lettered it already, its attempts spent: only the reading failed.
    this.total.deadLettered++;
    if (this.ctx.events.observed) {
      const { id, topic, attempts: attempt } = row;
      this.ctx.events.emit({ type: 'dead-lettered', id, topic, attempt, error, reason: 'undecodable' });
    }
    this.logger.error(`Dead-lettered outbox event ${row.id}: ${error}`);
  }

  /**
   * An event whose previous attempt's lease expired may be the one that stopped that worker (a
   * handler that ends the process every time). Run among others, it would take their attempts down
   * with it, again and again, until they too were dead-lettered. So it runs alone, after the rest of
   * the batch is acknowledged, and at most one per claim: the others like it go back at once,
   * uncounted, to be claimed again.
   */
  private async isolatingSuspects(events: ClaimedEvent[]): Promise<number> {
    const suspects = events.filter(previousAttemptExpired);
    if (suspects.length === 0) {
      await this.inLanes(events);
      return 0;
    }
    const [alone, ...later] = suspects;
    let gaveBack = 0;
    if (later.length > 0) {
      gaveBack = await this.ctx.writes.releaseUnstarted(later.map((e) => e.id), this.token, this.total);
    }
    await this.inLanes(events.filter((e) => !suspects.includes(e)));
    this.logger.log(
      `Outbox event ${alone.id} (${alone.topic}): attempt ${alone.attempts - 1} did not finish before its lease ` +
        `expired; running attempt ${alone.attempts} alone`,
    );
    await this.inLanes([alone]);
    return gaveBack;
  }

  /** Delivers `events` with up to `concurrency` at a time, acknowledging successes as they come. */
  private async inLanes(events: ClaimedEvent[]): Promise<void> {
    if (events.length === 0) return;
    const { state } = this.ctx;
    const acks = new AckBuffer((ids) => this.acknowledge(ids, events));
    state.ackBuffers.add(acks);
    let next = 0;
    const lanes = Array.from({ length: Math.min(this.ctx.options.worker.concurrency, events.length) }, async () => {
      while (next < events.length) {
        const event = events[next++];
        if (!(await this.deliver(event))) continue;
        // Buffered successes are written by shutdown too; one that ends after it closed is not.
        if (!state.closed) acks.add(event.id);
        else this.logger.warn(`Outbox acknowledgement of event ${event.id} skipped: the worker has shut down`);
      }
    });
    try {
      await Promise.all(lanes);
    } finally {
      state.ackBuffers.delete(acks);
      await acks.close();
    }
  }

  /** Runs an event's pending targets; true when all succeeded (the lane acknowledges it in a batch). */
  private async deliver(event: ClaimedEvent): Promise<boolean> {
    const { state, options } = this.ctx;
    // Given back by a shutdown that timed out while it waited for a lane.
    if (!state.waiting.delete(event.id)) return false;
    const handlers = this.ctx.targets.forTopic(event.topic);
    const done = event.completedHandlers;
    const pending = done.length === 0 ? handlers : handlers.filter((h) => !done.includes(h.name));
    const { renewal } = this;
    const margin = leaseMarginMs(options.worker.leaseMs);
    // Renewed, the lease need only last until the next renewal; else, until the longest timeout ends.
    const needed = renewal ? renewal.intervalMs + margin : Math.max(0, ...pending.map((h) => h.timeoutMs)) + margin;
    const leaseLeft = renewal ? renewal.leaseLeftMs() : options.worker.leaseMs - (performance.now() - this.claimedAt);
    if (state.stopping || needed > leaseLeft) return this.giveBackUnstarted(event);

    const aborts = pending.map(() => new LazyAbort());
    state.inFlight.set(event.id, { token: this.token, abort: aborts });
    const { invoker } = this.ctx;
    let outcomes: HandlerOutcome[];
    try {
      if (pending.length === 1) {
        // One target, the common case, without the arrays of messages and promises.
        outcomes = [await invoker.invoke(pending[0], event, new DeliveredMessage(event, aborts[0], false), aborts[0])];
      } else {
        // Every copy is made before any handler runs (and may change what it was given).
        const messages = pending.map((_, i) => new DeliveredMessage(event, aborts[i], i > 0));
        outcomes = await Promise.all(pending.map((handler, i) => invoker.invoke(handler, event, messages[i], aborts[i])));
      }
    } finally {
      state.inFlight.delete(event.id);
    }
    // Lost while it ran (see LeaseRenewal): counted and reported there; another worker may hold it now.
    if (renewal?.isLost(event.id)) return false;
    if (handlers.length > 0 && outcomes.every((o) => !('error' in o))) return true;
    await this.recordFailure(event, handlers.length, outcomes);
    return false;
  }

  /** Not started: handed back with its attempt, rather than started where the lease cannot cover it. */
  private async giveBackUnstarted(event: ClaimedEvent): Promise<false> {
    const { state } = this.ctx;
    const recorded = await this.ctx.writes.record('release', event.id, () => this.ctx.store.release(event.id, this.token, true));
    if (recorded === 'done') this.total.released++;
    else if (recorded === 'rejected') this.total.lostLeases++;
    if (recorded === 'done' && this.ctx.events.observed) {
      const why = state.stopping ? 'shutdown' : 'lease-budget';
      this.ctx.events.emit({ type: 'released', ids: [event.id], uncounted: true, why });
    }
    return false;
  }

  /** One statement for a batch of successes, fenced by the claim token. */
  private async acknowledge(ids: string[], batch: ClaimedEvent[]): Promise<void> {
    try {
      const acknowledged = await this.ctx.store.acknowledge(ids, this.token);
      this.total.delivered += acknowledged;
      this.ctx.writes.emitWritten(ids, acknowledged, 'acknowledge', batch);
      if (acknowledged < ids.length) {
        this.total.lostLeases += ids.length - acknowledged;
        this.logger.warn(
          `Outbox acknowledgement of ${ids.length - acknowledged} of ${ids.length} event(s) rejected: ` +
            'their lease expired and another claim took them',
        );
      }
    } catch (error) {
      this.ctx.writes.logStoreError('acknowledgement', ids.join(', '), error);
    }
  }

  private async recordFailure(event: ClaimedEvent, targetCount: number, outcomes: HandlerOutcome[]): Promise<void> {
    const { retry, testing } = this.ctx.options;
    const decision = decideFailure(event, targetCount, outcomes, retry);
    const { errorText, deadLetter, nonRetryable } = decision;
    const retryDelayMs = testing ? 0 : decision.retryDelayMs;
    const recorded = await this.ctx.writes.record('failure', event.id, () =>
      this.ctx.store.fail(event.id, this.token, {
        error: storableError(errorText),
        completedHandlers: decision.completedHandlers,
        deadLetter,
        retryDelayMs,
      }),
    );
    if (recorded === 'rejected') this.total.lostLeases++;
    // Not recorded (logged by record()): the lease will expire and the event be claimed again.
    if (recorded !== 'done') return;
    if (this.ctx.events.observed) {
      this.emitFailure(event, errorText, deadLetter ? (nonRetryable ? 'non-retryable' : 'handler') : retryDelayMs);
    }
    if (deadLetter) {
      this.total.deadLettered++;
      this.logger.error(
        `Dead-lettered outbox event ${event.id} (${event.topic}) after attempt ${event.attempts}` +
          `${nonRetryable ? ' (non-retryable)' : ''}: ${errorText}`,
      );
    } else {
      this.total.failed++;
      this.logger.warn(
        `Outbox event ${event.id} (${event.topic}) attempt ${event.attempts} of ${retry.maxAttempts} ` +
          `failed; retrying in ${retryDelayMs} ms or later: ${errorText}`,
      );
    }
  }

  private emitClaim(): void {
    const { claim } = this;
    const leased = claim.undecodable.filter((row) => !row.deadLettered);
    const ids = [...claim.events.map((e) => e.id), ...leased.map((row) => row.id)];
    if (ids.length > 0) this.ctx.events.emit({ type: 'claimed', token: claim.token, count: ids.length, ids });
    for (const event of claim.deadLettered) {
      this.ctx.events.emit({
        type: 'dead-lettered',
        id: event.id,
        topic: event.topic,
        attempt: event.attempts,
        error: deadLetterReason(event),
        reason: 'attempts-exhausted-at-claim',
      });
    }
  }

  /** A recorded failure: dead-lettered for `reason`, or retried in `delayMs`. */
  private emitFailure(event: ClaimedEvent, error: string, outcome: 'handler' | 'non-retryable' | number): void {
    const { id, topic, attempts: attempt } = event;
    if (typeof outcome === 'number') {
      const dueAt = new Date(Date.now() + outcome);
      this.ctx.events.emit({ type: 'retry.scheduled', id, topic, attempt, delayMs: outcome, dueAt, error });
    } else {
      this.ctx.events.emit({ type: 'dead-lettered', id, topic, attempt, error, reason: outcome });
    }
  }
}
