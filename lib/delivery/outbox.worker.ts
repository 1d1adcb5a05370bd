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
import { OUTBOX_OPTIONS, OUTBOX_STORE } from '../outbox.constants';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { OutboxStore } from '../store/outbox.store';
import { describeError } from '../utils/describe-error';
import { type BatchContext, ClaimedBatch } from './claimed-batch';
import { type ClaimScope, DeliveryState } from './delivery-state';
import { emptyResult, type OutboxDrainResult } from './drain-result';
import { HandlerInvoker } from './handler-invoker';
import { OutcomeRecorder } from './outcome-recorder';
import { OutboxEvents } from '../events/outbox-events';
import { DeliveryTargets } from './delivery-targets';
import { TransportRegistry } from '../transports/transport-registry';
import { OutboxConfigurationError, OutboxShutdownError } from '../errors/outbox.errors';
import { type OutboxPurgeResult, Retention } from './retention';

export type { OutboxDrainResult } from './drain-result';
export type { OutboxPurgeResult } from './retention';

/**
 * Claims due events, runs their handlers outside any transaction, and records the outcome fenced by
 * the claim token. Scheduled through `SchedulerRegistry` at bootstrap; stopped and drained in
 * `beforeApplicationShutdown`, before TypeORM destroys the DataSource. What happens to one claim is
 * `ClaimedBatch`'s.
 */
@Injectable()
export class OutboxWorker implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('OutboxWorker');
  private readonly intervalName: string;
  private readonly retentionIntervalName: string;
  /** Absent with `retention: false`. */
  private readonly retention: Retention | undefined;
  private registry: SchedulerRegistry | undefined;
  /** The run in progress, if any; runs never overlap. */
  private current: Promise<unknown> = Promise.resolve();
  private busy = false;
  /** A wake-up asked for while a run was busy: run again right after it. */
  private kicked = false;
  /** The worker's own async context, so a wake-up from a request never runs in that request's. */
  private scope: AsyncResource | undefined;
  private readonly state = new DeliveryState();
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
    this.retention = options.retention
      ? new Retention(options.retention, store, new Logger('OutboxRetention'))
      : undefined;
    // The worker's lifecycle and every outcome of its deliveries are logged under one context.
    this.recorder = new OutcomeRecorder(options, store, events, this.state, this.logger);
    const invoker = new HandlerInvoker(events, options.testing);
    this.batch = { options, store, targets, state: this.state, recorder: this.recorder, invoker };
  }

  async onApplicationBootstrap(): Promise<void> {
    await this.transports.start();
    if (!this.options.worker.enabled) return;
    this.registry = this.schedulerRegistry();
    const handle = setInterval(() => this.poll(), this.options.worker.pollIntervalMs);
    this.registry.addInterval(this.intervalName, handle);
    const { retention } = this;
    if (retention)
      this.registry.addInterval(
        this.retentionIntervalName,
        setInterval(() => retention.tick(), retention.intervalMs),
      );
    this.scope = new AsyncResource('OutboxWorker');
    await this.store.listenForWakeUps(
      () => this.kick(),
      (error) => this.logger.warn(`Outbox wake-up channel: ${describeError(error)}`),
    );
    if (this.events.observed) this.events.emit({ type: 'worker.started' });
    this.poll();
  }

  /** Looks for work now: events were just committed here or, by notification, elsewhere. */
  private kick(): void {
    if (this.state.stopping || !this.scope) return;
    this.scope.runInAsyncScope(() => setImmediate(() => this.poll()));
  }

  /**
   * Delivers every event that is due now, claim after claim, and resolves when a claim comes back
   * empty. Waits for a run already in progress first. Handy in tests: no timers involved.
   */
  drain(): Promise<OutboxDrainResult> {
    return this.exclusive(() => this.runUntil((claimed) => claimed === 0));
  }

  /**
   * Runs one retention pass now, after any pass in progress (scheduled or not): deletes delivered
   * rows older than `retention.deliveredMs` and, with `retention.deadMs`, dead ones older than that,
   * in batches of `retention.batchSize`. Resolves with how many of each it deleted. Works whether or
   * not the worker is scheduled in this process; rejects when `retention` is `false`.
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
    if (this.state.stopping) return;
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
      } while (this.kicked && !this.state.stopping);
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
    this.state.run = total;
    const { batchSize, leaseMs } = this.options.worker;
    while (!this.state.stopping) {
      let claim;
      try {
        claim = await this.store.claim({ batchSize, leaseMs, maxAttempts: this.options.retry.maxAttempts });
      } catch (error) {
        this.logger.error(`Outbox claim failed; will retry at the next poll: ${describeError(error)}`);
        break;
      }
      const gaveBack = await new ClaimedBatch(claim, total, this.batch).process();
      // Events given back for isolation are due at once: claim again rather than wait for a poll.
      const claimed = claim.events.length + claim.deadLettered.length + claim.undecodable.length;
      if (gaveBack === 0 && done(claimed)) break;
    }
    return total;
  }

  async beforeApplicationShutdown(): Promise<void> {
    this.state.stopping = true;
    // What runs as shutdown begins, before anything is awaited.
    const report = this.shutdownReport(this.options.worker.shutdownTimeoutMs);
    await this.store.closeWakeUp();
    for (const name of [this.intervalName, this.retentionIntervalName]) {
      if (this.registry?.doesExist('interval', name)) this.registry.deleteInterval(name);
    }
    const timeoutMs = this.options.worker.shutdownTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    // A retention pass stops after its current batch; the DataSource must outlive that batch too.
    const [finished] = await Promise.all([
      Promise.race([this.current.then(() => true), deadline]),
      Promise.race([this.retention?.stop(), deadline]),
    ]);
    clearTimeout(timer);
    // From here on the worker writes nothing but what shutdown writes below: a handler that ends late
    // is not recorded, and nothing runs after TypeORM destroys the DataSource.
    this.state.closed = true;
    // A renewal on its way ends before the DataSource does; none starts from here on.
    await Promise.all([...this.state.renewals].map((renewal) => renewal.stop()));
    if (finished) await this.transports.stop();
    else await this.abandonRun(timeoutMs);
    report(finished);
    if (this.scope && this.events.observed) this.events.emit({ type: 'worker.stopped', timedOut: !finished });
  }

  /**
   * Says what shutdown waits for, when anything runs (the handlers running, the claimed events not
   * started, which go back); returns what says, at the end, what became of them.
   */
  private shutdownReport(timeoutMs: number): (finished: boolean) => void {
    const { inFlight, waiting, run } = this.state;
    if (inFlight.size + waiting.size === 0 || !run) return () => undefined;
    const started = Date.now();
    const before = { delivered: run.delivered, released: run.released };
    this.logger.log(
      `Shutdown: waiting up to ${timeoutMs} ms for ${inFlight.size} running handler(s); ` +
        `${waiting.size} claimed event(s) not started go back to the outbox`,
    );
    return (finished) =>
      this.logger.log(
        `Shutdown ${finished ? 'finished' : 'stopped waiting'} after ${Date.now() - started} ms: ` +
          `${run.delivered - before.delivered} event(s) delivered, ${run.released - before.released} released`,
      );
  }

  /**
   * Gives up the run that outlived the shutdown timeout, keeping all that already happened: the
   * successes that finished are acknowledged first, the claimed events no handler started go back
   * with their attempt uncounted, and those still running go back with theirs counted.
   */
  private async abandonRun(timeoutMs: number): Promise<void> {
    const { state } = this;
    // Taken at once: an event whose handler ends from now on goes back with the running ones.
    const running = [...state.inFlight.entries()];
    const unstarted = new Map<string, { ids: string[]; scope: ClaimScope }>();
    for (const [id, scope] of state.waiting) {
      const claim = unstarted.get(scope.token) ?? { ids: [], scope };
      claim.ids.push(id);
      unstarted.set(scope.token, claim);
    }
    const unstartedCount = state.waiting.size;
    state.waiting.clear();
    await Promise.all([...state.ackBuffers].map((acks) => acks.flush()));
    await this.transports.stop();
    this.logger.warn(
      `Shutdown: ${running.length} handler(s) still running after ${timeoutMs} ms; releasing their events` +
        ` and the ${unstartedCount} claimed event(s) not started`,
    );
    await Promise.all([
      ...[...unstarted.values()].map(({ ids, scope }) => this.recorder.releaseUnstarted(ids, scope, 'shutdown')),
      ...running.map(async ([id, { token, abort }]) => {
        for (const signal of abort) signal.abort(new OutboxShutdownError());
        await this.recorder.releaseRunning(id, token);
      }),
    ]);
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
