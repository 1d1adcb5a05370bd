import type { ClaimedEvent } from '../interfaces/claimed-event.interface';
import type { OutboxAttemptOutcome, OutboxAttemptSpan } from '../interfaces/outbox-tracing.interface';
import type { BatchContext } from './batch-context';
import type { ClaimScope } from './delivery-ledger';
import type { DeliveryTarget } from './delivery-targets';
import type { HandlerOutcome } from './handler-invoker';

/** What an attempt whose targets ran leaves to record when it did not simply succeed. */
export interface RanAttempt {
  readonly ahead: (() => Promise<boolean>) | undefined;
  /** How many targets the event's topic has. */
  readonly targets: number;
  /** The targets that ran, and those that were full. */
  readonly now: readonly DeliveryTarget[];
  readonly full: readonly DeliveryTarget[];
  /** The outcomes of those that ran, in their order. */
  readonly outcomes: HandlerOutcome[];
  readonly span: OutboxAttemptSpan | undefined;
}

/**
 * What one claim's attempts write when they do not simply succeed — given back, deferred for a full
 * target, failed — through the worker's `OutcomeRecorder`, fenced by the claim's token; each resolves
 * false (nothing to acknowledge). `ahead`, in a run acknowledged together: the successes of the key
 * before the event, written first (else nothing is: the key's lease is lost). The async half of
 * `AttemptRunner`, off the path of an event whose targets all succeed.
 */
export class AttemptWrites {
  constructor(
    private readonly ctx: BatchContext,
    private readonly scope: ClaimScope,
  ) {}

  /** Not started (shutdown began, or too little lease is left): handed back with its attempt uncounted. */
  async givenBack(event: ClaimedEvent, ahead: (() => Promise<boolean>) | undefined): Promise<boolean> {
    if (await settledAhead(ahead)) await this.ctx.recorder.giveBackUnstarted(event.id, this.scope);
    return false;
  }

  /**
   * Some of its targets were full: it goes back, due when one has a slot, with the targets that ran and
   * succeeded (`succeeded`, none when it did not start) recorded; `span` ends saying whether it was.
   */
  async deferred(
    event: ClaimedEvent,
    ahead: (() => Promise<boolean>) | undefined,
    succeeded: string[],
    full: readonly DeliveryTarget[],
    span: OutboxAttemptSpan | undefined,
  ): Promise<boolean> {
    let outcome: OutboxAttemptOutcome = 'not-recorded';
    try {
      if ((await settledAhead(ahead)) && (await this.ctx.recorder.defer(event, this.scope, succeeded, full)))
        outcome = 'deferred';
      return false;
    } finally {
      span?.end(outcome);
    }
  }

  /** Its targets ran, and one failed or was full (or it had none): deferred, or retried or dead-lettered. */
  unsettled(event: ClaimedEvent, attempt: RanAttempt): Promise<boolean> {
    const { ahead, targets, now, full, outcomes, span } = attempt;
    if (targets > 0 && !outcomes.some(failed)) {
      return this.deferred(
        event,
        ahead,
        now.map((target) => target.name),
        full,
        span,
      );
    }
    return this.failed(event, attempt);
  }

  /** Some target failed (or there was none): retried or dead-lettered. */
  private async failed(event: ClaimedEvent, attempt: RanAttempt): Promise<boolean> {
    const { ahead, targets, outcomes, span } = attempt;
    let outcome: OutboxAttemptOutcome = 'not-recorded';
    try {
      if (span) for (const o of outcomes) if (failed(o)) span.failed(o.handler.name, o.error);
      if (await settledAhead(ahead)) outcome = await this.ctx.recorder.fail(event, this.scope, targets, outcomes);
      return false;
    } finally {
      span?.end(outcome);
    }
  }
}

/** Whether a target's run failed: an outcome without an `error` key succeeded. */
export function failed(outcome: HandlerOutcome): boolean {
  return 'error' in outcome;
}

/** Whether the successes of the key ahead of an event were written (`ahead`; none to wait for without it). */
async function settledAhead(ahead: (() => Promise<boolean>) | undefined): Promise<boolean> {
  return ahead === undefined || ahead();
}
