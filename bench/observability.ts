/**
 * What observability costs (issue 27), in the same run as without it: the drain and the enqueue with
 * the outbox's Prometheus metrics on (a registry nobody scrapes) against off.
 */
import type { Db } from './env';

/** What a bench child and app add to the outbox's options for metrics on (bench/child.ts reads it). */
export const METRICS_ENV = { OUTBOX_BENCH_METRICS: '1' };

/** The outbox options of metrics on: a registry of its own, which nobody scrapes. */
export function metricsOption(on: boolean): Record<string, unknown> {
  if (!on) return {};
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded only for metrics on, as the library does
  const { Registry } = require('prom-client') as typeof import('prom-client');
  return { metrics: { prometheus: new Registry() } };
}

export interface ObservabilityResult {
  /** Events per second, 1 worker × batch 500, medians. */
  drainOff: number;
  drainOn: number;
  /** Business transactions with an event per second, 4 clients, medians. */
  enqueueOff: number;
  enqueueOn: number;
}

/** The budget: tracing and metrics together cost at most 10% of the drain. */
const MAX_COST = 0.1;

export function observabilityReport(results: Record<string, unknown>, dbs: Db[]): string {
  const f = (n: number, digits = 0) =>
    n.toLocaleString('en', { maximumFractionDigits: digits, minimumFractionDigits: digits });
  const rows: string[] = [];
  for (const db of dbs) {
    const o = (results[db] as { observability?: ObservabilityResult } | undefined)?.observability;
    if (!o) continue;
    const cost = (off: number, on: number) => 1 - on / off;
    const d = cost(o.drainOff, o.drainOn);
    const e = cost(o.enqueueOff, o.enqueueOn);
    rows.push(
      `| ${db} | drain, 1 worker × 500 (events/s) | ${f(o.drainOff)} | ${f(o.drainOn)} | ${f(d * 100, 1)}% | ≤ ${MAX_COST * 100}%: ${d <= MAX_COST ? 'PASS' : 'FAIL'} |`,
      `| ${db} | enqueue, business change + event (tx/s) | ${f(o.enqueueOff)} | ${f(o.enqueueOn)} | ${f(e * 100, 1)}% | reported |`,
    );
  }
  if (rows.length === 0) return '';
  return [
    '',
    "Observability: the same drain and enqueue with the outbox's Prometheus metrics on (a registry of its own, not",
    'scraped) against off, rounds interleaved.',
    '',
    '| database | measure | metrics off | metrics on | cost | target |',
    '| --- | --- | ---: | ---: | ---: | --- |',
    ...rows,
    '',
  ].join('\n');
}
