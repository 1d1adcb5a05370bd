import { Injectable } from '@nestjs/common';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { OutboxPrometheusRegistry } from '../interfaces/outbox-metrics.interface';
import { byLabels, DURATION_BUCKETS, STATE_GAUGES, type MetricSink } from './metric-feed';
import { MetricsLifecycle } from './metrics-lifecycle';
import { TalliedHistogram } from './tallied-histogram';
import { loadPromClient, type PromClient, type PromMetric } from './metrics-options';

/** The counters and histograms, in the order `sink` takes them. */
const COUNTERS = [
  { name: 'outbox_events_published_total', help: 'Events committed by publish()', labelNames: ['topic'] },
  {
    name: 'outbox_deliveries_total',
    help:
      "Each target's delivery in each attempt: delivered (it returned), or for a target that failed, retried " +
      '(a retry was scheduled) or dead (dead-lettered); target "none" for an attempt no target ran in',
    labelNames: ['topic', 'target', 'outcome'],
  },
  { name: 'outbox_leases_lost_total', help: 'Events whose outcome was refused because their lease had expired' },
] as const;
const HISTOGRAMS = [
  {
    name: 'outbox_delivery_duration_seconds',
    help: 'One handler or route call, from its start to its end or timeout',
    labelNames: ['topic', 'target', 'outcome'],
  },
  { name: 'outbox_claim_duration_seconds', help: "A claim's statements, for the claims that leased events" },
] as const;

/** A state gauge's Prometheus name: `outbox_` and, for a time, the unit. */
const gaugeName = (gauge: (typeof STATE_GAUGES)[number]) =>
  `outbox_${gauge.name}${'seconds' in gauge ? '_seconds' : ''}`;

/**
 * The outbox's metrics on a `prom-client` registry (the `metrics.prometheus` option): counters and
 * histograms fed by the lifecycle events, gauges read from the database when the registry is collected
 * (one `stats()` per `metrics.statsCacheMs` however many scrapes). Labels are the topic, the target
 * and the outcome only. Taken off the registry when the module closes.
 */
@Injectable()
export class OutboxPrometheusMetrics extends MetricsLifecycle {
  private readonly names: string[] = [];

  protected register(): void {
    const registry = this.options.metrics?.prometheus;
    if (!registry) return;
    const client = loadPromClient();
    const names = [...COUNTERS, ...HISTOGRAMS].map((config) => config.name);
    const taken = [...names, ...STATE_GAUGES.map(gaugeName)].find((name) => registry.getSingleMetric(name));
    if (taken) {
      throw new OutboxConfigurationError(
        'metrics.prometheus',
        `the registry already holds ${taken} (another OutboxModule's?): give each outbox a registry of its own`,
      );
    }
    // When the module closes, every metric made from here on (`names`) is taken off the registry.
    this.atClose(() => {
      for (const name of this.names) registry.removeSingleMetric(name);
    });
    const stats = this.feed(this.sink(client, registry));
    for (const definition of STATE_GAUGES) {
      const gauge: { set(value: number): void } = new client.Gauge({
        name: gaugeName(definition),
        help: definition.help,
        registers: [registry],
        collect: async () => {
          const read = await stats();
          gauge.set(read ? definition.read(read) : Number.NaN);
        },
      });
      this.names.push(gaugeName(definition));
    }
  }

  private sink(client: PromClient, registry: OutboxPrometheusRegistry): MetricSink {
    const metric = <T>(Kind: new (config: Record<string, unknown>) => T, config: Record<string, unknown>): T => {
      this.names.push(String(config.name));
      return new Kind({ ...config, registers: [registry] });
    };
    // The counters count here and are added to when the registry is collected: prom-client would
    // validate and hash the label values of every `inc`, once per event.
    const counts = COUNTERS.map(() => new Tally());
    const [published, deliveries, leasesLost] = COUNTERS.map((config, i) =>
      metric(client.Counter, { ...config, collect: () => counts[i].flush() }),
    );
    // The histograms are the outbox's own, for the same reason (see TalliedHistogram).
    const [handlerTime, claimTime] = HISTOGRAMS.map((config) => {
      const histogram = new TalliedHistogram(
        config.name,
        config.help,
        'labelNames' in config ? config.labelNames : [],
        DURATION_BUCKETS,
      );
      registry.registerMetric(histogram);
      this.names.push(config.name);
      return histogram;
    });
    const claims = claimTime.labels({});
    const byTopic = {
      published: counts[0].of(published),
      deliveries: counts[1].of(deliveries),
      time: byLabels((topic, outcome, target) => handlerTime.labels(labelsOf(topic, outcome, target))),
    };
    const lost = counts[2].add(leasesLost);
    return {
      published: (topic) => {
        byTopic.published(topic).n++;
      },
      deliveryEnded: (topic, target, outcome) => {
        byTopic.deliveries(topic, outcome, target).n++;
      },
      handlerRan: (topic, target, outcome, seconds) => byTopic.time(topic, outcome, target).observe(seconds),
      claimed: (seconds) => claims.observe(seconds),
      leasesLost: (count) => {
        lost.n += count;
      },
    };
  }
}

type TallyEntry = { child: { inc(value?: number): void }; n: number };

/** A counter's counts by label values, not yet added to it. */
export class Tally {
  private readonly pending = new Set<TallyEntry>();

  /** The count of `child`, added to it at the next flush. */
  add(child: { inc(value?: number): void }): TallyEntry {
    const entry = { child, n: 0 };
    this.pending.add(entry);
    return entry;
  }

  /**
   * The count of each label set (a topic, and an outcome and a target) of `counter`. When the memo of
   * label sets is full and starts again, the counts it held are added to the counter at once and
   * forgotten, so none is lost.
   */
  of(
    counter: PromMetric<{ inc(value?: number): void }>,
    maxSize?: number,
  ): (topic: string, outcome?: string, target?: string) => { n: number } {
    return byLabels<TallyEntry>(
      (topic, outcome, target) => this.add(counter.labels(labelsOf(topic, outcome, target))),
      (entries) => {
        for (const entry of entries) {
          this.flushOne(entry);
          this.pending.delete(entry);
        }
      },
      maxSize,
    );
  }

  /** How many counts are kept. */
  get size(): number {
    return this.pending.size;
  }

  /** Adds the counts to the counter (when the registry is collected). */
  flush(): void {
    for (const entry of this.pending) this.flushOne(entry);
  }

  private flushOne(entry: TallyEntry): void {
    if (entry.n === 0) return;
    entry.child.inc(entry.n);
    entry.n = 0;
  }
}

/** A label set's values, in the order of the metric's label names (the topic, the target, the outcome). */
function labelsOf(topic: string, outcome?: string, target?: string): Record<string, string> {
  if (outcome === undefined) return { topic };
  return target === undefined ? { topic, outcome } : { topic, target, outcome };
}
