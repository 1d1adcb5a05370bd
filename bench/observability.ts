/**
 * What observability costs (issue 27), in the same run as without it: the drain and the enqueue with
 * the outbox's tracing (an OpenTelemetry SDK whose exporter sends nowhere) and Prometheus metrics (a
 * registry nobody scrapes) on, against both off, and against the default with only
 * `@opentelemetry/api` installed and no SDK registered.
 */
import type { INestApplicationContext } from '@nestjs/common';
import { ClsService } from 'nestjs-cls';
import type { Db } from './env';

/**
 * - off: `tracing: false`, no metrics — what an application without `@opentelemetry/api` runs;
 * - api: the defaults, `@opentelemetry/api` installed and no SDK registered (tracing on, recording nothing);
 * - on: an SDK registered (batch span processor, an exporter that drops what it gets) and Prometheus metrics;
 * - tracing, metrics: each of the two alone (the drain only), for the cost of each;
 * - span: the outbox's tracing off, the SDK registered, and the handler starting and ending a span of its
 *   own per event — what the SDK alone costs the drain for one span per event, the floor of any tracing;
 * - sampled: as production runs it — the SDK registered with `ParentBased(TraceIdRatioBased(0.1))`, and
 *   Prometheus metrics on.
 */
export type ObservabilityVariant = 'off' | 'api' | 'on' | 'tracing' | 'metrics' | 'span' | 'sampled' | 'sampledSpan';

/** The ratio of the `sampled` variant's sampler. */
export const SAMPLED_RATIO = 0.1;

/** What a bench child reads to pick its variant (bench/child.ts). */
export const observabilityEnv = (variant: ObservabilityVariant) => ({ OUTBOX_BENCH_OBSERVABILITY: variant });

/** The outbox options of a variant; `on` registers the SDK in this process first. */
export function observabilityOptions(variant: ObservabilityVariant | undefined): Record<string, unknown> {
  if (variant === undefined || variant === 'api') return {};
  if (variant === 'off') return { tracing: false };
  if (variant !== 'metrics')
    registerSdk(variant === 'sampled' || variant === 'sampledSpan' ? SAMPLED_RATIO : undefined);
  if (variant === 'tracing') return {};
  if (variant === 'span' || variant === 'sampledSpan') return { tracing: false };
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded only for metrics on, as the library does
  const { Registry } = require('prom-client') as typeof import('prom-client');
  return { metrics: { prometheus: new Registry() }, ...(variant === 'metrics' ? { tracing: false } : {}) };
}

/** The `span` variant's handler work: a span of the application's own, started and ended. */
export function handlerSpan(variant: ObservabilityVariant | undefined): (() => void) | undefined {
  if (variant !== 'span' && variant !== 'sampledSpan') return undefined;
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const api = require('@opentelemetry/api') as typeof import('@opentelemetry/api');
  const tracer = api.trace.getTracer('bench');
  return () => tracer.startSpan('handle').end();
}

/**
 * What every application that publishes has done before its worker drains: a transaction of
 * `@nestjs-cls/transactional`, which runs in nestjs-cls's AsyncLocalStorage — and so turns on Node's
 * async context tracking for the whole process, for good. Done in every variant of the section: else
 * the ones that trace would pay alone for a tracking that any application using the outbox already has.
 */
export async function likeAnApplication(app: INestApplicationContext): Promise<void> {
  await app.get(ClsService).run(() => Promise.resolve());
}

let sdk: { shutdown(): Promise<void> } | undefined;

/**
 * The OpenTelemetry SDK as an application registers it, exporting to nowhere; with a ratio, sampling as
 * production does (`ParentBased(TraceIdRatioBased(ratio))`), else every trace.
 */
export function registerSdk(ratio?: number): void {
  if (sdk) return;
  /* eslint-disable @typescript-eslint/no-require-imports -- dev dependencies of the bench, loaded when asked for */
  const { NodeTracerProvider } =
    require('@opentelemetry/sdk-trace-node') as typeof import('@opentelemetry/sdk-trace-node');
  const { BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler } =
    require('@opentelemetry/sdk-trace-base') as typeof import('@opentelemetry/sdk-trace-base');
  /* eslint-enable @typescript-eslint/no-require-imports */
  const nowhere = {
    export: (_spans: unknown, done: (result: { code: 0 }) => void) => done({ code: 0 }),
    shutdown: () => Promise.resolve(),
  };
  const sampler =
    ratio === undefined ? undefined : new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) });
  const provider = new NodeTracerProvider({ spanProcessors: [new BatchSpanProcessor(nowhere)], sampler });
  provider.register();
  sdk = provider;
}

/** Takes the SDK off the globals again (the API's own functions). */
export async function unregisterSdk(): Promise<void> {
  if (!sdk) return;
  await sdk.shutdown();
  sdk = undefined;
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const api = require('@opentelemetry/api') as typeof import('@opentelemetry/api');
  api.trace.disable();
  api.context.disable();
  api.propagation.disable();
}

export interface ObservabilityResult {
  /** Events per second, 1 worker × batch 500, medians; of drains of `drainEvents` (when recorded). */
  drainEvents?: number;
  drainOff: number;
  drainApi: number;
  drainOn: number;
  /** Each alone: tracing (the SDK registered, no metrics), Prometheus metrics (tracing off). */
  drainTracing?: number;
  drainMetrics?: number;
  /** The SDK's floor: no outbox tracing, a span of the handler's own per event. */
  drainSpan?: number;
  /** As production runs it: `ParentBased(TraceIdRatioBased(0.1))` and metrics on. */
  drainSampled?: number;
  /** The SDK's floor under that sampler: no outbox tracing, no metrics, a span of the handler's own per event. */
  drainSampledSpan?: number;
  /** The worker process's CPU per delivered event (µs), medians, by variant: steadier than the rates. */
  cpuUsPerEvent?: Partial<Record<ObservabilityVariant, number>>;
  /**
   * Business transactions with an event per second, 4 clients, medians: off against api (no SDK), and
   * off against on with the SDK registered, each transaction in a span of the application's own.
   */
  enqueueOff: number;
  enqueueApi: number;
  enqueueOffTraced: number;
  enqueueOn: number;
}

/**
 * The budgets (issue 41): sampled as production samples, with metrics, at most 5% of the drain; at full
 * sampling, what the outbox's tracing adds beyond the SDK's floor (a bare span per event) at most 5
 * points; metrics alone at most 3%.
 */
const MAX_SAMPLED_COST = 0.05;
const MAX_BEYOND_FLOOR = 0.05;
const MAX_METRICS_COST = 0.03;

export function observabilityReport(results: Record<string, unknown>, dbs: Db[]): string {
  const f = (n: number, digits = 0) =>
    n.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits });
  const cost = (off: number, on: number) => 1 - on / off;
  const pct = (off: number, on: number) => `${f(cost(off, on) * 100, 1)}%`;
  const verdict = (ok: boolean) => (ok ? 'PASS' : 'FAIL');
  const rows: string[] = [];
  let events: number | undefined;
  for (const db of dbs) {
    const o = (results[db] as { observability?: ObservabilityResult } | undefined)?.observability;
    if (o?.enqueueOff === undefined) continue;
    events ??= o.drainEvents;
    const alone = (v: number | undefined) => (v === undefined ? '—' : `${f(v)} (${pct(o.drainOff, v)})`);
    const checks: string[] = [];
    if (o.drainSampled !== undefined) {
      checks.push(
        `sampled ≤ ${MAX_SAMPLED_COST * 100}%: ${verdict(cost(o.drainOff, o.drainSampled) <= MAX_SAMPLED_COST)}`,
      );
    }
    if (o.drainTracing !== undefined && o.drainSpan !== undefined) {
      const beyond = cost(o.drainOff, o.drainTracing) - cost(o.drainOff, o.drainSpan);
      checks.push(
        `tracing − floor ${f(beyond * 100, 1)} ≤ ${MAX_BEYOND_FLOOR * 100}: ${verdict(beyond <= MAX_BEYOND_FLOOR)}`,
      );
    }
    if (o.drainMetrics !== undefined) {
      checks.push(
        `metrics ≤ ${MAX_METRICS_COST * 100}%: ${verdict(cost(o.drainOff, o.drainMetrics) <= MAX_METRICS_COST)}`,
      );
    }
    rows.push(
      `| ${db} | drain, 1 worker × 500 (events/s) | ${f(o.drainOff)} | ${f(o.drainApi)} (${pct(o.drainOff, o.drainApi)}) | ${alone(o.drainTracing)} | ${alone(o.drainMetrics)} | ${f(o.drainOn)} (${pct(o.drainOff, o.drainOn)}) | ${alone(o.drainSampled)} | ${alone(o.drainSpan)} | ${alone(o.drainSampledSpan)} | ${checks.join('; ')} |`,
      `| ${db} | enqueue, business change + event (tx/s) | ${f(o.enqueueOff)} | ${f(o.enqueueApi)} (${pct(o.enqueueOff, o.enqueueApi)}) | — | — | ${f(o.enqueueOn)} (${pct(o.enqueueOffTraced, o.enqueueOn)} of ${f(o.enqueueOffTraced)}) | — | — | — | reported |`,
    );
  }
  if (rows.length === 0) return '';
  return [
    '',
    `Observability: the same drain${events ? ` (of ${f(events)} events)` : ''} and enqueue with neither tracing nor metrics (\`tracing: false\`), with the defaults`,
    'and `@opentelemetry/api` installed but no SDK registered, and with both on (an SDK registered with a batch span',
    "processor and an exporter that drops everything; the outbox's Prometheus metrics on a registry nobody scrapes),",
    'and for the drain each of the two alone, both with the SDK sampling as production does',
    `(\`ParentBased(TraceIdRatioBased(${SAMPLED_RATIO}))\`), rounds interleaved (each round starting one variant later). The`,
    "floor columns are the SDK's own: the outbox's tracing off and the handler starting and ending one span of its own",
    'per event, every one sampled or under the same sampler as the sampled column (no metrics). The enqueue with',
    "both on runs each transaction in a span of the application's own, and is compared",
    'with tracing off under the same SDK and span. Every drain process first runs a nestjs-cls context, as any',
    "application that publishes has (its transactions run in one): Node's async context tracking is on in all variants.",
    '',
    '| database | measure | neither | API, no SDK (cost) | tracing alone (cost) | metrics alone (cost) | tracing + metrics (cost) | sampled 0.1 + metrics (cost) | SDK floor: a span per event (cost) | SDK floor sampled 0.1 (cost) | targets |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |',
    ...rows,
    '',
  ].join('\n');
}
