import { Inject, Injectable, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { OUTBOX_OPTIONS } from '../outbox.constants';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { OutboxPrometheusRegistry } from '../interfaces/outbox-metrics.interface';
import type { OutboxStats } from '../interfaces/outbox-operations.interface';
import { OutboxEvents } from '../events/outbox-events';
import type { OutboxLifecycleEventInput } from '../events/outbox-events';
import { OutboxOperations } from '../operations/outbox-operations.service';
import { describeError } from '../utils/describe-error';
import { RedactingLogger } from '../utils/redacting-logger';
import { loadPromClient, type PromClient, type PromMetric } from './metrics-options';

/** Seconds: a delivery's handler (milliseconds to a minute) and a claim (a millisecond to a few seconds). */
const DURATION_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** The counters and histograms fed by the lifecycle stream, in the order `recorder` takes them. */
const COUNTERS = [
  { name: 'outbox_events_published_total', help: 'Events committed by publish()', labelNames: ['topic'] },
  {
    name: 'outbox_deliveries_total',
    help: 'Delivery attempts by outcome: delivered, retried (a retry was scheduled), dead (dead-lettered)',
    labelNames: ['topic', 'outcome'],
  },
  { name: 'outbox_leases_lost_total', help: 'Events whose outcome was refused because their lease had expired' },
] as const;
const HISTOGRAMS = [
  {
    name: 'outbox_delivery_duration_seconds',
    help: 'One handler or route call, from its start to its end or timeout',
    labelNames: ['topic', 'outcome'],
  },
  { name: 'outbox_claim_duration_seconds', help: "A claim's statements, for the claims that leased events" },
] as const;

/** The gauges read from `stats()`, by name: what each reads. */
const STATE_GAUGES: Record<string, [help: string, read: (s: OutboxStats) => number]> = {
  outbox_events_due: ['Events due now, waiting for a worker', (s) => s.due],
  outbox_events_scheduled: ['Events due later: delayed, backing off, or waiting behind their key', (s) => s.scheduled],
  outbox_events_in_flight: ['Events leased to a worker now', (s) => s.inFlight],
  outbox_events_dead: ['Dead-lettered events kept in the table', (s) => s.dead],
  outbox_blocked_keys: ['Keys of ordered topics stopped behind a dead head', (s) => s.blockedKeys],
  outbox_oldest_due_age_seconds: [
    'How long the oldest due event has waited since it became due (0 when none is due)',
    (s) => (s.oldestDueAgeMs ?? 0) / 1000,
  ],
};

/**
 * The outbox's metrics on a `prom-client` registry (the `metrics.prometheus` option): counters and
 * histograms from the lifecycle stream, gauges read from the database when the registry is collected
 * (one `stats()` per `metrics.statsCacheMs` however many scrapes). Labels are the topic and the
 * outcome only. Taken off the registry when the module closes.
 */
@Injectable()
export class OutboxPrometheusMetrics implements OnModuleInit, OnModuleDestroy {
  private removeMeter: (() => void) | undefined;
  private registry: OutboxPrometheusRegistry | undefined;
  private readonly names: string[] = [];
  private stats: { at: number; value: Promise<OutboxStats | undefined> } | undefined;
  private readonly logger: RedactingLogger;

  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    private readonly events: OutboxEvents,
    private readonly operations: OutboxOperations,
  ) {
    this.logger = new RedactingLogger('OutboxMetrics', options.redactError);
  }

  onModuleInit(): void {
    const registry = this.options.metrics?.prometheus;
    if (!registry) return;
    this.registry = registry;
    const client = loadPromClient();
    const names = [...COUNTERS, ...HISTOGRAMS].map((config) => config.name);
    const taken = [...names, ...Object.keys(STATE_GAUGES)].find((name) => registry.getSingleMetric(name));
    if (taken) {
      throw new OutboxConfigurationError(
        'metrics.prometheus',
        `the registry already holds ${taken} (another OutboxModule's?): give each outbox a registry of its own`,
      );
    }
    this.removeMeter = this.events.addMeter(this.recorder(client, registry));
    for (const [name, [help, read]] of Object.entries(STATE_GAUGES)) {
      const gauge: { set(value: number): void } = new client.Gauge({
        name,
        help,
        registers: [registry],
        collect: async () => {
          const stats = await this.readStats();
          gauge.set(stats ? read(stats) : Number.NaN);
        },
      });
      this.names.push(name);
    }
  }

  onModuleDestroy(): void {
    this.removeMeter?.();
    for (const name of this.names) this.registry?.removeSingleMetric(name);
  }

  /** Counts and times what the lifecycle stream reports. */
  private recorder(client: PromClient, registry: OutboxPrometheusRegistry): (event: OutboxLifecycleEventInput) => void {
    const metric = <T>(Kind: new (config: Record<string, unknown>) => T, config: Record<string, unknown>): T => {
      this.names.push(String(config.name));
      return new Kind({ ...config, registers: [registry] });
    };
    const [published, deliveries, leasesLost] = COUNTERS.map((config) => metric(client.Counter, config));
    const [handlerTime, claimTime] = HISTOGRAMS.map((config) =>
      metric(client.Histogram, { ...config, buckets: DURATION_BUCKETS }),
    );
    const byTopic = {
      published: childrenOf(published),
      deliveries: childrenOf(deliveries),
      time: childrenOf(handlerTime),
    };
    return (event) => {
      switch (event.type) {
        case 'published':
          for (const topic of event.topics) byTopic.published(topic).inc();
          return;
        case 'delivered':
          return byTopic.deliveries(event.topic, 'delivered').inc();
        case 'retry.scheduled':
          return byTopic.deliveries(event.topic, 'retried').inc();
        case 'dead-lettered':
          return byTopic.deliveries(event.topic, 'dead').inc();
        case 'handler.succeeded':
          return byTopic.time(event.topic, 'success').observe(event.durationMs / 1000);
        case 'handler.failed':
          return byTopic.time(event.topic, 'failure').observe(event.durationMs / 1000);
        case 'claimed':
          return claimTime.observe(event.durationMs / 1000);
        case 'lease.lost':
          return leasesLost.inc(event.count);
      }
    };
  }

  /** `stats()`, shared by the gauges of one collection and reused for `statsCacheMs`; undefined when it failed. */
  private readStats(): Promise<OutboxStats | undefined> {
    const now = performance.now();
    if (this.stats && now - this.stats.at < Math.max(this.options.metrics!.statsCacheMs, 1)) return this.stats.value;
    const value = this.operations.stats().catch((error: unknown) => {
      this.stats = undefined;
      this.logger.warn(`Outbox metrics: the table's state could not be read: ${describeError(error)}`);
      return undefined;
    });
    this.stats = { at: now, value };
    return value;
  }
}

/**
 * A metric's children by topic (and outcome), each made once: prom-client hashes the label values of
 * every call made on the metric itself.
 */
function childrenOf<C>(metric: PromMetric<C>): (topic: string, outcome?: string) => C {
  const children = new Map<string, C>();
  return (topic, outcome) => {
    const id = outcome === undefined ? topic : `${outcome}\u0000${topic}`;
    let child = children.get(id);
    if (!child) {
      child = metric.labels(outcome === undefined ? { topic } : { topic, outcome });
      children.set(id, child);
    }
    return child;
  };
}
