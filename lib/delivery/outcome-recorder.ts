import type { Logger } from '@nestjs/common';
import type { ClaimedEvent, FailureUpdate } from '../interfaces/claimed-event.interface';
import type { OutboxReleaseReason } from '../events/lifecycle-event';
import type { OutboxEvents } from '../events/outbox-events';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { ClaimResult } from '../store/claim-result';
import type { OutboxStore } from '../store/outbox.store';
import { aboutEvent, aboutEvents } from '../utils/log-record';
import type { ClaimScope, DeliveryLedger } from './delivery-ledger';
import { decideFailure, storableError, undecodableError } from './failure-policy';
import { failedNames, OutcomeReports } from './outcome-reports';
import type { HandlerOutcome } from './handler-invoker';
import type { DeliveryTarget } from './delivery-targets';

type UndecodableRow = ClaimResult['undecodable'][number];
/** What a failure's write recorded: `lease-lost` when the lease had run out. */
type Recorded = 'retried' | 'dead-lettered' | 'lease-lost';

/**
 * Where the outcome of every claimed event is recorded, one per worker: the write, fenced by the claim
 * token (acknowledge, fail, release, defer), then what it did reported through `reports` (the count in
 * the drain result, the lifecycle event, the log line: `OutcomeReports`). A write the database refuses
 * (the claim lost the lease) is counted in `lostLeases` and reported; one it fails, or one tried after
 * shutdown closed the worker, is logged and never thrown: the lease decides then.
 */
export class OutcomeRecorder {
  constructor(
    private readonly options: ResolvedOutboxOptions,
    private readonly store: OutboxStore,
    private readonly events: OutboxEvents,
    private readonly ledger: DeliveryLedger,
    private readonly logger: Logger,
  ) {
    this.reports = new OutcomeReports(options, events, logger);
  }

  /** Where what the writes did, and what the worker noticed, is counted, emitted and logged. */
  readonly reports: OutcomeReports;

  /**
   * A claimed row the store could not decode (JSON cut short by MySQL's non-strict `sql_mode`, say):
   * no handler can be given it, and retrying cannot mend it. Dead-lettered alone, with the reason.
   */
  async deadLetterUndecodable(row: UndecodableRow, scope: ClaimScope): Promise<void> {
    const error = undecodableError(row.error);
    // A row the claim dead-lettered already, its attempts spent, needs no write: only the reading failed.
    if (!row.deadLettered) {
      const stored = storableError(this.options.errorText.redact(error));
      const update = { deadLetter: true, error: stored, completedHandlers: [], retryDelayMs: 0 };
      if (!(await this.write(row.id, scope, update))) return;
    }
    this.reports.dead(scope.total, row, error, 'undecodable', '');
  }

  /** An event some of whose targets failed (or that had none): retried after its backoff, or dead-lettered. */
  async fail(event: ClaimedEvent, scope: ClaimScope, targets: number, outcomes: HandlerOutcome[]): Promise<Recorded> {
    const { retry, testing } = this.options;
    const decision = decideFailure(event, targets, outcomes, retry, this.options.errorText);
    const { maxAttempts } = decision;
    const { errorText, completedHandlers, deadLetter, nonRetryable } = decision;
    const retryDelayMs = testing ? 0 : decision.retryDelayMs;
    const update = {
      error: storableError(this.options.errorText.redact(errorText)),
      completedHandlers,
      deadLetter,
      retryDelayMs,
    };
    // Not written: the lease will expire and the event be claimed again.
    if (!(await this.write(event.id, scope, update, deadLetter ? this.skippedFront(event) : undefined))) {
      return 'lease-lost';
    }
    if (deadLetter) {
      const after = ` (${event.topic}) after attempt ${event.attempts}${nonRetryable ? ' (non-retryable)' : ''}`;
      this.reports.dead(scope.total, event, errorText, nonRetryable ? 'non-retryable' : 'handler', after, outcomes);
      this.reports.blocked(event);
      return 'dead-lettered';
    }
    const { id, topic, attempts: attempt } = event;
    if (this.events.observed) {
      const dueAt = new Date(Date.now() + retryDelayMs);
      const failure = { error: errorText, failedHandlers: failedNames(outcomes) };
      this.events.emit({ type: 'retry.scheduled', id, topic, attempt, delayMs: retryDelayMs, dueAt, ...failure });
    }
    scope.total.failed++;
    this.ledger.retryScheduled?.(retryDelayMs);
    const text = `attempt ${attempt} of ${maxAttempts} failed; retrying in ${retryDelayMs} ms or later: ${errorText}`;
    this.logger.warn(aboutEvent(`Outbox event ${id} (${topic}) ${text}`, event));
    return 'retried';
  }

  /**
   * Dead events the claim found spent whose topic skips a dead head: their keys' fronts move on. A
   * failure is logged; the start-up sweep of a later start moves them.
   */
  async skipDeadFronts(claim: ClaimResult): Promise<void> {
    const skipped = claim.deadLettered.filter((event) => this.skippedFront(event) !== undefined);
    if (skipped.length === 0) return;
    const ids = skipped.map((event) => event.id);
    try {
      await this.store.moveFronts(
        skipped.map((event) => event.key!),
        ids,
      );
    } catch (error) {
      this.reports.storeFailed('move of the key fronts after', ids, error);
    }
  }

  /** The key of an ordered event whose death lets the next event of its key go on (`deadHead: 'skip'`). */
  private skippedFront(event: ClaimedEvent): string | undefined {
    return event.seq !== null && this.options.ordering.skipsDeadHead(event.topic) ? event.key! : undefined;
  }

  /** Whether a success may still be buffered for acknowledgement: not once shutdown has closed the worker. */
  mayAcknowledge(id: string): boolean {
    if (!this.ledger.closed) return true;
    this.reports.skipped('acknowledgement', id, '');
    return false;
  }

  /** A batch's successes in one statement, their keys' fronts moved with it. */
  async acknowledge(events: ClaimedEvent[], scope: ClaimScope): Promise<ClaimedEvent[]> {
    const ids = events.map((e) => e.id);
    let written = events;
    try {
      const keys = events.filter((e) => e.seq !== null).map((e) => e.key!);
      const acknowledged = await this.store.acknowledge(ids, scope.token, keys);
      scope.total.delivered += acknowledged;
      // Some refused (another claim took them): the others are delivered all the same, and said so.
      if (acknowledged < ids.length) written = acknowledged === 0 ? [] : await this.store.deliveredAt(events);
    } catch (error) {
      this.reports.storeFailed('acknowledgement', ids, error);
      return [];
    }
    if (written.length < ids.length) {
      const refused = ids.filter((id) => !written.some((e) => e.id === id));
      this.reports.refused(refused, refused.length, 'acknowledge', scope.total);
      const text = `Outbox acknowledgement of ${refused.length} of ${ids.length} event(s) rejected`;
      this.logger.warn(aboutEvents(`${text}: their lease expired and another claim took them`, refused));
    }
    if (this.events.wants('delivered')) {
      for (const { id, topic, attempts: attempt } of written)
        this.events.emit({ type: 'delivered', id, topic, attempt });
    }
    return written;
  }

  /** Not started (shutdown began, or too little lease is left): handed back with its attempt uncounted. */
  async giveBackUnstarted(id: string, scope: ClaimScope): Promise<void> {
    if (!(await this.write(id, scope, undefined))) return;
    scope.total.released++;
    if (this.events.observed) {
      const why = this.ledger.stopping ? 'shutdown' : 'lease-budget';
      this.events.emit({ type: 'released', ids: [id], uncounted: true, why });
    }
  }

  /**
   * An event some of whose targets were full (`deferred`): the others succeeded (`done`, added to those
   * done before); it goes back uncounted, due when the first of the full ones should have a free slot.
   */
  async defer(
    event: ClaimedEvent,
    scope: ClaimScope,
    done: string[],
    deferred: readonly DeliveryTarget[],
  ): Promise<boolean> {
    const delayMs = Math.min(...deferred.map((target) => target.bound.deferralMs()));
    const completed = done.length === 0 ? event.completedHandlers : [...event.completedHandlers, ...done];
    const { id, topic } = event;
    const run = () => this.store.defer(id, scope.token, completed, delayMs);
    if (!(await this.fenced(id, scope, 'deferral', run))) return false;
    scope.total.deferred++;
    this.ledger.deferred(scope.total, delayMs);
    if (this.events.observed) {
      const targets = deferred.map((target) => target.name);
      this.events.emit({ type: 'deferred', id, topic, targets, delayMs });
    }
    return true;
  }

  /** Gives claimed events back uncounted, in one statement; resolves with how many went back. */
  async releaseUnstarted(ids: string[], scope: ClaimScope, why: OutboxReleaseReason): Promise<number> {
    try {
      const released = await this.store.releaseMany(ids, scope.token, true);
      scope.total.released += released;
      if (released < ids.length) this.reports.refused(ids, ids.length - released, 'release', scope.total);
      else if (this.events.observed) this.events.emit({ type: 'released', ids, uncounted: true, why });
      return released;
    } catch (error) {
      this.reports.storeFailed('release', ids, error);
      return 0;
    }
  }

  /** Gives back, its attempt counted, an event whose handler shutdown stopped waiting for (no drain counts it). */
  async releaseRunning(id: string, token: string): Promise<void> {
    let released: boolean;
    try {
      released = await this.store.release(id, token, false);
    } catch (error) {
      this.reports.storeFailed('release', [id], error);
      return;
    }
    if (!released) this.reports.refused([id], 1, 'release');
    else if (this.events.observed) this.events.emit({ type: 'released', ids: [id], uncounted: false, why: 'shutdown' });
  }

  /** The fenced write of one event's failure (`update`) or, without it, its release uncounted. */
  private write(id: string, scope: ClaimScope, update: FailureUpdate | undefined, frontOf?: string): Promise<boolean> {
    const { store } = this;
    return update
      ? this.fenced(id, scope, 'failure', () => store.fail(id, scope.token, update, frontOf))
      : this.fenced(id, scope, 'release', () => store.release(id, scope.token, true));
  }

  /**
   * Runs the fenced write `run` of one event: true when applied; else refused (counted and reported),
   * failed, or skipped after shutdown, and logged.
   */
  private async fenced(
    id: string,
    scope: ClaimScope,
    what: 'failure' | 'release' | 'deferral',
    run: () => Promise<boolean>,
  ): Promise<boolean> {
    if (this.ledger.closed) {
      this.reports.skipped(what, id, '; its lease will expire');
      return false;
    }
    try {
      if (await run()) return true;
      this.reports.refused([id], 1, what === 'failure' ? 'fail' : 'release', scope.total);
      const text = `Outbox ${what} of event ${id} rejected: its lease expired and another claim took it`;
      this.logger.warn(aboutEvents(text, id));
      return false;
    } catch (error) {
      this.reports.storeFailed(what, [id], error);
      return false;
    }
  }
}
