import type { DataSource, EntityManager } from 'typeorm';
import { DEFAULT_TABLE_NAME, LIMITS } from './outbox.constants';
import { OutboxConfigurationError } from './errors/outbox.errors';
import type { OutboxRoute, OutboxTransport } from './interfaces/outbox-transport.interface';
import { assertTimeoutBelowLease, resolveRoutes, resolveTransports } from './outbox.targets';
import { describeValue } from './utils/describe-value';
import { booleanOption, integerOption, isPlainObject, optionSection, rejectUnknownOptions } from './utils/option-checks';

export { LIMITS } from './outbox.constants';

export interface OutboxWorkerOptions {
  /** Schedule the polling worker in this process. `false` for API-only replicas. Default `true`. */
  enabled?: boolean;
  /** How often the worker looks for due events when idle, in ms. Default 1000. */
  pollIntervalMs?: number;
  /** How many events one claim takes. Default 50. */
  batchSize?: number;
  /** How many events of a batch are delivered at the same time. Default 10. */
  concurrency?: number;
  /** How long a claim owns an event before another worker may take it, in ms (1 s to 1 h). Default 60000. */
  leaseMs?: number;
  /** Default time limit of one handler call, in ms. Must be shorter than `leaseMs`. Default 30000. */
  handlerTimeoutMs?: number;
  /** How long `app.close()` waits for in-flight handlers before releasing their events, in ms. Default 10000. */
  shutdownTimeoutMs?: number;
}

export interface OutboxRetryOptions {
  /** Attempts before an event is dead-lettered (1 to 100). Default 10. */
  maxAttempts?: number;
  /** Upper bound of the first retry delay, in ms. Default 1000. */
  initialDelayMs?: number;
  /** Upper bound of any retry delay, in ms. Default 300000 (5 minutes). */
  maxDelayMs?: number;
}

/** Returns the transactional `EntityManager` of the caller's context, or `undefined` when there is none. */
export type OutboxTransactionResolver = () => EntityManager | undefined | null;

export interface OutboxModuleOptions {
  /** Table of the outbox. Default `outbox_event`. Must match the entity and migration you register. */
  tableName?: string;
  /** The TypeORM data source: its name as registered with `TypeOrmModule`, or the instance. Default: the default one. */
  dataSource?: string | DataSource;
  /**
   * How `publish()` finds the caller's transaction when no `manager` is passed. Default: the
   * `TransactionHost` of `@nestjs-cls/transactional` (see `transactionConnectionName`).
   */
  transactionResolver?: OutboxTransactionResolver;
  /** `connectionName` of the `ClsPluginTransactional` to join, when you registered several. */
  transactionConnectionName?: string;
  worker?: OutboxWorkerOptions;
  retry?: OutboxRetryOptions;
  /** Largest serialised payload accepted by `publish()`, in bytes. Default 1 MiB. */
  maxPayloadBytes?: number;
  /** Destinations outside the process (brokers, webhooks), each with a unique name. */
  transports?: OutboxTransport[];
  /** Which topics go to which transport; an event goes to every matching route and every handler. */
  routes?: OutboxRoute[];
}

export interface ResolvedOutboxOptions {
  tableName: string;
  dataSource: string | DataSource | undefined;
  transactionResolver: OutboxTransactionResolver | undefined;
  transactionConnectionName: string | undefined;
  worker: Required<OutboxWorkerOptions>;
  retry: Required<OutboxRetryOptions>;
  maxPayloadBytes: number;
  transports: OutboxTransport[];
  routes: ResolvedRoute[];
}

export interface ResolvedRoute extends OutboxRoute {
  timeoutMs: number;
  retry: { initialDelayMs: number; maxDelayMs: number };
}

export const OUTBOX_DEFAULTS = {
  worker: {
    enabled: true,
    pollIntervalMs: 1000,
    batchSize: 50,
    concurrency: 10,
    leaseMs: 60_000,
    handlerTimeoutMs: 30_000,
    shutdownTimeoutMs: 10_000,
  },
  retry: { maxAttempts: 10, initialDelayMs: 1000, maxDelayMs: 300_000 },
  maxPayloadBytes: 1024 * 1024,
} as const;


const TOP_LEVEL_KEYS = [
  'tableName',
  'dataSource',
  'transactionResolver',
  'transactionConnectionName',
  'worker',
  'retry',
  'maxPayloadBytes',
  'transports',
  'routes',
];

export function validateTableName(tableName: unknown, option = 'tableName'): string {
  if (typeof tableName !== 'string' || !LIMITS.tableName.test(tableName)) {
    throw new OutboxConfigurationError(
      option,
      `expected 1 to 48 characters matching ${LIMITS.tableName.source} (letters, digits, underscore; ` +
        `not starting with a digit), got ${describeValue(tableName)}`,
    );
  }
  return tableName;
}

/**
 * The one place where options are defaulted and validated. `forRoot` and `forRootAsync` both end here,
 * so they cannot drift apart.
 */
export function resolveOutboxOptions(raw: OutboxModuleOptions | undefined): ResolvedOutboxOptions {
  const input: unknown = raw ?? {};
  if (!isPlainObject(input)) {
    throw new OutboxConfigurationError('(options)', `expected an object, got ${describeValue(input)}`);
  }
  rejectUnknownOptions('', input, TOP_LEVEL_KEYS);
  const options = input as OutboxModuleOptions;

  const tableName = validateTableName(options.tableName ?? DEFAULT_TABLE_NAME);

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
  const worker: Required<OutboxWorkerOptions> = {
    enabled: booleanOption('worker.enabled', w.enabled, d.worker.enabled),
    pollIntervalMs: integerOption('worker.pollIntervalMs', w.pollIntervalMs, d.worker.pollIntervalMs, 10, 3_600_000),
    batchSize: integerOption('worker.batchSize', w.batchSize, d.worker.batchSize, 1, 5000),
    concurrency: integerOption('worker.concurrency', w.concurrency, d.worker.concurrency, 1, 1000),
    leaseMs,
    handlerTimeoutMs: integerOption(
      'worker.handlerTimeoutMs',
      w.handlerTimeoutMs,
      // The default timeout follows a short lease down, so `{ leaseMs: 5000 }` alone is valid.
      Math.min(d.worker.handlerTimeoutMs, Math.floor(leaseMs / 2)),
      1,
      LIMITS.leaseMs.max,
    ),
    shutdownTimeoutMs: integerOption(
      'worker.shutdownTimeoutMs',
      w.shutdownTimeoutMs,
      d.worker.shutdownTimeoutMs,
      0,
      600_000,
    ),
  };
  assertTimeoutBelowLease('worker.handlerTimeoutMs', worker.handlerTimeoutMs, leaseMs);

  const r = optionSection('retry', options.retry, Object.keys(d.retry));
  const initialDelayMs = integerOption('retry.initialDelayMs', r.initialDelayMs, d.retry.initialDelayMs, 0, LIMITS.retryDelayMs.max);
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
  return {
    tableName,
    dataSource,
    transactionResolver: options.transactionResolver,
    transactionConnectionName: options.transactionConnectionName,
    worker,
    retry,
    maxPayloadBytes: integerOption('maxPayloadBytes', options.maxPayloadBytes, d.maxPayloadBytes, 1, 64 * 1024 * 1024),
    transports,
    routes: resolveRoutes(options.routes, transports, worker, retry),
  };
}
