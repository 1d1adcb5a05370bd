import { performance } from 'node:perf_hooks';
import { type ClaimedEvent, previousAttemptExpired } from '../interfaces/claimed-event.interface';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { ClaimResult } from '../store/claim-result';
import type { OutboxStore } from '../store/outbox.store';
import { leaseMarginMs } from '../utils/lease-margin';
import { AckBuffer } from './ack-buffer';
import type { ClaimScope, DeliveryLedger } from './delivery-ledger';
import type { OutboxDrainResult } from './drain-result';
import type { HandlerInvoker, HandlerOutcome } from './handler-invoker';
import type { Lanes } from './lanes';
import { LazyAbort } from './lazy-abort';
import { DeliveredMessage } from './delivered-message';
import { LeaseRenewal } from './lease-renewal';
import type { OutcomeRecorder } from './outcome-recorder';
import type { DeliveryTarget, DeliveryTargets } from './delivery-targets';
import { takeSlots } from './target-slots';
import type { OutboxAttemptOutcome } from '../interfaces/outbox-tracing.interface';

/** What every claimed batch of one worker works with. */
export interface BatchContext {
  readonly options: ResolvedOutboxOptions;
  readonly store: OutboxStore;
  readonly targets: DeliveryTargets;
  readonly ledger: DeliveryLedger;
  readonly recorder: OutcomeRecorder;
  readonly invoker: HandlerInvoker;
  /** Shared by every claim of the worker running at once. */
  readonly lanes: Lanes;
}

/**
 * One claim, from the rows the store leased to the outcome of each one: crash suspects isolated,
 * deliveries started on the worker's lanes as they free up — beside those of its other claims — within
 * the lease (renewed while they run, with `worker.renewLease`), successes buffered for acknowledgement
 * in batches. Every outcome, fenced by the claim's token, is
 * recorded by the worker's `OutcomeRecorder`.
 */
export class ClaimedBatch {
  /** The lease's clock: every start is checked against what is left of it. */
  private readonly claimedAt = performance.now();
  /** The claim's token and the drain result it counts into; its waiting events are filed under it too. */
  private readonly scope: ClaimScope;
  /** With `worker.renewLease`, while the batch runs. */
  private renewal: LeaseRenewal | undefined;

  constructor(
    private readonly claim: ClaimResult,
    total: OutboxDrainResult,
    private readonly ctx: BatchContext,
  ) {
    this.scope = { token: claim.token, total };
  }

  /** The claim's token: until the batch ends, the worker's next claims leave the rows it holds alone. */
  get token(): string {
    return this.scope.token;
  }

  /** How long the lease is sure to last from now, in ms, by this process's clock. */
  private leaseLeftMs(): number {
    const { renewal } = this;
    return renewal ? renewal.leaseLeftMs() : this.ctx.options.worker.leaseMs - (performance.now() - this.claimedAt);
  }

  /** Runs the claim; returns how many events it gave back unstarted for a later claim. */
  async process(): Promise<number> {
    const { claim, scope, ctx } = this;
    ctx.recorder.claimed(claim, scope.total);
    // Counted as unstarted before anything is awaited: the claiming run claims again only once they start.
    const followers = [...claim.runs.values()].flat();
    ctx.ledger.claimed(scope, claim.events, followers);
    const { leaseMs, renewLease } = ctx.options.worker;
    if (renewLease && claim.events.length > 0) {
      this.renewal = new LeaseRenewal(scope, this.claimedAt, leaseMs, ctx);
    }
    try {
      await ctx.recorder.skipDeadFronts(claim);
      for (const row of claim.undecodable) await ctx.recorder.deadLetterUndecodable(row, scope);
      return await this.isolatingSuspects(claim.events);
    } finally {
      for (const event of [...claim.events, ...followers]) ctx.ledger.leaveWaiting(event.id, scope);
      await this.renewal?.stop();
    }
  }

  /**
   * An event whose previous attempt's lease expired may be the one that stopped that worker (a
   * handler that ends the process every time). Run among others, it would take their attempts down
   * with it, again and again, until they too were dead-lettered. So it runs alone — after the rest of
   * the batch is acknowledged, on every lane of the worker, so no other claim's event runs beside it,
   * once every success of the worker is written — and at most one per claim: the others like it go back at once, uncounted, to be claimed again.
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
      // With the events of their runs, which this claim leased behind them: nothing else would start or
      // release those, and they would wait out the lease with an attempt counted that never ran.
      const ids = later.flatMap((e) => [e.id, ...(this.claim.runs.get(e.id) ?? []).map((r) => r.id)]);
      for (const id of ids) this.ctx.ledger.leaveWaiting(id, this.scope);
      gaveBack = await this.ctx.recorder.releaseUnstarted(ids, this.scope, 'isolation');
    }
    await this.inLanes(events.filter((e) => !suspects.includes(e)));
    this.ctx.recorder.runsAlone(alone);
    await this.inLanes([alone], true);
    return gaveBack;
  }

  /**
   * Delivers `events` as the worker's lanes free up (with `alone`, each on all of them), acknowledging
   * successes as they come.
   */
  private async inLanes(events: ClaimedEvent[], alone = false): Promise<void> {
    if (events.length === 0) return;
    const { ledger, recorder, lanes } = this.ctx;
    const acks = new AckBuffer(recorder, this.scope);
    const untrack = ledger.trackAcks(acks);
    const deliveries: Array<Promise<{ error: unknown } | undefined>> = [];
    let outcomes: Array<{ error: unknown } | undefined> = [];
    try {
      for (const event of events) {
        const taking = lanes.take(alone);
        if (taking) await taking;
        // A suspect may end the process: every success of the instance is written before it starts.
        if (alone) await ledger.flushAcks();
        deliveries.push(this.onLane(event, acks, alone));
      }
      outcomes = await Promise.all(deliveries);
    } finally {
      untrack();
      await acks.close();
    }
    const failed = outcomes.find((outcome) => outcome !== undefined);
    if (failed) throw failed.error;
  }

  /**
   * Delivers `event` on the lane it took and gives the lane back. Never rejects: resolves with what it
   * threw, kept for after the others (an unhandled rejection would end the process).
   */
  private async onLane(event: ClaimedEvent, acks: AckBuffer, alone: boolean): Promise<{ error: unknown } | undefined> {
    try {
      let last = event;
      let delivered = await this.deliver(last);
      if (delivered) acks.add(last);
      // Its run (per-key order): the events of its key behind it, one after another. By default each
      // starts only once the one before it is acknowledged — were this process to die, a success not yet
      // written would run again after the next event had started — so the key's front has moved onto each
      // before it starts, or fails. Under `acknowledge: 'run'` the next starts at once: the run's
      // successes are written together, in order (a crash repeats them from the first unwritten), and
      // before anything else is recorded of the key. An acknowledgement refused (another claim took the
      // key) or failed ends the run as a failure does.
      const run = this.claim.runs.get(event.id) ?? [];
      const { ordering } = this.ctx.options;
      for (let i = 0; i < run.length; i++) {
        const byRun = delivered && ordering.acknowledgesByRun(last.topic);
        if (delivered && !byRun) delivered = await acks.written(last.id);
        if (!delivered || this.ctx.ledger.stopping) {
          await this.endRun(run.slice(i));
          break;
        }
        const ahead = last;
        last = run[i];
        delivered = await this.deliver(last, byRun ? () => acks.written(ahead.id) : undefined);
        if (delivered) acks.add(last);
      }
      return undefined;
    } catch (error) {
      return { error };
    } finally {
      this.ctx.lanes.give(alone);
    }
  }

  /** A run stopped before `rest` (an event ahead of them did not succeed): they go back unstarted, uncounted. */
  private async endRun(rest: ClaimedEvent[]): Promise<void> {
    const ids = rest.filter((e) => this.ctx.ledger.leaveWaiting(e.id, this.scope)).map((e) => e.id);
    if (ids.length > 0) await this.ctx.recorder.releaseUnstarted(ids, this.scope, 'order');
  }

  /**
   * Runs an event's pending targets; true when all succeeded (the lane acknowledges it in a batch).
   * `ahead`: in a run acknowledged together, writes the successes of its key before it and says whether
   * they were written — awaited before anything else is recorded of the event, which then is its key's
   * front (else nothing is recorded: the key's lease is lost, and its front will be claimed again).
   */
  private async deliver(event: ClaimedEvent, ahead?: () => Promise<boolean>): Promise<boolean> {
    const { ledger, options, recorder } = this.ctx;
    const settled = async () => ahead === undefined || (await ahead());
    // Given back by a shutdown that timed out while it waited for a lane.
    if (!ledger.leaveWaiting(event.id, this.scope)) return false;
    const handlers = this.ctx.targets.forTopic(event.topic);
    const done = event.completedHandlers;
    const pending = done.length === 0 ? handlers : handlers.filter((h) => !done.includes(h.name));
    const { renewal } = this;
    const margin = leaseMarginMs(options.worker.leaseMs);
    // Renewed, the lease need only last until the next renewal; else, until the longest timeout ends.
    const needed = renewal ? renewal.intervalMs + margin : Math.max(0, ...pending.map((h) => h.timeoutMs)) + margin;
    const leaseLeft = this.leaseLeftMs();
    if (ledger.stopping || needed > leaseLeft) {
      // Handed back with its attempt, rather than started where the lease cannot cover it.
      if (await settled()) await recorder.giveBackUnstarted(event.id, this.scope);
      return false;
    }

    const { now, slots, full } = takeSlots(pending);
    if (now.length === 0 && full.length > 0) {
      if (await settled()) await recorder.defer(event, this.scope, [], full);
      return false;
    }
    const aborts = now.map(() => new LazyAbort());
    ledger.started(event.id, this.scope.token, aborts);
    // Its span (with tracing): the handlers run in it; it ends with the attempt's outcome.
    const span = options.tracing?.startAttempt(event);
    let outcome: OutboxAttemptOutcome = 'not-recorded';
    try {
      let outcomes: HandlerOutcome[];
      try {
        outcomes = span
          ? await span.run(() => this.invoke(event, now, aborts, slots))
          : await this.invoke(event, now, aborts, slots);
      } finally {
        ledger.ended(event.id, this.scope.token);
      }
      // Lost while it ran (see LeaseRenewal): counted and reported there; another worker may hold it now.
      if (renewal?.isLost(event.id)) {
        outcome = 'lease-lost';
        return false;
      }
      if (handlers.length > 0 && outcomes.every((o) => !('error' in o))) {
        if (full.length === 0) {
          outcome = 'success';
          return true;
        }
        const succeeded = now.map((target) => target.name);
        if ((await settled()) && (await recorder.defer(event, this.scope, succeeded, full))) outcome = 'deferred';
        return false;
      }
      if (span) for (const o of outcomes) if ('error' in o) span.failed(o.handler.name, o.error);
      if (await settled()) outcome = await recorder.fail(event, this.scope, handlers.length, outcomes);
      return false;
    } finally {
      span?.end(outcome);
    }
  }

  /**
   * Calls each of `pending` with its message of `event`, once it has its slot (`slots[i]`, when it waits
   * for one); resolves with their outcomes. Each gives its slot back as its call settles (or times out).
   */
  private invoke(
    event: ClaimedEvent,
    pending: readonly DeliveryTarget[],
    aborts: LazyAbort[],
    slots: ReadonlyArray<Promise<void> | undefined> | undefined,
  ): Promise<HandlerOutcome[]> {
    const { invoker } = this.ctx;
    const call = (target: DeliveryTarget, message: DeliveredMessage): Promise<HandlerOutcome> => {
      const { bound } = target;
      // Aborted while it waited for its slot (shutdown, a lost lease): it never starts.
      const aborted = DeliveredMessage.abortOf(message).abortedWith;
      if (aborted) {
        bound.give();
        return Promise.resolve({ handler: target, error: aborted.reason });
      }
      const startedAt = bound.started();
      return invoker.invoke(target, message).then((outcome) => {
        bound.give(startedAt);
        return outcome;
      });
    };
    // One target, the common case, without the arrays of messages and promises.
    if (pending.length === 1) {
      const message = new DeliveredMessage(event, aborts[0], false, this.scope.token);
      const slot = slots?.[0];
      return (slot ? slot.then(() => call(pending[0], message)) : call(pending[0], message)).then((o) => [o]);
    }
    // Every copy is made before any handler runs (and may change what it was given).
    const messages = pending.map((_, i) => new DeliveredMessage(event, aborts[i], i > 0, this.scope.token));
    return Promise.all(
      pending.map((target, i) => {
        const slot = slots?.[i];
        return slot ? slot.then(() => call(target, messages[i])) : call(target, messages[i]);
      }),
    );
  }
}
