import { OutboxConfigurationError } from '../errors/outbox.errors';
import type {
  OutboxMeterProvider,
  OutboxPrometheusRegistry,
  ResolvedMetricsOptions,
} from '../interfaces/outbox-metrics.interface';
import { describeValue } from '../utils/describe-value';
import { integerOption, isPlainObject, optionSection } from '../utils/option-checks';
import { packageRequire } from '../utils/package-require';

const REGISTRY_METHODS = ['registerMetric', 'getSingleMetric', 'removeSingleMetric'] as const;

/** The `metrics` option checked and defaulted: undefined without it. */
export function resolveMetrics(value: unknown): ResolvedMetricsOptions | undefined {
  if (value === undefined) return undefined;
  if (!isPlainObject(value)) {
    throw new OutboxConfigurationError(
      'metrics',
      `expected an object such as { prometheus: true }, got ${describeValue(value)}`,
    );
  }
  const m = optionSection('metrics', value, ['prometheus', 'openTelemetry', 'statsCacheMs']);
  return {
    prometheus: resolvePrometheus(m.prometheus),
    openTelemetry: resolveOpenTelemetry(m.openTelemetry),
    statsCacheMs: integerOption('metrics.statsCacheMs', m.statsCacheMs, 5_000, 0, 60_000),
  };
}

function resolvePrometheus(value: unknown): OutboxPrometheusRegistry | undefined {
  if (value === undefined || value === false) return undefined;
  const client = loadPromClient();
  if (value === true) return client.register;
  const missing = REGISTRY_METHODS.find((m) => typeof (value as Record<string, unknown> | null)?.[m] !== 'function');
  if (missing !== undefined) {
    throw new OutboxConfigurationError(
      'metrics.prometheus',
      `expected true (prom-client's default registry) or a prom-client Registry, got ${describeValue(value)}`,
    );
  }
  return value as OutboxPrometheusRegistry;
}

function resolveOpenTelemetry(value: unknown): true | OutboxMeterProvider | undefined {
  if (value === undefined || value === false) return undefined;
  loadOpenTelemetryApi();
  if (value === true) return true;
  if (typeof (value as OutboxMeterProvider | null)?.getMeter !== 'function') {
    throw new OutboxConfigurationError(
      'metrics.openTelemetry',
      `expected true (the global meter provider) or a MeterProvider, got ${describeValue(value)}`,
    );
  }
  return value as OutboxMeterProvider;
}

/** `@opentelemetry/api`, for `metrics.openTelemetry`; a clear error when it is not installed. */
export function loadOpenTelemetryApi(): typeof import('@opentelemetry/api') {
  try {
    return packageRequire('@opentelemetry/api') as typeof import('@opentelemetry/api');
  } catch (error) {
    throw new OutboxConfigurationError(
      'metrics.openTelemetry',
      `needs the @opentelemetry/api package, which could not be loaded (npm install @opentelemetry/api): ${String(error)}`,
    );
  }
}

/** The parts of `prom-client` the outbox uses. */
export interface PromClient {
  register: OutboxPrometheusRegistry;
  Counter: new (config: Record<string, unknown>) => PromMetric<{ inc(value?: number): void }>;
  Gauge: new (config: Record<string, unknown>) => { set(value: number): void };
}

/** A prom-client counter: itself when it has no labels, or its child of some label values. */
export type PromMetric<Child> = Child & { labels(values: Record<string, string>): Child };

/** `prom-client`, loaded when the `metrics.prometheus` option asks for it; a clear error when it is not installed. */
export function loadPromClient(): PromClient {
  try {
    return packageRequire('prom-client') as PromClient;
  } catch (error) {
    throw new OutboxConfigurationError(
      'metrics.prometheus',
      `needs the prom-client package, which could not be loaded (npm install prom-client): ${String(error)}`,
    );
  }
}
