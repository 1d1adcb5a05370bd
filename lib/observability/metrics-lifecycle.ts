import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { OUTBOX_OPTIONS } from '../outbox.constants';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { OutboxStats } from '../interfaces/outbox-operations.interface';
import { OutboxEvents } from '../events/outbox-events';
import { OutboxOperations } from '../operations/outbox-operations.service';
import { StartRefusal } from '../store/start-refusal';
import { cachedStats, meterOf, METERED_TYPES, type MetricSink } from './metric-feed';

/**
 * What the outbox's metric providers (Prometheus, OpenTelemetry) share: each registers its metrics at
 * module init, where a refusal closes every outbox (`StartRefusal`); feeds its sink from the lifecycle
 * events; reads the table's state for its gauges through one cached `stats()`; and, when the module
 * closes, undoes what it did, in order.
 */
@Injectable()
export abstract class MetricsLifecycle implements OnModuleInit, OnModuleDestroy {
  private readonly undo: Array<() => void> = [];

  constructor(
    @Inject(OUTBOX_OPTIONS) protected readonly options: ResolvedOutboxOptions,
    private readonly events: OutboxEvents,
    private readonly operations: OutboxOperations,
    private readonly refusal: StartRefusal,
  ) {}

  onModuleInit(): Promise<void> {
    return this.refusal.guard(() => this.register());
  }

  onModuleDestroy(): void {
    for (const undo of this.undo.splice(0)) undo();
  }

  /** Registers the metrics the options ask for, if any; what it throws refuses the start-up. */
  protected abstract register(): void;

  /** Feeds `sink` from the lifecycle events until the module closes; returns the gauges' read of the table's state. */
  protected feed(sink: MetricSink): () => Promise<OutboxStats | undefined> {
    this.atClose(this.events.addMeter(meterOf(sink), METERED_TYPES));
    return cachedStats(this.operations, this.options);
  }

  /** What to undo when the module closes, after what was registered before it. */
  protected atClose(undo: () => void): void {
    this.undo.push(undo);
  }
}
