import { performance } from 'node:perf_hooks';
import type { ClaimedEvent } from '../interfaces/claimed-event.interface';
import type { OutboxAttemptSpan } from '../interfaces/outbox-tracing.interface';
import { leaseMarginMs } from '../utils/lease-margin';
import type { BatchContext } from './batch-context';
import { DeliveredMessage } from './delivered-message';
import type { ClaimScope } from './delivery-ledger';
import type { DeliveryTarget } from './delivery-targets';
import type { HandlerOutcome } from './handler-invoker';
import { LazyAbort } from './lazy-abort';
import type { LeaseRenewal } from './lease-renewal';
import { takeSlots } from './target-slots';
import { AttemptWrites, failed } from './attempt-writes';

/**
 * One claim's attempts, an event at a time: within what is left of the lease, the event's pending
 * targets run with their slots, each on its own message, in the attempt's span; what did not simply
 * succeed is recorded, fenced by the claim's token, by the worker's `OutcomeRecorder`. Successes are
 * left to the claim, which acknowledges them in batches.
 */
export class AttemptRunner {
  /** What an attempt that did not simply succeed writes. */
  private readonly writes: AttemptWrites;

  constructor(
    private readonly ctx: BatchContext,
    private readonly scope: ClaimScope,
    /** When the claim was made (performance.now()): the lease's clock. */
    private readonly claimedAt: number,
    /** The claim's lease renewal, with `worker.renewLease` once it runs. */
    private readonly renewalOf: () => LeaseRenewal | undefined,
  ) {
    this.writes = new AttemptWrites(ctx, scope);
  }

  /** How long the lease is sure to last from now, in ms, by this process's clock. */
  private leaseLeftMs(renewal: LeaseRenewal | undefined): number {
    return renewal ? renewal.leaseLeftMs() : this.ctx.options.worker.leaseMs - (performance.now() - this.claimedAt);
  }

  /**
   * Runs an event's pending targets and tells `done` whether all succeeded (the lane acknowledges it in a
   * batch), or what went wrong on the way. `ahead`: in a run acknowledged together, writes the successes
   * of its key before it and says whether they were written — awaited before anything else is recorded of
   * the event, which then is its key's front (else nothing is recorded: the key's lease is lost, and its
   * front will be claimed again). Never throws; `done` is called once, outside any of this method's
   * `try` blocks. A callback rather than a promise: in the common case — the targets run now and all
   * succeed — an event costs no promise of the outbox's, and with synchronous handlers it ends before
   * this returns; whatever must be written on the way takes the async paths below.
   */
  attempt(event: ClaimedEvent, done: AttemptDone, ahead?: () => Promise<boolean>): void {
    let started: Promise<boolean> | undefined;
    try {
      started = this.start(event, done, ahead);
    } catch (error) {
      // Before any handler started, or a target's call threw where it should have reported.
      done(false, { error });
      return;
    }
    if (started)
      started.then(
        (delivered) => done(delivered),
        (error: unknown) => done(false, { error }),
      );
  }

  /** `attempt` as a promise: for a run of per-key order, which delivers one event after another. */
  deliver(event: ClaimedEvent, ahead?: () => Promise<boolean>): Promise<boolean> {
    return new Promise((resolve, reject) =>
      this.attempt(
        event,
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- rejects with what was thrown, as thrown
        (delivered, failure) => (failure ? reject(failure.error) : resolve(delivered)),
        ahead,
      ),
    );
  }

  /**
   * Starts the attempt. Returns a promise when the outcome is written on an async path (or the event does
   * not start); undefined when the targets were started, `done` then being called once they end.
   */
  private start(
    event: ClaimedEvent,
    done: AttemptDone,
    ahead: (() => Promise<boolean>) | undefined,
  ): Promise<boolean> | undefined {
    const { ledger, options } = this.ctx;
    const { token } = this.scope;
    // Given back by a shutdown that timed out while it waited for a lane.
    if (!ledger.leaveWaiting(event.id, this.scope)) return NOT_DELIVERED;
    const handlers = this.ctx.targets.forTopic(event.topic);
    const completed = event.completedHandlers;
    const pending = completed.length === 0 ? handlers : handlers.filter((h) => !completed.includes(h.name));
    const renewal = this.renewalOf();
    const margin = leaseMarginMs(options.worker.leaseMs);
    // Renewed, the lease need only last until the next renewal; else, until the longest timeout ends.
    const needed = renewal ? renewal.intervalMs + margin : longestTimeoutMs(pending) + margin;
    // Handed back with its attempt, rather than started where the lease cannot cover it.
    if (ledger.stopping || needed > this.leaseLeftMs(renewal)) return this.writes.givenBack(event, ahead);
    const { now, slots, full } = takeSlots(pending);
    if (now.length === 0 && full.length > 0) return this.writes.deferred(event, ahead, [], full, undefined);
    const aborts = now.map(() => new LazyAbort());
    ledger.started(event.id, token, aborts);
    // Its span (with tracing): the handlers run in it; it ends with the attempt's outcome.
    const span = options.tracing?.startAttempt(event);
    let reported = false;
    const ended: Ended = (one, all) => {
      reported = true;
      ledger.ended(event.id, token);
      let settled: boolean | Promise<boolean>;
      try {
        settled =
          this.settle(event, renewal, span, handlers.length, full, one, all) ??
          this.writes.unsettled(event, { ahead, targets: handlers.length, now, full, span, outcomes: all ?? [one!] });
      } catch (error) {
        done(false, { error });
        return;
      }
      if (typeof settled === 'boolean') done(settled);
      else
        settled.then(
          (delivered) => done(delivered),
          (error: unknown) => done(false, { error }),
        );
    };
    try {
      if (span) span.run(() => this.invoke(event, now, aborts, slots, ended));
      else this.invoke(event, now, aborts, slots, ended);
    } catch (error) {
      // Thrown past `done` (by what the lane did once told): the attempt has ended, and is not ended twice.
      if (reported) return undefined;
      // Whatever ends the run unrecorded ends its span and its place among the running too.
      ledger.ended(event.id, token);
      span?.end('not-recorded');
      throw error;
    }
    return undefined;
  }

  /**
   * What the targets' outcomes (`one`, the only target's, or `all`) make of the attempt when nothing is
   * left to write of it: false when its lease was lost, true when every target ran and succeeded (it is
   * acknowledged in a batch); else undefined, for `AttemptWrites.unsettled`. Allocates nothing: every event passes here.
   */
  private settle(
    event: ClaimedEvent,
    renewal: LeaseRenewal | undefined,
    span: OutboxAttemptSpan | undefined,
    targets: number,
    full: readonly DeliveryTarget[],
    one: HandlerOutcome | undefined,
    all: HandlerOutcome[] | undefined,
  ): boolean | undefined {
    // Lost while it ran (see LeaseRenewal): counted and reported there; another worker may hold it now.
    if (renewal?.isLost(event.id)) {
      span?.end('lease-lost');
      return false;
    }
    // A topic without targets fails; one whose targets all succeeded before (none ran now) succeeds.
    if (full.length > 0 || targets === 0) return undefined;
    if (one !== undefined ? !failed(one) : !all!.some(failed)) return succeeded(span);
    return undefined;
  }

  /**
   * Calls each of `pending` with its message of `event`, once it has its slot (`slots[i]`, when it waits
   * for one), and `ended` with their outcomes once all have settled: `one`, the outcome of an only target,
   * or `all`, in their order. Each gives its slot back as its call settles (or times out).
   */
  private invoke(
    event: ClaimedEvent,
    pending: readonly DeliveryTarget[],
    aborts: LazyAbort[],
    slots: ReadonlyArray<Promise<void> | undefined> | undefined,
    ended: Ended,
  ): void {
    const { token } = this.scope;
    const count = pending.length;
    // A topic without targets: its attempt fails (see `settle`).
    if (count === 0) return ended(undefined, []);
    // One target, the common case, without arrays: an array made here per event (an outcomes array of
    // `new Array(n)`) sent V8's allocation-site pretenuring into keeping such short-lived objects, and
    // doubled the worker's CPU per event (bench/results/2026-12-06-drain-cpu.md).
    if (count === 1) {
      const message = new DeliveredMessage(event, aborts[0], false, token);
      const slot = slots?.[0];
      const one = (_: number, outcome: HandlerOutcome) => ended(outcome, undefined);
      if (slot) void slot.then(() => this.call(pending[0], message, 0, one));
      else this.call(pending[0], message, 0, one);
      return;
    }
    const outcomes: HandlerOutcome[] = [];
    let left = count;
    const each = (i: number, outcome: HandlerOutcome) => {
      outcomes[i] = outcome;
      if (--left === 0) ended(undefined, outcomes);
    };
    // Every copy is made before any handler runs (and may change what it was given).
    const messages = pending.map((_, i) => new DeliveredMessage(event, aborts[i], i > 0, token));
    for (let i = 0; i < count; i++) {
      const slot = slots?.[i];
      if (slot) void slot.then(() => this.call(pending[i], messages[i], i, each));
      else this.call(pending[i], messages[i], i, each);
    }
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

/**
 * How an attempt ended for its lane: `delivered` when every target succeeded (it is acknowledged in a
 * batch); `failure` when the outbox itself failed on the way (not a handler: its failure is recorded).
 */
export type AttemptDone = (delivered: boolean, failure?: { error: unknown }) => void;

/** The targets' outcomes: `one`, that of an event's only target, or `all`, in the targets' order. */
type Ended = (one: HandlerOutcome | undefined, all: HandlerOutcome[] | undefined) => void;

/** An attempt every target of which succeeded: its span ends so. */
function succeeded(span: OutboxAttemptSpan | undefined): true {
  span?.end('success');
  return true;
}

/** The longest timeout of `targets`, 0 with none. */
function longestTimeoutMs(targets: readonly DeliveryTarget[]): number {
  let longest = 0;
  for (const target of targets) if (target.timeoutMs > longest) longest = target.timeoutMs;
  return longest;
}
