import { performance } from 'node:perf_hooks';
import type { ClaimedEvent } from '../interfaces/claimed-event.interface';
import type { OutboxAttemptOutcome, OutboxAttemptSpan } from '../interfaces/outbox-tracing.interface';
import { leaseMarginMs } from '../utils/lease-margin';
import type { BatchContext } from './batch-context';
import { DeliveredMessage } from './delivered-message';
import type { ClaimScope } from './delivery-ledger';
import type { DeliveryTarget } from './delivery-targets';
import type { HandlerOutcome } from './handler-invoker';
import { LazyAbort } from './lazy-abort';
import type { LeaseRenewal } from './lease-renewal';
import { takeSlots } from './target-slots';

/**
 * One claim's attempts, an event at a time: within what is left of the lease, the event's pending
 * targets run with their slots, each on its own message, in the attempt's span; what did not simply
 * succeed is recorded, fenced by the claim's token, by the worker's `OutcomeRecorder`. Successes are
 * left to the claim, which acknowledges them in batches.
 */
export class AttemptRunner {
  constructor(
    private readonly ctx: BatchContext,
    private readonly scope: ClaimScope,
    /** When the claim was made (performance.now()): the lease's clock. */
    private readonly claimedAt: number,
    /** The claim's lease renewal, with `worker.renewLease` once it runs. */
    private readonly renewalOf: () => LeaseRenewal | undefined,
  ) {}

  /** How long the lease is sure to last from now, in ms, by this process's clock. */
  private leaseLeftMs(renewal: LeaseRenewal | undefined): number {
    return renewal ? renewal.leaseLeftMs() : this.ctx.options.worker.leaseMs - (performance.now() - this.claimedAt);
  }

  /**
   * Runs an event's pending targets; true when all succeeded (the lane acknowledges it in a batch).
   * `ahead`: in a run acknowledged together, writes the successes of its key before it and says whether
   * they were written — awaited before anything else is recorded of the event, which then is its key's
   * front (else nothing is recorded: the key's lease is lost, and its front will be claimed again).
   * Not an async function: the common case — the targets run now and all succeed — costs the promise of
   * their calls and one more; whatever must be written on the way takes the async paths below.
   */
  deliver(event: ClaimedEvent, ahead?: () => Promise<boolean>): Promise<boolean> {
    const { ledger, options } = this.ctx;
    const { token } = this.scope;
    // Given back by a shutdown that timed out while it waited for a lane.
    if (!ledger.leaveWaiting(event.id, this.scope)) return NOT_DELIVERED;
    const handlers = this.ctx.targets.forTopic(event.topic);
    const done = event.completedHandlers;
    const pending = done.length === 0 ? handlers : handlers.filter((h) => !done.includes(h.name));
    const renewal = this.renewalOf();
    const margin = leaseMarginMs(options.worker.leaseMs);
    // Renewed, the lease need only last until the next renewal; else, until the longest timeout ends.
    const needed = renewal ? renewal.intervalMs + margin : longestTimeoutMs(pending) + margin;
    // Handed back with its attempt, rather than started where the lease cannot cover it.
    if (ledger.stopping || needed > this.leaseLeftMs(renewal)) return this.givenBack(event, ahead);
    const { now, slots, full } = takeSlots(pending);
    if (now.length === 0 && full.length > 0) return this.deferredUnrun(event, ahead, full);
    const aborts = now.map(() => new LazyAbort());
    ledger.started(event.id, token, aborts);
    // Its span (with tracing): the handlers run in it; it ends with the attempt's outcome.
    const span = options.tracing?.startAttempt(event);
    // Whatever ends the run unrecorded ends its span and its place among the running too.
    const unrecorded = (error: unknown): never => {
      ledger.ended(event.id, token);
      span?.end('not-recorded');
      throw error;
    };
    let running: Promise<HandlerOutcome[]>;
    try {
      running = span ? span.run(() => this.invoke(event, now, aborts, slots)) : this.invoke(event, now, aborts, slots);
    } catch (error) {
      return unrecorded(error);
    }
    return running.then((outcomes) => {
      ledger.ended(event.id, token);
      // Lost while it ran (see LeaseRenewal): counted and reported there; another worker may hold it now.
      if (renewal?.isLost(event.id)) {
        span?.end('lease-lost');
        return false;
      }
      const succeeded = handlers.length > 0 && !outcomes.some(failed);
      if (succeeded && full.length === 0) {
        span?.end('success');
        return true;
      }
      const attempt = { ahead, targets: handlers.length, now, full, outcomes, span };
      return succeeded ? this.partlyDeferred(event, attempt) : this.failed(event, attempt);
    }, unrecorded);
  }

  /** Not started (shutdown began, or too little lease is left): handed back with its attempt uncounted. */
  private async givenBack(event: ClaimedEvent, ahead: (() => Promise<boolean>) | undefined): Promise<boolean> {
    if (await settledAhead(ahead)) await this.ctx.recorder.giveBackUnstarted(event.id, this.scope);
    return false;
  }

  /** Every target of `event` that has not succeeded yet is full: it goes back unrun, due when one has a slot. */
  private async deferredUnrun(
    event: ClaimedEvent,
    ahead: (() => Promise<boolean>) | undefined,
    full: readonly DeliveryTarget[],
  ): Promise<boolean> {
    if (await settledAhead(ahead)) await this.ctx.recorder.defer(event, this.scope, [], full);
    return false;
  }

  /** The targets that ran succeeded, and others were full: it goes back with theirs recorded. */
  private async partlyDeferred(event: ClaimedEvent, attempt: RanAttempt): Promise<boolean> {
    const { ahead, now, full, span } = attempt;
    let outcome: OutboxAttemptOutcome = 'not-recorded';
    try {
      const succeeded = now.map((target) => target.name);
      if ((await settledAhead(ahead)) && (await this.ctx.recorder.defer(event, this.scope, succeeded, full)))
        outcome = 'deferred';
      return false;
    } finally {
      span?.end(outcome);
    }
  }

  /** Some target failed (or there was none): retried or dead-lettered. */
  private async failed(event: ClaimedEvent, attempt: RanAttempt): Promise<boolean> {
    const { ahead, targets, outcomes, span } = attempt;
    let outcome: OutboxAttemptOutcome = 'not-recorded';
    try {
      if (span) for (const o of outcomes) if ('error' in o) span.failed(o.handler.name, o.error);
      if (await settledAhead(ahead)) outcome = await this.ctx.recorder.fail(event, this.scope, targets, outcomes);
      return false;
    } finally {
      span?.end(outcome);
    }
  }

  /**
   * Calls each of `pending` with its message of `event`, once it has its slot (`slots[i]`, when it waits
   * for one); resolves with their outcomes, in their order. Each gives its slot back as its call settles
   * (or times out). One promise for them all: the handler calls report through callbacks.
   */
  private invoke(
    event: ClaimedEvent,
    pending: readonly DeliveryTarget[],
    aborts: LazyAbort[],
    slots: ReadonlyArray<Promise<void> | undefined> | undefined,
  ): Promise<HandlerOutcome[]> {
    const { token } = this.scope;
    const count = pending.length;
    // A topic without targets: its attempt fails (see `failed`).
    if (count === 0) return Promise.resolve([]);
    // One target, the common case, without arrays: an array made here per event (an outcomes array of
    // `new Array(n)`) sent V8's allocation-site pretenuring into keeping such short-lived objects, and
    // doubled the worker's CPU per event (bench/results/2026-12-06-drain-cpu.md).
    if (count === 1) {
      const message = new DeliveredMessage(event, aborts[0], false, token);
      const slot = slots?.[0];
      return new Promise((resolve) => {
        const ended = (_: number, outcome: HandlerOutcome) => resolve([outcome]);
        if (slot) void slot.then(() => this.call(pending[0], message, 0, ended));
        else this.call(pending[0], message, 0, ended);
      });
    }
    return new Promise((resolve) => {
      const outcomes: HandlerOutcome[] = [];
      let left = count;
      const ended = (i: number, outcome: HandlerOutcome) => {
        outcomes[i] = outcome;
        if (--left === 0) resolve(outcomes);
      };
      // Every copy is made before any handler runs (and may change what it was given).
      const messages = pending.map((_, i) => new DeliveredMessage(event, aborts[i], i > 0, token));
      for (let i = 0; i < count; i++) {
        const slot = slots?.[i];
        if (slot) void slot.then(() => this.call(pending[i], messages[i], i, ended));
        else this.call(pending[i], messages[i], i, ended);
      }
    });
  }

  /** Runs `target` on its `message` (the `i`th of the event's calls) and tells `ended` its outcome, its slot given back. */
  private call(
    target: DeliveryTarget,
    message: DeliveredMessage,
    i: number,
    ended: (i: number, outcome: HandlerOutcome) => void,
  ): void {
    const { bound } = target;
    // Aborted while it waited for its slot (shutdown, a lost lease): it never starts.
    const aborted = DeliveredMessage.abortOf(message).abortedWith;
    if (aborted) {
      bound.give();
      ended(i, { handler: target, error: aborted.reason });
      return;
    }
    const startedAt = bound.started();
    this.ctx.invoker.invoke(target, message, (outcome) => {
      bound.give(startedAt);
      ended(i, outcome);
    });
  }
}

/** A delivery that did not start (shared: nothing is allocated for it). */
const NOT_DELIVERED = Promise.resolve(false);

/** What an attempt whose targets ran leaves to record when it did not simply succeed. */
interface RanAttempt {
  readonly ahead: (() => Promise<boolean>) | undefined;
  /** How many targets the event's topic has. */
  readonly targets: number;
  /** The targets that ran, and those that were full. */
  readonly now: readonly DeliveryTarget[];
  readonly full: readonly DeliveryTarget[];
  readonly outcomes: HandlerOutcome[];
  readonly span: OutboxAttemptSpan | undefined;
}

function failed(outcome: HandlerOutcome): boolean {
  return 'error' in outcome;
}

/** Whether the successes of the key ahead of an event were written (`ahead`; none to wait for without it). */
async function settledAhead(ahead: (() => Promise<boolean>) | undefined): Promise<boolean> {
  return ahead === undefined || ahead();
}

/** The longest timeout of `targets`, 0 with none. */
function longestTimeoutMs(targets: readonly DeliveryTarget[]): number {
  let longest = 0;
  for (const target of targets) if (target.timeoutMs > longest) longest = target.timeoutMs;
  return longest;
}
