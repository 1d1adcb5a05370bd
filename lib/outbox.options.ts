import { DataSource } from 'typeorm';
import { DEFAULT_TABLE_NAME, LIMITS } from './outbox.constants';
import { OutboxConfigurationError } from './errors/outbox.errors';
import type {
  OutboxModuleExtras,
  OutboxModuleOptions,
  OutboxRetentionOptions,
  OutboxRetryOptions,
  OutboxWorkerOptions,
  ResolvedOutboxOptions,
  ResolvedRetention,
} from './interfaces/outbox-options.interface';
import { assertTimeoutBelowLease, resolveRoutes } from './delivery/target-policy';
import { resolveTransports } from './transports/transport-registry';
import { describeValue } from './utils/describe-value';
import { ErrorText } from './utils/error-text';
import { validateTableName } from './schema/table-name';
import {
  booleanOption,
  integerOption,
  isPlainObject,
  optionSection,
  rejectUnknownOptions,
} from './utils/option-checks';
import type { OutboxWakeUpChannel } from './interfaces/outbox-wake-up.interface';
import { KeyOrder, resolveOrdering } from './ordering/key-order';
import { resolveMetrics } from './observability/metrics-options';
import { resolveTracing } from './observability/tracing';

export { LIMITS } from './outbox.constants';
export { WITHHELD_ERROR } from './utils/error-text';
export { validateTableName } from './schema/table-name';
export type {
  OutboxModuleExtras,
  OutboxModuleOptions,
  OutboxRetentionOptions,
  OutboxRetryOptions,
  OutboxTransactionResolver,
  OutboxWorkerOptions,
  ResolvedOutboxOptions,
  ResolvedRetention,
  ResolvedRoute,
} from './interfaces/outbox-options.interface';

const DAY_MS = 86_400_000;
/** The longest retention age accepted: ten years, in ms. */
const MAX_RETENTION_MS = 3650 * DAY_MS;

export const OUTBOX_DEFAULTS = {
  worker: {
    enabled: true,
    pollIntervalMs: 1000,
    batchSize: 50,
    concurrency: 10,
    /** One less than `concurrency` (at least 1), whatever `concurrency` is set to. */
    targetConcurrency: 9,
    leaseMs: 60_000,
    renewLease: true,
    handlerTimeoutMs: 30_000,
    shutdownTimeoutMs: 10_000,
  },
  retry: { maxAttempts: 10, initialDelayMs: 1000, maxDelayMs: 300_000 },
  maxPayloadBytes: 1024 * 1024,
  /** `deadMs` has no default: dead letters are kept until you redrive or delete them. */
  retention: { deliveredMs: 7 * DAY_MS, intervalMs: 60_000, batchSize: 1000 },
} as const;

const TOP_LEVEL_KEYS = [
  'tableName',
  'dataSource',
  'transactionResolver',
  'transactionConnectionName',
  'worker',
  'retry',
  'maxPayloadBytes',
  'retention',
  'transports',
  'routes',
  'ordering',
  'wakeUp',
  'redactError',
  'metrics',
  'tracing',
];

/** `forRoot`'s options, defaulted and validated: `forRoot()` calls this once, and its module keeps the result. */
export function resolveOutboxOptions(raw: OutboxModuleOptions | undefined): ResolvedOutboxOptions {
  const options = optionsObject(raw ?? {});
  return resolveChecked(options, validateTableName(options.tableName ?? DEFAULT_TABLE_NAME));
}

/**
 * `forRootAsync`'s options: what its factory returned, with the table and data source declared beside
 * `useFactory`, defaulted and validated once, when Nest runs the factory. `forRootAsync()` checked the
 * table name when it was called.
 */
export function resolveAsyncOutboxOptions(
  returned: OutboxModuleOptions | undefined,
  extras: OutboxModuleExtras,
): ResolvedOutboxOptions {
  return resolveChecked(optionsObject(mergeExtras(returned, extras)), extras.tableName ?? DEFAULT_TABLE_NAME);
}

/**
 * Table and data source shape the module's imports, so forRootAsync takes them beside `useFactory`.
 * A factory may still return a DataSource instance, or repeat the declared values; anything else
 * would silently disagree with the registered entity and is refused.
 */
function mergeExtras(raw: OutboxModuleOptions | undefined, extras: OutboxModuleExtras): OutboxModuleOptions {
  const merged: OutboxModuleOptions = { ...(raw ?? {}) };
  for (const key of ['tableName', 'dataSource'] as const) {
    const declared = extras[key];
    const returned = merged[key];
    const returnedInstance = key === 'dataSource' && returned instanceof DataSource && declared === undefined;
    if (returned !== undefined && returned !== declared && !returnedInstance) {
      throw new OutboxConfigurationError(
        key,
        `with forRootAsync, declare ${key} beside useFactory (OutboxModule.forRootAsync({ ${key}, useFactory })), ` +
          'not in the object the factory returns: it decides which entity and data source the module imports',
      );
    }
    if (declared !== undefined) (merged as Record<string, unknown>)[key] = declared;
  }
  return merged;
}

/** A plain object whose keys are all options. */
function optionsObject(input: unknown): OutboxModuleOptions {
  if (!isPlainObject(input)) {
    throw new OutboxConfigurationError('(options)', `expected an object, got ${describeValue(input)}`);
  }
  rejectUnknownOptions('', input, TOP_LEVEL_KEYS);
  return input;
}

/**
 * The one place where options are defaulted and validated: `forRoot` and `forRootAsync` both end here, so
 * they cannot drift apart. The table name comes checked.
 */
function resolveChecked(options: OutboxModuleOptions, tableName: string): ResolvedOutboxOptions {
  const dataSource = options.dataSource;
  if (
    dataSource !== undefined &&
    typeof dataSource !== 'string' &&
    !(typeof dataSource === 'object' && dataSource !== null && 'createQueryRunner' in dataSource)
  ) {
    throw new OutboxConfigurationError(
      'dataSource',
      `expected a data source name or a TypeORM DataSource, got ${describeValue(dataSource)}`,
    );
  }
  if (options.transactionResolver !== undefined && typeof options.transactionResolver !== 'function') {
    throw new OutboxConfigurationError(
      'transactionResolver',
      `expected a function returning the transactional EntityManager, got ${describeValue(options.transactionResolver)}`,
    );
  }
  if (
    options.transactionConnectionName !== undefined &&
    (typeof options.transactionConnectionName !== 'string' || options.transactionConnectionName === '')
  ) {
    throw new OutboxConfigurationError(
      'transactionConnectionName',
      `expected a non-empty string, got ${describeValue(options.transactionConnectionName)}`,
    );
  }

  const d = OUTBOX_DEFAULTS;
  const w = optionSection('worker', options.worker, Object.keys(d.worker));
  const leaseMs = integerOption('worker.leaseMs', w.leaseMs, d.worker.leaseMs, LIMITS.leaseMs.min, LIMITS.leaseMs.max);
  const renewLease = booleanOption('worker.renewLease', w.renewLease, d.worker.renewLease);
  const concurrency = integerOption('worker.concurrency', w.concurrency, d.worker.concurrency, 1, 1000);
  const worker: Required<OutboxWorkerOptions> = {
    enabled: booleanOption('worker.enabled', w.enabled, d.worker.enabled),
    pollIntervalMs: integerOption('worker.pollIntervalMs', w.pollIntervalMs, d.worker.pollIntervalMs, 10, 3_600_000),
    batchSize: integerOption('worker.batchSize', w.batchSize, d.worker.batchSize, 1, 5000),
    concurrency,
    targetConcurrency: integerOption(
      'worker.targetConcurrency',
      w.targetConcurrency,
      Math.max(1, concurrency - 1),
      1,
      1000,
    ),
    leaseMs,
    renewLease,
    handlerTimeoutMs: integerOption(
      'worker.handlerTimeoutMs',
      w.handlerTimeoutMs,
      // Renewed, the lease says only how soon a dead worker's events go to another: the time limit is
      // the handler's own. Not renewed, it follows a short lease down, so `{ leaseMs: 5000 }` alone is valid.
      renewLease ? d.worker.handlerTimeoutMs : Math.min(d.worker.handlerTimeoutMs, Math.floor(leaseMs / 2)),
      1,
      renewLease ? LIMITS.handlerTimeoutMs.max : LIMITS.leaseMs.max,
    ),
    shutdownTimeoutMs: integerOption(
      'worker.shutdownTimeoutMs',
      w.shutdownTimeoutMs,
      d.worker.shutdownTimeoutMs,
      0,
      600_000,
    ),
  };
  if (!renewLease) assertTimeoutBelowLease('worker.handlerTimeoutMs', worker.handlerTimeoutMs, leaseMs);

  const r = optionSection('retry', options.retry, Object.keys(d.retry));
  const initialDelayMs = integerOption(
    'retry.initialDelayMs',
    r.initialDelayMs,
    d.retry.initialDelayMs,
    0,
    LIMITS.retryDelayMs.max,
  );
  const retry: Required<OutboxRetryOptions> = {
    maxAttempts: integerOption(
      'retry.maxAttempts',
      r.maxAttempts,
      d.retry.maxAttempts,
      LIMITS.maxAttempts.min,
      LIMITS.maxAttempts.max,
    ),
    initialDelayMs,
    maxDelayMs: integerOption(
      'retry.maxDelayMs',
      r.maxDelayMs,
      Math.max(d.retry.maxDelayMs, initialDelayMs),
      initialDelayMs,
      LIMITS.retryDelayMs.max,
    ),
  };

  const transports = resolveTransports(options.transports);
  const errorText = resolveErrorText(options.redactError);
  return {
    tableName,
    dataSource,
    transactionResolver: options.transactionResolver,
    transactionConnectionName: options.transactionConnectionName,
    worker,
    retry,
    maxPayloadBytes: integerOption('maxPayloadBytes', options.maxPayloadBytes, d.maxPayloadBytes, 1, 64 * 1024 * 1024),
    retention: resolveRetention(options.retention),
    transports,
    routes: resolveRoutes(options.routes, transports, worker, retry),
    ordering: new KeyOrder(resolveOrdering(options.ordering)),
    wakeUp: resolveWakeUp(options.wakeUp),
    errorText,
    metrics: resolveMetrics(options.metrics),
    tracing: resolveTracing(options.tracing, errorText),
    testing: undefined,
  };
}

/** The application's `redactError`, checked, made into this outbox's one path of error texts. */
function resolveErrorText(value: unknown): ErrorText {
  if (value !== undefined && typeof value !== 'function') {
    throw new OutboxConfigurationError(
      'redactError',
      `expected a function (text: string) => string, got ${describeValue(value)}`,
    );
  }
  return new ErrorText(value as ((text: string) => string) | undefined);
}

const WAKE_UP_METHODS = ['start', 'notify', 'listen', 'close'] as const;

/** `false`, a channel (every method present), or undefined: the database's own where it has one. */
function resolveWakeUp(value: unknown): OutboxWakeUpChannel | false | undefined {
  if (value === undefined || value === false) return value;
  const missing = WAKE_UP_METHODS.find((m) => typeof (value as Record<string, unknown> | null)?.[m] !== 'function');
  if (missing !== undefined) {
    throw new OutboxConfigurationError(
      'wakeUp',
      `expected false or a wake-up channel (e.g. new ClientProxyWakeUp(client)) with ${WAKE_UP_METHODS.join(', ')}; ` +
        `got ${describeValue(value)}${typeof value === 'object' && value !== null ? ` without ${missing}()` : ''}`,
    );
  }
  return value as OutboxWakeUpChannel;
}

/** `false` (retention off), or every value of `retention` checked and defaulted. */
function resolveRetention(value: unknown): ResolvedRetention | false {
  if (value === false) return false;
  if (value !== undefined && !isPlainObject(value)) {
    throw new OutboxConfigurationError(
      'retention',
      `expected false (keep every row) or an object such as { deliveredMs: 604800000 }, got ${describeValue(value)}`,
    );
  }
  const d = OUTBOX_DEFAULTS.retention;
  const keys: Array<keyof OutboxRetentionOptions> = ['deliveredMs', 'deadMs', 'intervalMs', 'batchSize'];
  const r = optionSection('retention', value, keys);
  return {
    deliveredMs: integerOption('retention.deliveredMs', r.deliveredMs, d.deliveredMs, 1000, MAX_RETENTION_MS),
    deadMs: r.deadMs === undefined ? undefined : integerOption('retention.deadMs', r.deadMs, 0, 1000, MAX_RETENTION_MS),
    intervalMs: integerOption('retention.intervalMs', r.intervalMs, d.intervalMs, 1000, DAY_MS),
    batchSize: integerOption('retention.batchSize', r.batchSize, d.batchSize, 1, 10_000),
  };
}
