import { AggregatorRegistry, Histogram, Registry } from 'prom-client';
import { DURATION_BUCKETS } from '../../lib/observability/metric-feed';
import { TalliedHistogram } from '../../lib/observability/tallied-histogram';

const LABELS = ['topic', 'target', 'outcome'];

/** The same observations into the outbox's histogram and into prom-client's own, each on a registry of its own. */
function twins(labelNames: string[]) {
  const ours = new Registry();
  const theirs = new Registry();
  const tallied = new TalliedHistogram('outbox_test_seconds', 'a test', labelNames, DURATION_BUCKETS);
  ours.registerMetric(tallied as never);
  const histogram = new Histogram({
    name: 'outbox_test_seconds',
    help: 'a test',
    labelNames,
    buckets: DURATION_BUCKETS,
    registers: [theirs],
  });
  const observe = (labels: Record<string, string>, value: number) => {
    tallied.labels(labels).observe(value);
    histogram.observe(labels, value);
  };
  return { ours, theirs, observe };
}

/** Values on and between the bounds, below the first and past the last. */
const VALUES = [0, 0.0005, 0.001, 0.0011, 0.004, 0.01, 0.3, 1, 2.5, 7, 30, 60, 61, 3600];

describe('TalliedHistogram', () => {
  it("reads as prom-client's Histogram of the same observations: the text, the JSON, after a reset, under default labels and merged across a cluster", async () => {
    const { ours, theirs, observe } = twins(LABELS);
    // Nothing observed: no labelled series yet.
    expect(await ours.metrics()).toBe(await theirs.metrics());
    VALUES.forEach((value, n) => {
      observe({ topic: 'a', target: 'H.a', outcome: 'success' }, value);
      observe({ topic: n % 2 ? 'b"\\\n' : 'a', target: 'H.b', outcome: n % 3 ? 'success' : 'failure' }, value / 3);
    });
    // Label values in another key order are the same series.
    observe({ outcome: 'success', topic: 'a', target: 'H.a' }, 0.02);
    expect(await ours.metrics()).toBe(await theirs.metrics());
    expect(await ours.getMetricsAsJSON()).toEqual(await theirs.getMetricsAsJSON());
    const merged = async (registry: Registry) =>
      await AggregatorRegistry.aggregate([
        await registry.getMetricsAsJSON(),
        await registry.getMetricsAsJSON(),
      ]).metrics();
    expect(await merged(ours)).toBe(await merged(theirs));

    for (const registry of [ours, theirs]) registry.setDefaultLabels({ service: 'orders' });
    expect(await ours.metrics()).toBe(await theirs.metrics());

    for (const registry of [ours, theirs]) registry.resetMetrics();
    expect(await ours.metrics()).toBe(await theirs.metrics());
    observe({ topic: 'c', target: 'H.c', outcome: 'failure' }, 0.2);
    expect(await ours.metrics()).toBe(await theirs.metrics());
    expect(await ours.metrics()).toContain(
      'outbox_test_seconds_count{service="orders",topic="c",target="H.c",outcome="failure"} 1',
    );
  });

  it('without labels: shown from the start, counts what it observes, and ignores a value that is not a number', async () => {
    const { ours, theirs, observe } = twins([]);
    expect(await ours.metrics()).toBe(await theirs.metrics());
    for (const value of VALUES) observe({}, value);
    expect(await ours.metrics()).toBe(await theirs.metrics());
    expect(await ours.metrics()).toContain(`outbox_test_seconds_count ${VALUES.length}`);

    const tallied = ours.getSingleMetric('outbox_test_seconds') as unknown as TalliedHistogram;
    tallied.labels({}).observe(Number.NaN);
    tallied.labels({}).observe(Number.POSITIVE_INFINITY);
    expect(await ours.metrics()).toBe(await theirs.metrics());
  });
});
