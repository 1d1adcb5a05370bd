import type { OutboxMeter } from '../events/outbox-events';
import type { OutboxLifecycleEventType } from '../events/lifecycle-event';
import type { OutboxStats } from '../interfaces/outbox-operations.interface';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { OutboxOperations } from '../operations/outbox-operations.service';

/**
 * The target of the deliveries counted for an attempt in which no target ran: its topic has none, its
 * last attempt outlived its lease (dead-lettered at claim), or its row cannot be read back. Targets are
 * named `Class.method` or `transport:<name>`, so no target can be called this.
 */
export const NO_TARGET = 'none';

/**
 * What the outbox measures, whatever the metric system: a sink of each ecosystem (Prometheus,
 * OpenTelemetry) implements it with its own names and units. Labels are the topic, the target (a
 * handler's or route's name, see `NO_TARGET`) and the outcome only.
 */
export interface MetricSink {
  published(topic: string): void;
  /**
   * One target's delivery in an attempt: `delivered` when its call returned; for one that failed, what
   * the attempt's recorded failure made of the event (`retried`, `dead`).
   */
  deliveryEnded(topic: string, target: string, outcome: 'delivered' | 'retried' | 'dead'): void;
  /** One handler or route call, from its start to its end or timeout. */
  handlerRan(topic: string, target: string, outcome: 'success' | 'failure', seconds: number): void;
  /** A claim's statements, for the claims that leased events. */
  claimed(seconds: number): void;
  leasesLost(count: number): void;
}

/** The lifecycle events `meterOf`'s meter reads: the others are not built for it. */
export const METERED_TYPES = [
  'published',
  'handler.succeeded',
  'handler.failed',
  'retry.scheduled',
  'dead-lettered',
  'claimed',
  'lease.lost',
] as const satisfies readonly OutboxLifecycleEventType[];

/** The meter (see `OutboxEvents.addMeter`) that turns lifecycle events into a sink's measures (of `METERED_TYPES`). */
export function meterOf(sink: MetricSink): OutboxMeter {
  const failed = (topic: string, targets: string[], outcome: 'retried' | 'dead') => {
    if (targets.length === 0) return sink.deliveryEnded(topic, NO_TARGET, outcome);
    for (const target of targets) sink.deliveryEnded(topic, target, outcome);
  };
  return (event) => {
    switch (event.type) {
      case 'published':
        for (const topic of event.topics) sink.published(topic);
        return;
      case 'handler.succeeded':
        sink.deliveryEnded(event.topic, event.handler, 'delivered');
        return sink.handlerRan(event.topic, event.handler, 'success', event.durationMs / 1000);
      case 'handler.failed':
        return sink.handlerRan(event.topic, event.handler, 'failure', event.durationMs / 1000);
      case 'retry.scheduled':
        return failed(event.topic, event.failedHandlers, 'retried');
      case 'dead-lettered':
        return failed(event.topic, event.failedHandlers, 'dead');
      case 'claimed':
        return sink.claimed(event.durationMs / 1000);
      case 'lease.lost':
        return sink.leasesLost(event.count);
    }
  };
}

/**
 * Topics seen are few in practice, and targets a fixed set; as in the other per-topic caches, a cap
 * keeps a flood of new topics from growing memory.
 */
const MAX_LABEL_SETS = 10_000;

/**
 * What `make` builds for a label set — a topic, and an outcome and a target when the metric has them —
 * each built once: a metric's child, its attributes. Both systems would otherwise do per call what a
 * label set needs done once (prom-client hashes the values). At `maxSize` label sets the memo starts
 * again, empty; what it held goes to `dropped` first.
 */
export function byLabels<T>(
  make: (topic: string, outcome?: string, target?: string) => T,
  dropped: (values: T[]) => void = () => undefined,
  maxSize = MAX_LABEL_SETS,
): (topic: string, outcome?: string, target?: string) => T {
  // Outcome, then target, then topic: no key string built per call.
  const made = new Map<string | undefined, Map<string | undefined, Map<string, T>>>();
  let size = 0;
  const byTopic = (outcome: string | undefined, target: string | undefined) => {
    let byTarget = made.get(outcome);
    if (!byTarget) made.set(outcome, (byTarget = new Map<string | undefined, Map<string, T>>()));
    let memo = byTarget.get(target);
    if (!memo) byTarget.set(target, (memo = new Map<string, T>()));
    return memo;
  };
  return (topic, outcome, target) => {
    let memo = byTopic(outcome, target);
    let value = memo.get(topic);
    if (value === undefined) {
      if (size >= maxSize) {
        const values = [...made.values()].flatMap((byTarget) => [...byTarget.values()].flatMap((m) => [...m.values()]));
        made.clear();
        memo = byTopic(outcome, target);
        size = 0;
        dropped(values);
      }
      memo.set(topic, (value = make(topic, outcome, target)));
      size++;
    }
    return value;
  };
}

/** Seconds: a delivery's handler (milliseconds to a minute) and a claim (a millisecond to a few seconds). */
export const DURATION_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** The gauges of the table's state, read from one `stats()`: what each is and reads. */
export const STATE_GAUGES = [
  {
    name: 'events_due',
    otel: 'events.due',
    help: 'Events due now, waiting for a worker',
    read: (s: OutboxStats) => s.due,
  },
  {
    name: 'events_scheduled',
    otel: 'events.scheduled',
    help: 'Events due later: delayed, backing off, or waiting behind their key',
    read: (s: OutboxStats) => s.scheduled,
  },
  {
    name: 'events_in_flight',
    otel: 'events.in_flight',
    help: 'Events leased to a worker now',
    read: (s: OutboxStats) => s.inFlight,
  },
  {
    name: 'events_dead',
    otel: 'events.dead',
    help: 'Dead-lettered events kept in the table',
    read: (s: OutboxStats) => s.dead,
  },
  {
    name: 'blocked_keys',
    otel: 'keys.blocked',
    help: 'Keys of ordered topics stopped behind a dead head',
    read: (s: OutboxStats) => s.blockedKeys,
  },
  {
    name: 'oldest_due_age',
    otel: 'events.oldest_due.age',
    help: 'How long the oldest due event has waited since it became due (0 when none is due)',
    read: (s: OutboxStats) => (s.oldestDueAgeMs ?? 0) / 1000,
    seconds: true,
  },
] as const;

/**
 * `stats()` for the gauges, shared by those of one collection and reused for `metrics.statsCacheMs`, so
 * that a scrape storm costs one query; undefined, with a warning, when it failed.
 */
export function cachedStats(
  operations: Pick<OutboxOperations, 'stats'>,
  options: Pick<ResolvedOutboxOptions, 'metrics' | 'errorText'>,
): () => Promise<OutboxStats | undefined> {
  const { errorText } = options;
  const logger = errorText.logger('OutboxMetrics');
  const cacheMs = Math.max(options.metrics?.statsCacheMs ?? 0, 1);
  let last: { at: number; value: Promise<OutboxStats | undefined> } | undefined;
  return () => {
    const now = performance.now();
    if (last && now - last.at < cacheMs) return last.value;
    const value = operations.stats().catch((error: unknown) => {
      last = undefined;
      logger.warn(`Outbox metrics: the table's state could not be read: ${errorText.describe(error)}`);
      return undefined;
    });
    last = { at: now, value };
    return value;
  };
}
