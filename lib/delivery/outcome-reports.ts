import type { Logger } from '@nestjs/common';
import type { ClaimedEvent } from '../interfaces/claimed-event.interface';
import type { OutboxDeadLetterReason, OutboxLeaseLostEvent } from '../events/lifecycle-event';
import type { OutboxEvents } from '../events/outbox-events';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { ClaimResult } from '../store/claim-result';
import { aboutEvent, aboutEvents } from '../utils/log-record';
import type { OutboxDrainResult } from './drain-result';
import { deadLetterReason } from './failure-policy';
import type { HandlerOutcome } from './handler-invoker';

/** What is known of an event that died: a row that could not be decoded has no key, payload or headers. */
export type DeadEvent = Pick<ClaimedEvent, 'id' | 'topic' | 'attempts'> &
  Partial<Pick<ClaimedEvent, 'key' | 'payload' | 'headers'>>;

/**
 * What becomes known of the worker's deliveries, said where it is said: counted in the drain result,
 * emitted as a lifecycle event (built only while someone observes), logged. The `OutcomeRecorder`'s
 * writes report here what they did; a claim, a lease renewal and a crash suspect report here too. It
 * writes nothing to the outbox.
 */
export class OutcomeReports {
  constructor(
    private readonly options: ResolvedOutboxOptions,
    private readonly events: OutboxEvents,
    private readonly logger: Logger,
  ) {}

  /** A claim leased its events (and rows it could not decode), and dead-lettered those whose last attempt outlived its lease. */
  claimed(claim: ClaimResult, total: OutboxDrainResult): void {
    if (this.events.observed) {
      const leased = claim.undecodable.filter((row) => !row.deadLettered);
      const runs = [...claim.runs.values()].flat();
      const ids = [...claim.events, ...runs, ...leased].map((e) => e.id);
      const { token, durationMs } = claim;
      if (ids.length > 0) this.events.emit({ type: 'claimed', token, count: ids.length, ids, durationMs });
    }
    for (const event of claim.deadLettered) {
      this.dead(total, event, deadLetterReason(event), 'attempts-exhausted-at-claim', ` (${event.topic})`);
      this.blocked(event);
    }
  }

  /** Dead: counted, reported and logged; `where` follows the id in the log line, `outcomes` are its attempt's. */
  dead(
    total: OutboxDrainResult,
    event: DeadEvent,
    error: string,
    reason: OutboxDeadLetterReason,
    where: string,
    outcomes: readonly HandlerOutcome[] = [],
  ): void {
    total.deadLettered++;
    this.options.testing?.eventDeadLettered({
      id: event.id,
      topic: event.topic,
      key: event.key ?? null,
      payload: event.payload,
      headers: { ...event.headers },
      attempt: event.attempts,
      error: this.options.errorText.redact(error),
    });
    if (this.events.observed) {
      const { id, topic, attempts: attempt } = event;
      const failedHandlers = failedNames(outcomes);
      this.events.emit({ type: 'dead-lettered', id, topic, attempt, error, reason, failedHandlers });
    }
    const text = `Dead-lettered outbox event ${event.id}${where}: ${error}`;
    this.logger.error(aboutEvent(text, event));
  }

  /** A dead event that stays its key's head (`deadHead: 'block'`): its key is blocked. */
  blocked(event: ClaimedEvent): void {
    if (event.seq === null || this.options.ordering.skipsDeadHead(event.topic)) return;
    const { id, topic, key } = event;
    const text = `Outbox key "${key}" blocked behind its dead head ${id} (${topic}): redrive or discard it`;
    this.logger.warn(aboutEvent(text, event));
    if (this.events.observed) this.events.emit({ type: 'key.blocked', key: key!, id, topic });
  }

  /**
   * `count` of the fenced writes of `ids` were refused: the claim lost their lease. A release of many does
   * not say which: then `ids` are all it tried.
   */
  refused(ids: string[], count: number, what: OutboxLeaseLostEvent['what'], total?: OutboxDrainResult): void {
    if (total) total.lostLeases += count;
    if (this.events.observed) this.events.emit({ type: 'lease.lost', ids, count, what });
  }

  /** A write of `ids` that the database failed: logged; their lease decides. */
  storeFailed(what: string, ids: string[], error: unknown): void {
    const described = this.options.errorText.describe(error);
    const text = `Outbox ${what} of event ${ids.join(', ')} failed; its lease will expire: ${described}`;
    this.logger.error(aboutEvents(text, ids.length === 1 ? ids[0] : ids));
  }

  /** A write of `id` not tried: shutdown has closed the worker. */
  skipped(what: string, id: string, then: string): void {
    this.logger.warn(aboutEvents(`Outbox ${what} of event ${id} skipped: the worker has shut down${then}`, id));
  }

  /** A lease renewal found `ids` no longer held: their handlers were aborted, their outcome is not written. */
  renewalLost(ids: string[], total: OutboxDrainResult): void {
    this.refused(ids, ids.length, 'renew', total);
    const text = `Outbox lease renewal of event(s) ${ids.join(', ')} rejected: their lease expired and another claim took`;
    this.logger.warn(
      aboutEvents(`${text} them; their handlers were aborted and their outcome will not be recorded`, ids),
    );
  }

  renewalFailed(count: number, retryInMs: number, error: unknown): void {
    this.logger.error(
      `Outbox lease renewal of ${count} event(s) failed; trying again in ${retryInMs} ms, ` +
        `the lease keeps its expiry meanwhile: ${this.options.errorText.describe(error)}`,
    );
  }

  /** A crash suspect (its previous attempt outlived its lease) runs alone, after the rest of its claim. */
  runsAlone(event: ClaimedEvent): void {
    const { id, topic, attempts } = event;
    const text = `attempt ${attempts - 1} did not finish before its lease expired; running attempt ${attempts} alone`;
    this.logger.log(aboutEvent(`Outbox event ${id} (${topic}): ${text}`, event));
  }
}

/** The names of the targets that failed, for the lifecycle events (built only while someone observes). */
export function failedNames(outcomes: readonly HandlerOutcome[]): string[] {
  return outcomes.filter((o) => 'error' in o).map((o) => o.handler.name);
}
