import { metrics } from '@opentelemetry/api';
import { DataPointType, MeterProvider, MetricReader, type HistogramMetricData } from '@opentelemetry/sdk-metrics';
import { OutboxConfigurationError, OutboxModule } from '../../../lib';
import { backends, type BackendName } from '../../fixtures/backends';
import { MetricHandlers, metricOptions } from '../../fixtures/metric-handlers';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

/** A reader collected on demand, as an exporter's reader would be on its interval. */
class TestReader extends MetricReader {
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

/** What one collection read of the outbox's instruments: `name{attr=value,…}` → value (a histogram's count). */
async function collect(reader: MetricReader) {
  const { resourceMetrics, errors } = await reader.collect();
  expect(errors).toEqual([]);
  const found = new Map<string, number>();
  const units = new Map<string, string>();
  const attributeNames = new Set<string>();
  for (const scope of resourceMetrics.scopeMetrics) {
    if (scope.scope.name !== 'nestjs-typeorm-outbox') continue;
    for (const metric of scope.metrics) {
      units.set(metric.descriptor.name, metric.descriptor.unit);
      for (const point of metric.dataPoints) {
        Object.keys(point.attributes).forEach((name) => attributeNames.add(name));
        const labels = Object.entries(point.attributes).map(([k, v]) => `${k}=${String(v)}`);
        const value =
          metric.dataPointType === DataPointType.HISTOGRAM
            ? (point as HistogramMetricData['dataPoints'][number]).value.count
            : (point.value as number);
        found.set(labels.length ? `${metric.descriptor.name}{${labels.join(',')}}` : metric.descriptor.name, value);
      }
    }
  }
  return { found, units, attributeNames };
}

/**
 * `metrics.openTelemetry` with the real SDK's MeterProvider and a reader: exact counts after a known
 * sequence, OpenTelemetry's names and units, the table's state observed on collection.
 */
describe.each(backends())('OpenTelemetry metrics on %s', (backend: BackendName) => {
  const reader = new TestReader();
  const provider = new MeterProvider({ readers: [reader] });
  let app: TestApp;
  beforeAll(async () => {
    app = await createTestApp({
      backend,
      providers: [MetricHandlers],
      outbox: { ...metricOptions(), metrics: { openTelemetry: provider, statsCacheMs: 0 } },
    });
  });
  afterAll(async () => {
    await app?.dispose();
    await provider.shutdown();
  });

  it("counts what was published and how each target's delivery ended, times each target and the claims, and observes the table", async () => {
    await app.txHost.withTransaction(async () => {
      for (const [topic, n] of [
        ['m.ok', 3],
        ['m.flaky', 1],
        ['m.doomed', 1],
        ['m.fanned', 1],
        ['m.nobody', 1],
      ] as const) {
        await app.outbox.publishMany(Array.from({ length: n }, () => ({ topic, payload: {} })));
      }
    });
    await app.worker.drain();
    await app.txHost.withTransaction(() =>
      app.outbox.publish('m.ok', {}, { availableAt: new Date(Date.now() - 60_000) }),
    );

    const { found, units, attributeNames } = await collect(reader);
    const topic = 'messaging.destination.name';
    // Every attribute set, exactly: the deliveries and the handlers' times per topic, target and outcome.
    expect(Object.fromEntries([...found].filter(([name]) => !name.startsWith('outbox.claim')))).toEqual({
      [`outbox.events.published{${topic}=m.ok}`]: 4,
      [`outbox.events.published{${topic}=m.flaky}`]: 1,
      [`outbox.events.published{${topic}=m.doomed}`]: 1,
      [`outbox.events.published{${topic}=m.fanned}`]: 1,
      [`outbox.events.published{${topic}=m.nobody}`]: 1,
      [`outbox.deliveries{${topic}=m.ok,outbox.target=MetricHandlers.ok,outbox.outcome=delivered}`]: 3,
      [`outbox.deliveries{${topic}=m.flaky,outbox.target=MetricHandlers.flaky,outbox.outcome=retried}`]: 1,
      [`outbox.deliveries{${topic}=m.doomed,outbox.target=MetricHandlers.doomed,outbox.outcome=dead}`]: 1,
      // One attempt, three targets: each counted with its own outcome.
      [`outbox.deliveries{${topic}=m.fanned,outbox.target=MetricHandlers.fanned,outbox.outcome=delivered}`]: 1,
      [`outbox.deliveries{${topic}=m.fanned,outbox.target=MetricHandlers.fannedFlaky,outbox.outcome=retried}`]: 1,
      [`outbox.deliveries{${topic}=m.fanned,outbox.target=transport:memory,outbox.outcome=delivered}`]: 1,
      // No target ran.
      [`outbox.deliveries{${topic}=m.nobody,outbox.target=none,outbox.outcome=retried}`]: 1,
      [`outbox.delivery.duration{${topic}=m.ok,outbox.target=MetricHandlers.ok,outbox.outcome=success}`]: 3,
      [`outbox.delivery.duration{${topic}=m.flaky,outbox.target=MetricHandlers.flaky,outbox.outcome=failure}`]: 1,
      [`outbox.delivery.duration{${topic}=m.doomed,outbox.target=MetricHandlers.doomed,outbox.outcome=failure}`]: 1,
      [`outbox.delivery.duration{${topic}=m.fanned,outbox.target=MetricHandlers.fanned,outbox.outcome=success}`]: 1,
      [`outbox.delivery.duration{${topic}=m.fanned,outbox.target=MetricHandlers.fannedFlaky,outbox.outcome=failure}`]: 1,
      [`outbox.delivery.duration{${topic}=m.fanned,outbox.target=transport:memory,outbox.outcome=success}`]: 1,
      'outbox.events.due': 1,
      'outbox.events.scheduled': 3,
      'outbox.events.in_flight': 0,
      'outbox.events.dead': 1,
      'outbox.keys.blocked': 0,
      'outbox.events.oldest_due.age': expect.any(Number) as number,
    });
    expect(found.get('outbox.events.oldest_due.age')).toBeGreaterThan(50);
    expect(found.get('outbox.claim.duration')).toBeGreaterThanOrEqual(1);
    expect(units.get('outbox.delivery.duration')).toBe('s');
    expect(units.get('outbox.events.oldest_due.age')).toBe('s');
    expect(units.get('outbox.events.published')).toBe('{event}');
    expect(units.get('outbox.deliveries')).toBe('{delivery}');
    // No id, key or other attribute than the topic, the target and the outcome.
    expect(attributeNames).toEqual(new Set([topic, 'outbox.target', 'outbox.outcome']));

    await app.worker.drain();
    expect((await collect(reader)).found.get('outbox.events.due')).toBe(0);
  });
});

describe('OpenTelemetry metrics: the option and the provider', () => {
  it('refuses what is not a meter provider, and a provider another outbox reports to', async () => {
    expect(() => OutboxModule.forRoot({ metrics: { openTelemetry: {} as never } })).toThrow(OutboxConfigurationError);
    const provider = new MeterProvider();
    const first = await createTestApp({ backend: 'better-sqlite3', outbox: { metrics: { openTelemetry: provider } } });
    try {
      await expect(
        createTestApp({ backend: 'better-sqlite3', outbox: { metrics: { openTelemetry: provider } } }),
      ).rejects.toThrow(/another OutboxModule already reports to this meter provider/);
    } finally {
      await first.dispose();
    }
    // Closed: another outbox may report to it.
    const second = await createTestApp({ backend: 'better-sqlite3', outbox: { metrics: { openTelemetry: provider } } });
    await second.dispose();
    await provider.shutdown();
  });

  it('true: reports to the global meter provider the application registered', async () => {
    const reader = new TestReader();
    const provider = new MeterProvider({ readers: [reader] });
    metrics.setGlobalMeterProvider(provider);
    const app = await createTestApp({
      backend: 'better-sqlite3',
      providers: [MetricHandlers],
      outbox: { metrics: { openTelemetry: true } },
    });
    try {
      await app.txHost.withTransaction(() => app.outbox.publish('m.ok', {}));
      await app.worker.drain();
      const { found } = await collect(reader);
      const delivered =
        'outbox.deliveries{messaging.destination.name=m.ok,outbox.target=MetricHandlers.ok,outbox.outcome=delivered}';
      expect(found.get(delivered)).toBe(1);
    } finally {
      await app.dispose();
      metrics.disable();
      await provider.shutdown();
    }
  });
});
