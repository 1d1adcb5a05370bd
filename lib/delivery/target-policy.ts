import { LIMITS } from '../outbox.constants';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { OutboxRoute, OutboxTransport } from '../interfaces/outbox-transport.interface';
import type {
  OutboxRetryOptions,
  OutboxWorkerOptions,
  ResolvedRoute,
  TargetRetry,
} from '../interfaces/outbox-options.interface';
import { describeValue } from '../utils/describe-value';
import { leaseMarginMs } from '../utils/lease-margin';
import { integerOption, isPlainObject, optionSection } from '../utils/option-checks';
import { validateTopicPattern } from '../utils/topic';

/**
 * Where events go besides handlers (the `routes` option), and the per-target policy (timeout, backoff bounds, attempts) of handlers
 * and routes: resolved from the module options once, at start-up.
 */
const ROUTE_KEYS = ['topic', 'transport', 'options', 'timeoutMs', 'retry', 'concurrency'];

/** Resolves the per-target timeout, backoff bounds and concurrency of a handler or a route against the defaults. */
export function targetPolicy(
  option: (key: string) => string,
  given: {
    timeoutMs?: unknown;
    retry?: { initialDelayMs?: unknown; maxDelayMs?: unknown; maxAttempts?: unknown };
    concurrency?: unknown;
  },
  worker: Required<OutboxWorkerOptions>,
  retry: Required<OutboxRetryOptions>,
): { timeoutMs: number; retry: TargetRetry; concurrency: number } {
  const max = maxHandlerTimeoutMs(worker);
  const timeoutMs = integerOption(option('timeoutMs'), given.timeoutMs, worker.handlerTimeoutMs, 1, max);
  if (!worker.renewLease) assertTimeoutBelowLease(option('timeoutMs'), timeoutMs, worker.leaseMs);
  if (given.retry !== undefined && (typeof given.retry !== 'object' || given.retry === null)) {
    throw new OutboxConfigurationError(option('retry'), `expected an object, got ${describeValue(given.retry)}`);
  }
  const initialDelayMs = integerOption(
    option('retry.initialDelayMs'),
    given.retry?.initialDelayMs,
    retry.initialDelayMs,
    0,
    LIMITS.retryDelayMs.max,
  );
  const maxDelayMs = integerOption(
    option('retry.maxDelayMs'),
    given.retry?.maxDelayMs,
    Math.max(retry.maxDelayMs, initialDelayMs),
    initialDelayMs,
    LIMITS.retryDelayMs.max,
  );
  // Capped by the module's: the claim dead-letters by the module's count (an attempt that outlived its
  // lease), and an operator lowering it (to 1 in tests, say) lowers it for every target.
  const maxAttempts = Math.min(
    retry.maxAttempts,
    integerOption(
      option('retry.maxAttempts'),
      given.retry?.maxAttempts,
      retry.maxAttempts,
      LIMITS.maxAttempts.min,
      LIMITS.maxAttempts.max,
    ),
  );
  const concurrency = integerOption(option('concurrency'), given.concurrency, worker.targetConcurrency, 1, 1000);
  return { timeoutMs, retry: { initialDelayMs, maxDelayMs, maxAttempts }, concurrency };
}

export function resolveRoutes(
  value: unknown,
  transports: OutboxTransport[],
  worker: Required<OutboxWorkerOptions>,
  retry: Required<OutboxRetryOptions>,
): ResolvedRoute[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) {
    throw new OutboxConfigurationError('routes', `expected an array of routes, got ${describeValue(value)}`);
  }
  const known = transports.map((t) => t.name);
  return value.map((route, i) => {
    const where = `routes[${i}]`;
    const r = optionSection(where, route, ROUTE_KEYS) as Partial<OutboxRoute>;
    const problem = validateTopicPattern(r.topic);
    if (problem) throw new OutboxConfigurationError(`${where}.topic`, problem);
    if (typeof r.transport !== 'string' || !known.includes(r.transport)) {
      throw new OutboxConfigurationError(
        `${where}.transport`,
        `unknown transport ${typeof r.transport === 'string' ? `"${r.transport}"` : describeValue(r.transport)}; the module's transports are: ${known.join(', ') || '(none)'}`,
      );
    }
    if (r.options !== undefined && !isPlainObject(r.options)) {
      throw new OutboxConfigurationError(`${where}.options`, `expected an object, got ${describeValue(r.options)}`);
    }
    const resolved = { ...r, ...targetPolicy((key) => `${where}.${key}`, r, worker, retry) } as ResolvedRoute;
    try {
      transports.find((t) => t.name === r.transport)!.validateRoute?.(resolved);
    } catch (error) {
      throw new OutboxConfigurationError(`${where}.options`, (error as Error).message);
    }
    return resolved;
  });
}

/**
 * The longest handler timeout: with lease renewal, the lease is extended while the handler runs and
 * only `LIMITS.handlerTimeoutMs` bounds it; without, it must fit in the lease (see below).
 */
export function maxHandlerTimeoutMs(worker: { renewLease: boolean; leaseMs: number }): number {
  return worker.renewLease ? LIMITS.handlerTimeoutMs.max : worker.leaseMs;
}

/**
 * Without lease renewal, a handler still running when its lease ends would run twice; a timeout below
 * the lease (with a margin for the acknowledgement) prevents that.
 */
export function assertTimeoutBelowLease(option: string, timeoutMs: number, leaseMs: number): void {
  const margin = leaseMarginMs(leaseMs);
  if (timeoutMs > leaseMs - margin) {
    throw new OutboxConfigurationError(
      option,
      `the handler timeout (${timeoutMs} ms) must be shorter than worker.leaseMs (${leaseMs} ms) ` +
        `by at least ${margin} ms, or the lease could expire while the handler runs; ` +
        'lower the timeout, raise worker.leaseMs, or turn worker.renewLease on',
    );
  }
}
