/**
 * A `prom-client` registry, as far as the outbox uses one: where its metrics are registered, and
 * taken off again when the module closes. The outbox imports `prom-client` only when asked for it.
 */
export interface OutboxPrometheusRegistry {
  registerMetric(metric: unknown): void;
  getSingleMetric(name: string): unknown;
  removeSingleMetric(name: string): void;
}

/** The `metrics` option: which metric systems the outbox reports to. */
export interface OutboxMetricsOptions {
  /**
   * `prom-client` (installed by the application): `true` registers the outbox's metrics on its
   * default registry (the one `@willsoto/nestjs-prometheus` serves by default), or give a registry.
   */
  prometheus?: true | OutboxPrometheusRegistry;
  /**
   * How long the gauges read from the database (`stats()`) are reused, in ms: a scrape within that
   * time of the last one costs no query. 0 to 60,000; default 5,000.
   */
  statsCacheMs?: number;
}

export interface ResolvedMetricsOptions {
  prometheus: OutboxPrometheusRegistry | undefined;
  statsCacheMs: number;
}
