import { performance } from 'node:perf_hooks';
import { type ClaimedEvent, previousAttemptExpired } from '../interfaces/claimed-event.interface';
import type { ClaimResult } from '../store/claim-result';
import { AckBuffer } from './ack-buffer';
import type { ClaimScope } from './delivery-ledger';
import type { OutboxDrainResult } from './drain-result';
import { LeaseRenewal } from './lease-renewal';
import { AttemptRunner } from './attempt-runner';
import type { BatchContext } from './batch-context';

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
  /** Each event's attempt. */
  private readonly attempts: AttemptRunner;
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
    this.attempts = new AttemptRunner(ctx, this.scope, this.claimedAt, () => this.renewal);
  }

  /** The claim's token: until the batch ends, the worker's next claims leave the rows it holds alone. */
  get token(): string {
    return this.scope.token;
  }

  /** Runs the claim; returns how many events it gave back unstarted for a later claim. */
  async process(): Promise<number> {
    const { claim, scope, ctx } = this;
    ctx.recorder.reports.claimed(claim, scope.total);
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
    this.ctx.recorder.reports.runsAlone(alone);
    await this.inLanes([alone], true);
    return gaveBack;
  }

  /**
   * Delivers `events` as the worker's lanes free up (with `alone`, each on all of them), acknowledging
   * successes as they come.
   */
  private async inLanes(events: ClaimedEvent[], alone = false): Promise<void> {
    if (events.length === 0) return;
    const { ledger, recorder } = this.ctx;
    const acks = new AckBuffer(recorder, this.scope);
    const untrack = ledger.trackAcks(acks);
    let failures: Failure[] = [];
    try {
      failures = await (alone ? this.alone(events[0], acks) : this.asLanesFree(events, acks));
    } finally {
      untrack();
      await acks.close();
    }
    if (failures.length > 0) throw failures[0].error;
  }

  /**
   * Starts `events` in order, each on a lane of its own as one is free; resolves with what failed once
   * all have ended. Lanes call back, and so do the events: every event passes here. An event that ends
   * at once gives its lane to the next here, in this loop, not in a call deeper for each.
   */
  private asLanesFree(events: ClaimedEvent[], acks: AckBuffer): Promise<Failure[]> {
    const { lanes } = this.ctx;
    return new Promise((resolve) => {
      const failures: Failure[] = [];
      let next = 0;
      let ended = 0;
      let owed = 0;
      let starting = false;
      const onEnded = (failure: Failure | undefined) => {
        if (failure) failures.push(failure);
        if (++ended === events.length) resolve(failures);
      };
      const start = () => {
        owed++;
        if (starting) return;
        starting = true;
        while (owed > 0) {
          owed--;
          this.onLane(events[next++], acks, false, onEnded);
          if (next < events.length) lanes.whenFree(start);
        }
        starting = false;
      };
      lanes.whenFree(start);
    });
  }

  /** A crash suspect, on every lane, once every success of the instance is written (it may end the process). */
  private async alone(event: ClaimedEvent, acks: AckBuffer): Promise<Failure[]> {
    await this.ctx.lanes.take(true);
    await this.ctx.ledger.flushAcks();
    return new Promise((resolve) => this.onLane(event, acks, true, (failure) => resolve(failure ? [failure] : [])));
  }

  /**
   * Delivers `event` (and its run) on the lane it took, gives the lane back and tells `ended` what failed,
   * if anything: kept for after the others (an unhandled rejection would end the process). Never throws.
   */
  private onLane(event: ClaimedEvent, acks: AckBuffer, alone: boolean, ended: (failure?: Failure) => void): void {
    const { lanes } = this.ctx;
    const run = this.claim.runs.get(event.id);
    if (run) {
      // An async function: what it throws, it rejects with.
      void this.inOrder(event, run, acks).then(
        () => {
          lanes.give(alone);
          ended();
        },
        (error: unknown) => {
          lanes.give(alone);
          ended({ error });
        },
      );
      return;
    }
    this.attempts.attempt(event, (delivered, failure) => {
      if (delivered) acks.add(event);
      lanes.give(alone);
      ended(failure);
    });
  }

  /**
   * Delivers `event`, then its run (per-key order): the events of its key behind it, one after another,
   * each success added to `acks`. By default each starts only once the one before it is acknowledged —
   * were this process to die, a success not yet written would run again after the next event had
   * started — so the key's front has moved onto each before it starts, or fails. Under `acknowledge:
   * 'run'` the next starts at once: the run's successes are written together, in order (a crash repeats
   * them from the first unwritten), and before anything else is recorded of the key. An acknowledgement
   * refused (another claim took the key) or failed ends the run as a failure does.
   */
  private async inOrder(event: ClaimedEvent, run: ClaimedEvent[], acks: AckBuffer): Promise<void> {
    let last = event;
    let delivered = await this.attempts.deliver(last);
    if (delivered) acks.add(last);
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
      delivered = await this.attempts.deliver(last, byRun ? () => acks.written(ahead.id) : undefined);
      if (delivered) acks.add(last);
    }
  }

  /** A run stopped before `rest` (an event ahead of them did not succeed): they go back unstarted, uncounted. */
  private async endRun(rest: ClaimedEvent[]): Promise<void> {
    const ids = rest.filter((e) => this.ctx.ledger.leaveWaiting(e.id, this.scope)).map((e) => e.id);
    if (ids.length > 0) await this.ctx.recorder.releaseUnstarted(ids, this.scope, 'order');
  }
}

/** What the outbox itself threw while it delivered an event (a handler's failure is recorded, not thrown). */
interface Failure {
  error: unknown;
}
