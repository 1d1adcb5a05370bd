import { Histogram, Registry } from 'prom-client';
import { OutboxConfigurationError, OutboxModule } from '../../../lib';
import { backends, type BackendName } from '../../fixtures/backends';
import { MetricHandlers, metricOptions } from '../../fixtures/metric-handlers';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

/** The samples of a registry's text exposition, by metric name and labels as written (`name{a="b"}`). */
async function samples(registry: Registry): Promise<Map<string, number>> {
  const found = new Map<string, number>();
  for (const line of (await registry.metrics()).split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    found.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return found;
}

/**
 * The `metrics.prometheus` option on a real `prom-client` registry, read as Prometheus reads it (the
 * text exposition): exact counts after a known sequence, the table's state as gauges, and the
 * registry left clean when the module closes.
 */
describe.each(backends())('Prometheus metrics on %s', (backend: BackendName) => {
  const registry = new Registry();
  let app: TestApp;
  beforeAll(async () => {
    app = await createTestApp({
      backend,
      providers: [MetricHandlers],
      outbox: { ...metricOptions(), metrics: { prometheus: registry, statsCacheMs: 0 } },
    });
  });
  afterAll(() => app?.dispose());

  it("counts what was published and how each target's delivery ended, times each target and the claims, and reads the state from the table", async () => {
    const publish = (topic: string, n: number) =>
      app.outbox.publishMany(Array.from({ length: n }, () => ({ topic, payload: {} })));
    await app.txHost.withTransaction(async () => {
      await publish('m.ok', 3);
      await publish('m.flaky', 1);
      await publish('m.doomed', 1);
      await publish('m.fanned', 1);
      await publish('m.nobody', 1);
    });
    await app.worker.drain();
    // Published after the drain, due a minute ago: no worker delivers it.
    await app.txHost.withTransaction(() =>
      app.outbox.publish('m.ok', {}, { availableAt: new Date(Date.now() - 60_000) }),
    );

    const s = await samples(registry);
    // Every label set of the deliveries and of the handlers' times, exactly: one per topic, target and outcome.
    const counted = (prefix: string) => Object.fromEntries([...s].filter(([name]) => name.startsWith(`${prefix}{`)));
    expect(counted('outbox_deliveries_total')).toEqual({
      'outbox_deliveries_total{topic="m.ok",target="MetricHandlers.ok",outcome="delivered"}': 3,
      'outbox_deliveries_total{topic="m.flaky",target="MetricHandlers.flaky",outcome="retried"}': 1,
      'outbox_deliveries_total{topic="m.doomed",target="MetricHandlers.doomed",outcome="dead"}': 1,
      // One attempt, three targets: each counted with its own outcome.
      'outbox_deliveries_total{topic="m.fanned",target="MetricHandlers.fanned",outcome="delivered"}': 1,
      'outbox_deliveries_total{topic="m.fanned",target="MetricHandlers.fannedFlaky",outcome="retried"}': 1,
      'outbox_deliveries_total{topic="m.fanned",target="transport:memory",outcome="delivered"}': 1,
      // No target ran.
      'outbox_deliveries_total{topic="m.nobody",target="none",outcome="retried"}': 1,
    });
    expect(counted('outbox_delivery_duration_seconds_count')).toEqual({
      'outbox_delivery_duration_seconds_count{topic="m.ok",target="MetricHandlers.ok",outcome="success"}': 3,
      'outbox_delivery_duration_seconds_count{topic="m.flaky",target="MetricHandlers.flaky",outcome="failure"}': 1,
      'outbox_delivery_duration_seconds_count{topic="m.doomed",target="MetricHandlers.doomed",outcome="failure"}': 1,
      'outbox_delivery_duration_seconds_count{topic="m.fanned",target="MetricHandlers.fanned",outcome="success"}': 1,
      'outbox_delivery_duration_seconds_count{topic="m.fanned",target="MetricHandlers.fannedFlaky",outcome="failure"}': 1,
      'outbox_delivery_duration_seconds_count{topic="m.fanned",target="transport:memory",outcome="success"}': 1,
    });
    expect(
      Object.fromEntries(
        [
          'outbox_events_published_total{topic="m.ok"}',
          'outbox_events_published_total{topic="m.flaky"}',
          'outbox_events_published_total{topic="m.doomed"}',
          'outbox_events_published_total{topic="m.fanned"}',
          'outbox_events_published_total{topic="m.nobody"}',
          'outbox_leases_lost_total',
          'outbox_events_due',
          'outbox_events_scheduled',
          'outbox_events_in_flight',
          'outbox_events_dead',
          'outbox_blocked_keys',
        ].map((name) => [name, s.get(name)]),
      ),
    ).toEqual({
      'outbox_events_published_total{topic="m.ok"}': 4,
      'outbox_events_published_total{topic="m.flaky"}': 1,
      'outbox_events_published_total{topic="m.doomed"}': 1,
      'outbox_events_published_total{topic="m.fanned"}': 1,
      'outbox_events_published_total{topic="m.nobody"}': 1,
      outbox_leases_lost_total: 0,
      outbox_events_due: 1,
      outbox_events_scheduled: 3,
      outbox_events_in_flight: 0,
      outbox_events_dead: 1,
      outbox_blocked_keys: 0,
    });
    expect(s.get('outbox_oldest_due_age_seconds')).toBeGreaterThan(50);
    expect(s.get('outbox_claim_duration_seconds_count')).toBeGreaterThanOrEqual(1);
    // No id, key or other label than the topic, the target and the outcome.
    const labels = [...s.keys()].flatMap((name) => [...name.matchAll(/([a-z_]+)="/g)].map((m) => m[1]));
    expect(new Set(labels)).toEqual(new Set(['topic', 'target', 'outcome', 'le']));

    // Delivered: nothing due any more, read again from the table on the next collection.
    await app.worker.drain();
    expect((await samples(registry)).get('outbox_events_due')).toBe(0);
  });
});

describe('Prometheus metrics: their option and their registry', () => {
  it('refuses a registry that is not one, and a registry another outbox already reports to', async () => {
    expect(() => OutboxModule.forRoot({ metrics: { prometheus: {} as never } })).toThrow(OutboxConfigurationError);
    expect(() => OutboxModule.forRoot({ metrics: { statsCacheMs: -1 } })).toThrow(/metrics\.statsCacheMs/);
    const registry = new Registry();
    const first = await createTestApp({ backend: 'better-sqlite3', outbox: { metrics: { prometheus: registry } } });
    try {
      await expect(
        createTestApp({ backend: 'better-sqlite3', outbox: { metrics: { prometheus: registry } } }),
      ).rejects.toThrow(/registry already holds outbox_events_published_total/);
    } finally {
      await first.dispose();
    }
    // Closed: its metrics are off the registry, and another outbox may report to it.
    expect(registry.getSingleMetric('outbox_deliveries_total')).toBeUndefined();
    const second = await createTestApp({ backend: 'better-sqlite3', outbox: { metrics: { prometheus: registry } } });
    await second.dispose();
  });

  it('refuses a registry holding any one of its metrics, a histogram too, with its own error', async () => {
    const registry = new Registry();
    new Histogram({ name: 'outbox_claim_duration_seconds', help: 'the app its own', registers: [registry] });
    await expect(
      createTestApp({ backend: 'better-sqlite3', outbox: { metrics: { prometheus: registry } } }),
    ).rejects.toThrow(/registry already holds outbox_claim_duration_seconds/);
    // Nothing of the outbox's was left on it.
    expect(registry.getMetricsAsArray().map((m) => m.name)).toEqual(['outbox_claim_duration_seconds']);
  });
});
