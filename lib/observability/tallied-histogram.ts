/** One label set's observations: a count per bucket (the last one past every bound), their sum and count. */
export class HistogramSeries {
  readonly buckets: number[];
  sum = 0;
  count = 0;
  /** Whether a registry shows it: from its first observation (always, for the series without labels). */
  shown: boolean;

  constructor(
    readonly labels: Readonly<Record<string, string>>,
    private readonly bounds: readonly number[],
  ) {
    this.buckets = new Array<number>(bounds.length + 1).fill(0);
    this.shown = Object.keys(labels).length === 0;
  }

  observe(value: number): void {
    // A duration is finite; anything else would make the sum unreadable (prom-client throws on it).
    if (!Number.isFinite(value)) return;
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]) i++;
    this.buckets[i]++;
    this.sum += value;
    this.count++;
    this.shown = true;
  }

  /** Nothing observed, and not shown until something is (as prom-client's `reset`, which forgets every series). */
  reset(): void {
    this.buckets.fill(0);
    this.sum = 0;
    this.count = 0;
    this.shown = false;
  }
}

/**
 * A sample as a prom-client registry reads it: for the text, the series' labels apart (`sharedLabels`,
 * the same object each time, so the registry formats them once); from `get()`, in `labels`.
 */
interface Sample {
  labels: Record<string, string | number>;
  sharedLabels?: Readonly<Record<string, string>>;
  value: number;
  metricName: string;
  exemplar?: null;
}

interface MetricData {
  name: string;
  help: string;
  type: string;
  aggregator: string;
  values: Sample[];
}

/**
 * A Prometheus histogram the outbox keeps itself, registered on the application's `prom-client`
 * registry like any metric: the registry reads it (the text exposition, the JSON, a cluster's merge)
 * and clears it (`resetMetrics()`) through the methods prom-client's own metrics have, and it reads as
 * prom-client's `Histogram` of the same name, buckets and observations reads. An observation is a
 * bucket search and a few additions on a series found once per label set, where prom-client's
 * `observe` validates and hashes the label values every time, once per delivery.
 */
export class TalliedHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly series = new Map<string, HistogramSeries>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly string[],
    private readonly bounds: readonly number[],
  ) {
    if (labelNames.length === 0) this.labels({});
  }

  /** The series of `labels` (each of the metric's label names with a value): find it once, observe into it. */
  labels(labels: Record<string, string>): HistogramSeries {
    const key = JSON.stringify(this.labelNames.map((name) => labels[name]));
    let series = this.series.get(key);
    if (!series) {
      const own = Object.fromEntries(this.labelNames.map((name) => [name, labels[name]]));
      this.series.set(key, (series = new HistogramSeries(own, this.bounds)));
    }
    return series;
  }

  /** For the text exposition: each shown series' buckets (cumulative, as Prometheus counts them), sum and count. */
  // eslint-disable-next-line @typescript-eslint/require-await -- a registry awaits it, as prom-client's own
  async getForPromString(): Promise<MetricData> {
    const values: Sample[] = [];
    const bucket = `${this.name}_bucket`;
    for (const series of this.series.values()) {
      if (!series.shown) continue;
      const sharedLabels = series.labels;
      let cumulative = 0;
      this.bounds.forEach((le, i) => {
        cumulative += series.buckets[i];
        values.push({ labels: { le }, sharedLabels, value: cumulative, metricName: bucket, exemplar: null });
      });
      values.push({ labels: { le: '+Inf' }, sharedLabels, value: series.count, metricName: bucket, exemplar: null });
      values.push({ labels: {}, sharedLabels, value: series.sum, metricName: `${this.name}_sum` });
      values.push({ labels: {}, sharedLabels, value: series.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  /** For the JSON (and a cluster's merge): the same samples, each with all its labels. */
  async get(): Promise<MetricData> {
    const data = await this.getForPromString();
    data.values = data.values.map(({ sharedLabels, labels, ...sample }) => ({
      ...sample,
      labels: { ...labels, ...sharedLabels },
    }));
    return data;
  }

  /** For a registry's `resetMetrics()`: every series back to nothing observed. */
  reset(): void {
    for (const series of this.series.values()) series.reset();
  }
}
