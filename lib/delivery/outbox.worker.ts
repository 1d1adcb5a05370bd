import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  type Logger,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import type { SchedulerRegistry } from '@nestjs/schedule';
import { AsyncResource } from 'node:async_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { OUTBOX_OPTIONS, OUTBOX_STORE } from '../outbox.constants';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import type { ClaimResult } from '../store/claim-result';
import type { OutboxStore } from '../store/outbox.store';
import type { BatchContext } from './batch-context';
import { ClaimedBatch } from './claimed-batch';
import { DeliveryLedger } from './delivery-ledger';
import { emptyResult, type OutboxDrainResult } from './drain-result';
import { HandlerInvoker } from './handler-invoker';
import { Lanes } from './lanes';
import { RetryAlarm } from './retry-alarm';
import { schedulerRegistryOf, sweepKeyFronts } from './worker-startup';
import { OutcomeRecorder } from './outcome-recorder';
import { OutboxEvents } from '../events/outbox-events';
import { DeliveryTargets } from './delivery-targets';
import { TransportRegistry } from '../transports/transport-registry';
import { OutboxConfigurationError, OutboxShutdownError } from '../errors/outbox.errors';
import { type OutboxPurgeResult, Retention } from './retention';
export type { OutboxDrainResult } from './drain-result';

/** What `drain()` adds to the wait for a deferred share, beyond the time it is due by this process's clock. */
const CLOCK_MARGIN_MS = 5;
export type { OutboxPurgeResult } from './retention';

/**
 * Claims due events, runs their handlers outside any transaction, and records the outcome fenced by
 * the claim token. Scheduled through `SchedulerRegistry` at bootstrap; stopped and drained in
 * `beforeApplicationShutdown`, before TypeORM destroys the DataSource. One claim: `ClaimedBatch`.
 * Delivery is continuous: claims run side by side on the `concurrency` lanes, and the worker claims
 * again once every event it claimed has started and a lane is free (a slow handler holds its lane).
 */
@Injectable()
export class OutboxWorker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger: Logger;
  private readonly errorText: OutboxErrorText;
  private readonly intervalName: string;
  private readonly retentionIntervalName: string;
  private readonly retention: Retention | undefined; // absent with `retention: false`
  private registry: SchedulerRegistry | undefined;
  /** The claiming run in progress, if any; runs never overlap (their claims' deliveries may). */
  private current: Promise<unknown> = Promise.resolve();
  private busy = false;
  /** The claims whose events are delivered now, each until its last outcome is written. */
  private readonly batches = new Map<ClaimedBatch, Promise<void>>();
  /** Wakes the scheduled worker for a retry due before its next poll. */
  private alarm: RetryAlarm | undefined;
  /** What the scheduled runs did, all of them. */
  private readonly scheduled = emptyResult();
  /** A wake-up asked for while a run was busy: run again right after it. */
  private kicked = false;
  /** The worker's own async context, so a wake-up from a request never runs in that request's. */
  private scope: AsyncResource | undefined;
  private readonly ledger = new DeliveryLedger();
  private readonly recorder: OutcomeRecorder;
  private readonly batch: BatchContext;

  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
    targets: DeliveryTargets,
    private readonly transports: TransportRegistry,
    private readonly moduleRef: ModuleRef,
    private readonly events: OutboxEvents,
  ) {
    this.intervalName = `outbox-worker:${store.table.path}`;
    this.retentionIntervalName = `outbox-retention:${store.table.path}`;
    this.errorText = options.errorText;
    this.logger = options.errorText.logger('OutboxWorker');
    this.retention = options.retention ? new Retention(options.retention, store, options.errorText) : undefined;
    // The worker's lifecycle and every outcome of its deliveries are logged under one context.
    this.recorder = new OutcomeRecorder(options, store, events, this.ledger, this.logger);
    const invoker = new HandlerInvoker(events, options.errorText, options.testing);
    const lanes = new Lanes(options.worker.concurrency, () => this.ledger.changed());
    this.batch = { options, store, targets, ledger: this.ledger, recorder: this.recorder, invoker, lanes };
    this.ledger.countInto(this.scheduled);
  }

  async onApplicationBootstrap(): Promise<void> {
    await this.transports.start();
    if (!this.options.worker.enabled) return;
    this.registry = schedulerRegistryOf(this.moduleRef);
    const handle = setInterval(() => this.poll(), this.options.worker.pollIntervalMs);
    this.registry.addInterval(this.intervalName, handle);
    const { retention } = this;
    if (retention)
      this.registry.addInterval(
        this.retentionIntervalName,
        setInterval(() => retention.tick(), retention.intervalMs),
      );
    this.scope = new AsyncResource('OutboxWorker');
    this.alarm = new RetryAlarm(this.options.worker.pollIntervalMs, () => this.kick());
    this.ledger.retryScheduled = (delayMs) => this.alarm?.retryIn(delayMs);
    await this.store.listenForWakeUps(
      () => this.kick(),
      (error) => this.logger.warn(`Outbox wake-up channel: ${this.errorText.describe(error)}`),
    );
    if (this.events.observed) this.events.emit({ type: 'worker.started' });
    sweepKeyFronts(this.store, this.logger, this.errorText);
    this.poll();
  }

  /** Whether this instance's scheduled worker runs: started at bootstrap (`worker.enabled`), not stopping. */
  get running(): boolean {
    return this.scope !== undefined && !this.ledger.stopping;
  }
  /** Looks for work now: events were just committed here or, by notification, elsewhere. */
  private kick(): void {
    if (this.ledger.stopping || !this.scope) return;
    this.scope.runInAsyncScope(() => setImmediate(() => this.poll()));
  }

  /**
   * Delivers every event that is due now, claim after claim, and resolves once a claim made with
   * nothing left running comes back empty. Waits first for the run and the deliveries already in
   * progress, and for the shares of events a full target put off (its `concurrency`) until they are
   * delivered too. Handy in tests: no timers involved unless a target is full.
   */
  drain(): Promise<OutboxDrainResult> {
    return this.exclusive(async () => {
      const total = emptyResult();
      const uncount = this.ledger.countInto(total);
      try {
        await this.idle();
        for (;;) {
          // Claims made while others still ran miss what those give back or fail for a retry due at once.
          while ((await this.claimUntil(total, (claimed) => claimed === 0)) > 0) await this.idle();
          // Shares a full target could not take were due when the drain began: they are waited for.
          const deferredDue = this.ledger.takeDeferredDue(total);
          if (deferredDue === undefined || this.ledger.stopping) break;
          // A few ms more: the database's clock decided when they are due.
          await sleep(Math.max(deferredDue - Date.now(), 0) + CLOCK_MARGIN_MS);
        }
      } finally {
        uncount();
      }
      return total;
    });
  }

  /**
   * Runs one retention pass now, after any in progress: deletes delivered rows older than `deliveredMs`
   * and, with `deadMs`, dead ones, in batches; resolves with how many of each. Works whether or not the
   * worker is scheduled here; rejects when `retention` is `false`.
   */
  purge(): Promise<OutboxPurgeResult> {
    if (!this.retention) {
      return Promise.reject(
        new OutboxConfigurationError(
          'retention',
          'retention is off (retention: false), so purge() has nothing to delete',
        ),
      );
    }
    return this.retention.pass();
  }

  private poll(): void {
    if (this.ledger.stopping) return;
    if (this.busy) {
      this.kicked = true;
      return;
    }
    // Back to back while batches come back full, and once more if woken meanwhile; the interval
    // picks up the rest.
    void this.exclusive(async () => {
      do {
        this.kicked = false;
        await this.claimUntil(this.scheduled, (claimed) => claimed < this.options.worker.batchSize);
      } while (this.kicked && !this.ledger.stopping);
    }).catch((error) => this.logger.error(`Outbox worker run failed: ${this.errorText.describe(error)}`));
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

  /**
   * Claims, each time every claimed event has started and a lane is free, until `done` says a claim
   * took enough; the deliveries go on after it returns. Returns how many rows its claims took.
   */
  private async claimUntil(total: OutboxDrainResult, done: (claimed: number) => boolean): Promise<number> {
    const { batchSize, leaseMs, concurrency: lanes } = this.options.worker;
    const { maxAttempts } = this.options.retry;
    let taken = 0;
    while (await this.roomToClaim()) {
      let claim;
      try {
        // What this worker runs is never taken back by it, even after a stall outlived its lease.
        const heldTokens = [...this.batches.keys()].map((batch) => batch.token);
        claim = await this.store.claim({ batchSize, leaseMs, maxAttempts, heldTokens, lanes });
      } catch (error) {
        this.logger.error(`Outbox claim failed; will retry at the next poll: ${this.errorText.describe(error)}`);
        break;
      }
      const claimed = claim.events.length + claim.deadLettered.length + claim.undecodable.length;
      taken += claimed;
      if (claimed > 0) this.deliver(claim, total);
      if (done(claimed)) break;
    }
    return taken;
  }

  /** Waits until every claimed event has started and a lane is free; false once shutdown has begun. */
  private async roomToClaim(): Promise<boolean> {
    const { ledger, batch } = this;
    await ledger.until(() => ledger.stopping || (ledger.unstarted === 0 && batch.lanes.free > 0));
    return !ledger.stopping;
  }

  /** Delivers a claim beside the others running. */
  private deliver(claim: ClaimResult, total: OutboxDrainResult): void {
    const batch = new ClaimedBatch(claim, total, this.batch);
    const delivering = batch
      .process()
      .then((gaveBack) => {
        // Events given back for isolation are due at once: claim again rather than wait for a poll.
        if (gaveBack > 0) this.kick();
      })
      .catch((error) => this.logger.error(`Outbox delivery of a claim failed: ${this.errorText.describe(error)}`))
      .finally(() => {
        this.batches.delete(batch);
        this.ledger.changed();
      });
    this.batches.set(batch, delivering);
  }

  /** Resolves once no claim is being delivered. */
  private async idle(): Promise<void> {
    while (this.batches.size > 0) await Promise.all(this.batches.values());
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.ledger.stop();
    this.alarm?.stop();
    // What runs as shutdown begins, before anything is awaited.
    const report = this.ledger.shutdownReport(this.logger, this.options.worker.shutdownTimeoutMs);
    await this.store.closeWakeUp();
    for (const name of [this.intervalName, this.retentionIntervalName]) {
      if (this.registry?.doesExist('interval', name)) this.registry.deleteInterval(name);
    }
    const timeoutMs = this.options.worker.shutdownTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    // A retention pass stops after its current batch; the DataSource must outlive that batch too.
    const [finished] = await Promise.all([
      Promise.race([this.current.then(() => this.idle()).then(() => true), deadline]),
      Promise.race([this.retention?.stop(), deadline]),
    ]);
    clearTimeout(timer);
    // From here on the worker writes nothing but what shutdown writes below: a handler that ends late
    // is not recorded, and nothing runs after TypeORM destroys the DataSource.
    this.ledger.close();
    // A renewal on its way ends before the DataSource does; none starts from here on.
    await this.ledger.stopRenewals();
    if (finished) await this.transports.stop();
    else await this.abandonRun(timeoutMs);
    report(finished);
    if (this.scope && this.events.observed) this.events.emit({ type: 'worker.stopped', timedOut: !finished });
  }

  /**
   * Gives up the run that outlived the shutdown timeout, keeping all that already happened: the
   * successes that finished are acknowledged first, the claimed events no handler started go back
   * with their attempt uncounted, and those still running go back with theirs counted.
   */
  private async abandonRun(timeoutMs: number): Promise<void> {
    // Taken at once: an event whose handler ends from now on goes back with the running ones.
    const { running, unstarted } = this.ledger.abandon();
    const unstartedCount = unstarted.reduce((n, claim) => n + claim.ids.length, 0);
    await this.ledger.flushAcks();
    await this.transports.stop();
    this.logger.warn(
      `Shutdown: ${running.length} handler(s) still running after ${timeoutMs} ms; releasing their events` +
        ` and the ${unstartedCount} claimed event(s) not started`,
    );
    await Promise.all([
      ...unstarted.map(({ ids, scope }) => this.recorder.releaseUnstarted(ids, scope, 'shutdown')),
      ...running.map(async ([id, { token, abort }]) => {
        for (const signal of abort) signal.abort(new OutboxShutdownError());
        await this.recorder.releaseRunning(id, token);
      }),
    ]);
  }
}
