import { Injectable } from '@nestjs/common';
import type * as Otel from '@opentelemetry/api';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { OutboxMeterProvider } from '../interfaces/outbox-metrics.interface';
import { byLabels, DURATION_BUCKETS, STATE_GAUGES, type MetricSink } from './metric-feed';
import { MetricsLifecycle } from './metrics-lifecycle';
import { loadOpenTelemetryApi } from './metrics-options';
import { OUTBOX_INSTRUMENTATION_SCOPE } from './tracing';

/** The providers an outbox reports to: two outboxes on one would add up under the same names. */
const IN_USE = new WeakSet<object>();

/**
 * The outbox's metrics through the OpenTelemetry metrics API (the `metrics.openTelemetry` option),
 * named and measured as OpenTelemetry names them: dotted names, units apart (`s`, `{event}`), the topic
 * as `messaging.destination.name`, the target (a handler's or route's name) as `outbox.target` and the
 * outcome as `outbox.outcome` — no other attribute. Counters and histograms are fed by the lifecycle
 * events; the gauges of the table's state are observed when a reader collects (one `stats()` per
 * `metrics.statsCacheMs`). When the module closes it stops feeding them and observing (instruments
 * cannot be taken off a meter).
 */
@Injectable()
export class OutboxOpenTelemetryMetrics extends MetricsLifecycle {
  protected register(): void {
    const asked = this.options.metrics?.openTelemetry;
    if (!asked) return;
    const api = loadOpenTelemetryApi();
    const provider: OutboxMeterProvider = asked === true ? api.metrics.getMeterProvider() : asked;
    if (IN_USE.has(provider)) {
      throw new OutboxConfigurationError(
        'metrics.openTelemetry',
        'another OutboxModule already reports to this meter provider: give each outbox a provider of its own',
      );
    }
    IN_USE.add(provider);
    this.atClose(() => IN_USE.delete(provider));
    const meter = provider.getMeter(OUTBOX_INSTRUMENTATION_SCOPE) as Otel.Meter;
    const stats = this.feed(sink(meter));
    const gauges = STATE_GAUGES.map((definition) => ({
      definition,
      gauge: meter.createObservableGauge(`outbox.${definition.otel}`, {
        description: definition.help,
        unit: 'seconds' in definition ? 's' : definition.name === 'blocked_keys' ? '{key}' : '{event}',
      }),
    }));
    // The state read when it cannot be: nothing observed (and a warning), the collection goes on.
    const observe: Otel.BatchObservableCallback = async (observer) => {
      const read = await stats();
      if (read) for (const { definition, gauge } of gauges) observer.observe(gauge, definition.read(read));
    };
    const observables = gauges.map((g) => g.gauge);
    meter.addBatchObservableCallback(observe, observables);
    this.atClose(() => meter.removeBatchObservableCallback(observe, observables));
  }
}

function sink(meter: Otel.Meter): MetricSink {
  const published = meter.createCounter('outbox.events.published', {
    description: 'Events committed by publish()',
    unit: '{event}',
  });
  const deliveries = meter.createCounter('outbox.deliveries', {
    description:
      "Each target's delivery in each attempt: delivered (it returned), or for a target that failed, retried " +
      '(a retry was scheduled) or dead (dead-lettered); target "none" for an attempt no target ran in',
    unit: '{delivery}',
  });
  const leasesLost = meter.createCounter('outbox.leases.lost', {
    description: 'Events whose outcome was refused because their lease had expired',
    unit: '{event}',
  });
  const advice = { explicitBucketBoundaries: DURATION_BUCKETS };
  const handlerTime = meter.createHistogram('outbox.delivery.duration', {
    description: 'One handler or route call, from its start to its end or timeout',
    unit: 's',
    advice,
  });
  const claimTime = meter.createHistogram('outbox.claim.duration', {
    description: "A claim's statements, for the claims that leased events",
    unit: 's',
    advice,
  });
  const attributes = byLabels<Otel.Attributes>((topic, outcome, target) => {
    const destination = { 'messaging.destination.name': topic };
    if (outcome === undefined) return destination;
    return target === undefined
      ? { ...destination, 'outbox.outcome': outcome }
      : { ...destination, 'outbox.target': target, 'outbox.outcome': outcome };
  });
  return {
    published: (topic) => published.add(1, attributes(topic)),
    deliveryEnded: (topic, target, outcome) => deliveries.add(1, attributes(topic, outcome, target)),
    handlerRan: (topic, target, outcome, seconds) => handlerTime.record(seconds, attributes(topic, outcome, target)),
    claimed: (seconds) => claimTime.record(seconds),
    leasesLost: (count) => leasesLost.add(count),
  };
}
