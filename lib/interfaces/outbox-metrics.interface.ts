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
   * The OpenTelemetry metrics API (`@opentelemetry/api`, installed by the application): `true` reports
   * to the global meter provider — register the SDK before the application starts — or give a
   * `MeterProvider`.
   */
  openTelemetry?: true | OutboxMeterProvider;
  /**
   * How long the gauges read from the database (`stats()`) are reused, in ms: a scrape within that
   * time of the last one costs no query. 0 to 60,000; default 5,000.
   */
  statsCacheMs?: number;
}

/** An OpenTelemetry `MeterProvider`, as far as the outbox uses one (it imports the API only when asked for). */
export interface OutboxMeterProvider {
  getMeter(name: string, version?: string): unknown;
}

export interface ResolvedMetricsOptions {
  prometheus: OutboxPrometheusRegistry | undefined;
  /** `true`: the global provider, taken when the module starts. */
  openTelemetry: true | OutboxMeterProvider | undefined;
  statsCacheMs: number;
}
