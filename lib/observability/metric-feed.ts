import type { OutboxMeter } from '../events/outbox-events';
import type { OutboxStats } from '../interfaces/outbox-operations.interface';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { OutboxOperations } from '../operations/outbox-operations.service';

/**
 * What the outbox measures, whatever the metric system: a sink of each ecosystem (Prometheus,
 * OpenTelemetry) implements it with its own names and units. Labels are the topic and the outcome only.
 */
export interface MetricSink {
  published(topic: string): void;
  /** An attempt ended: delivered, a retry scheduled, or dead-lettered. */
  attemptEnded(topic: string, outcome: 'delivered' | 'retried' | 'dead'): void;
  /** One handler or route call, from its start to its end or timeout. */
  handlerRan(topic: string, outcome: 'success' | 'failure', seconds: number): void;
  /** A claim's statements, for the claims that leased events. */
  claimed(seconds: number): void;
  leasesLost(count: number): void;
}

/** The meter (see `OutboxEvents.addMeter`) that turns lifecycle events into a sink's measures. */
export function meterOf(sink: MetricSink): OutboxMeter {
  return (event) => {
    switch (event.type) {
      case 'published':
        for (const topic of event.topics) sink.published(topic);
        return;
      case 'delivered':
        return sink.attemptEnded(event.topic, 'delivered');
      case 'retry.scheduled':
        return sink.attemptEnded(event.topic, 'retried');
      case 'dead-lettered':
        return sink.attemptEnded(event.topic, 'dead');
      case 'handler.succeeded':
        return sink.handlerRan(event.topic, 'success', event.durationMs / 1000);
      case 'handler.failed':
        return sink.handlerRan(event.topic, 'failure', event.durationMs / 1000);
      case 'claimed':
        return sink.claimed(event.durationMs / 1000);
      case 'lease.lost':
        return sink.leasesLost(event.count);
    }
  };
}

/**
 * Topics seen are few in practice; as in the other per-topic caches, a cap keeps a flood of new ones
 * from growing memory.
 */
const MAX_LABEL_SETS = 10_000;

/**
 * What `make` builds for a topic (and outcome), each built once: a metric's child, its attributes. Both
 * systems would otherwise do per call what a label set needs done once (prom-client hashes the values).
 * At `maxSize` label sets the memo starts again, empty; what it held goes to `dropped` first.
 */
export function byTopicAndOutcome<T>(
  make: (topic: string, outcome?: string) => T,
  dropped: (values: T[]) => void = () => undefined,
  maxSize = MAX_LABEL_SETS,
): (topic: string, outcome?: string) => T {
  // Outcome, then topic: no key string built per call.
  const made = new Map<string | undefined, Map<string, T>>();
  let size = 0;
  return (topic, outcome) => {
    let byTopic = made.get(outcome);
    if (!byTopic) made.set(outcome, (byTopic = new Map<string, T>()));
    let value = byTopic.get(topic);
    if (value === undefined) {
      if (size >= maxSize) {
        const values = [...made.values()].flatMap((memo) => [...memo.values()]);
        made.clear();
        made.set(outcome, (byTopic = new Map<string, T>()));
        size = 0;
        dropped(values);
      }
      byTopic.set(topic, (value = make(topic, outcome)));
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
