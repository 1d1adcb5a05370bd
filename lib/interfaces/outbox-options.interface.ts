import type { DataSource, EntityManager } from 'typeorm';
import type { OutboxErrorText } from './outbox-error-text.interface';
import type { OutboxMetricsOptions, ResolvedMetricsOptions } from './outbox-metrics.interface';
import type { OutboxDeadLetterRecord, RecordedOutboxMessage } from './outbox-message.interface';
import type { OutboxOrdering, ResolvedKeyOrder } from './outbox-ordering.interface';
import type { OutboxTracer, OutboxTracingOptions } from './outbox-tracing.interface';
import type { OutboxRoute, OutboxTransport } from './outbox-transport.interface';
import type { OutboxWakeUpChannel } from './outbox-wake-up.interface';

/**
 * Values that decide which providers and imports exist, so they must be known when the module is
 * declared — also with forRootAsync, where they sit beside `useFactory`.
 */
export interface OutboxModuleExtras {
  /**
   * Make `OutboxService` injectable everywhere without importing the module again. Default `true`; at
   * most one global outbox per application, the others `false`, each injected through its module.
   */
  isGlobal?: boolean;
  /** Table of the outbox. Default `outbox_event`. Must match the entity and migration you register. */
  tableName?: string;
  /** The TypeORM data source: its name as registered with `TypeOrmModule`, or the instance. Default: the default one. */
  dataSource?: string | DataSource;
}

export interface OutboxWorkerOptions {
  /** Schedule the polling worker in this process. `false` for API-only replicas. Default `true`. */
  enabled?: boolean;
  /** How often the worker looks for due events when idle, in ms. Default 1000. */
  pollIntervalMs?: number;
  /**
   * Most events one claim takes. The worker claims again as soon as every event it claimed has started
   * and a lane is free. Default 50.
   */
  batchSize?: number;
  /**
   * Lanes: how many events this instance delivers at the same time, whatever claim they came from. A
   * slow handler holds one lane; the others go on. Default 10.
   */
  concurrency?: number;
  /**
   * The default bound of each handler and route: how many calls of it run at once on this instance
   * (1 to 1000; a target's own `concurrency` option overrides it). An event's share for a target that
   * is full goes back to the table, due when a call of it should have ended, while the event's other
   * targets are delivered. Default one less than `concurrency` (at least 1): no one target can hold
   * every lane.
   */
  targetConcurrency?: number;
  /**
   * How long a claim owns an event before another worker may take it, in ms (1 s to 1 h). With
   * `renewLease`, how soon the events of a worker that died are delivered by another. Default 60000.
   */
  leaseMs?: number;
  /**
   * Extend the lease of the events a worker holds while their handlers run (every third of `leaseMs`,
   * one statement per claimed batch), so a handler may run longer than the lease. An event whose
   * renewal is refused (its lease was lost while the worker or the database stalled) has its handlers'
   * `signal` aborted and its outcome is not written. `false`: every handler timeout must fit in the
   * lease, and an event the lease left cannot cover is given back unstarted. Default `true`.
   */
  renewLease?: boolean;
  /**
   * Default time limit of one handler call, in ms. With `renewLease` up to 24 h (default 30000); without
   * it, shorter than `leaseMs` by the lease margin (default 30000 or half the lease, whichever is less).
   */
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

/**
 * Retention: the worker deletes finished rows once they are old enough, by the database clock, in
 * batches of one short statement each. A dedupe key works only while its row is kept.
 */
export interface OutboxRetentionOptions {
  /** Delivered rows are deleted this long after delivery (`processed_at`), in ms. Default 604800000 (7 days). */
  deliveredMs?: number;
  /** Dead letters are deleted this long after they died, in ms. Default: never (kept until redriven or deleted by you). */
  deadMs?: number;
  /** How often each worker runs a retention pass, in ms. Default 60000. */
  intervalMs?: number;
  /** Most rows one delete statement removes; a pass runs batches until one comes back short. Default 1000. */
  batchSize?: number;
}

/** Returns the transactional `EntityManager` of the caller's context, or `undefined` when there is none. */
export type OutboxTransactionResolver = () => EntityManager | undefined | null;

/** `tableName` and `dataSource` are declared with the module's extras (`forRootAsync` takes them beside `useFactory`). */
export interface OutboxModuleOptions extends Pick<OutboxModuleExtras, 'tableName' | 'dataSource'> {
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
  /**
   * Deletes delivered (and, with `deadMs`, dead) rows after a while, on the worker's schedule. `false`:
   * never (you archive or delete them yourself). Default: delivered rows after 7 days, dead ones kept.
   */
  retention?: false | OutboxRetentionOptions;
  /** Destinations outside the process (brokers, webhooks), each with a unique name. */
  transports?: OutboxTransport[];
  /** Which topics go to which transport; an event goes to every matching route and every handler. */
  routes?: OutboxRoute[];
  /**
   * Topics whose events are delivered per key, one at a time, in commit order (see docs/ordering.md).
   * The first matching entry decides. Default: none, every topic unordered.
   */
  ordering?: OutboxOrdering[];
  /**
   * How the workers of other instances hear of events committed here, sooner than their next poll.
   * Default: PostgreSQL's LISTEN/NOTIFY on PostgreSQL, nothing on MySQL/MariaDB and SQLite. A channel
   * such as `new ClientProxyWakeUp(client)` over the Redis or NATS client the application already has
   * replaces it; `false` turns cross-instance wake-up off (polling alone).
   */
  wakeUp?: OutboxWakeUpChannel | false;
  /**
   * What only the application knows is secret: called with every error text the outbox is about to
   * store on an event (`last_error`, the attempt history), emit (`OutboxEvents`), log, trace or report
   * (health details, operations, `OutboxTesting`'s records), after its own redaction (the user and
   * password of URLs; the values of fields, headers and parameters named like passwords, secrets,
   * tokens, authorization, API keys, cookies or credentials), and with every line the outbox logs.
   * Returns the text to use instead. Keep it quick and idempotent (a log line may hold an error text
   * it cleaned already); if it throws, the text is withheld.
   */
  redactError?: (text: string) => string;
  /** Metrics of deliveries and of the table's state (see docs/observability.md). Default: none. */
  metrics?: OutboxMetricsOptions;
  /**
   * OpenTelemetry tracing (see docs/observability.md): the publisher's trace context kept with each event
   * (its own column, apart from its headers), a consumer span per delivery attempt, the context forwarded by transports. Default: on
   * when `@opentelemetry/api` is installed (it records once the application registers a tracer
   * provider); `true` or an object requires the package; `false` turns it off.
   */
  tracing?: boolean | OutboxTracingOptions;
}

export interface ResolvedOutboxOptions {
  tableName: string;
  dataSource: string | DataSource | undefined;
  transactionResolver: OutboxTransactionResolver | undefined;
  transactionConnectionName: string | undefined;
  worker: Required<OutboxWorkerOptions>;
  retry: Required<OutboxRetryOptions>;
  maxPayloadBytes: number;
  retention: ResolvedRetention | false;
  transports: OutboxTransport[];
  routes: ResolvedRoute[];
  /** The ordered topics and their dead-head policies. */
  ordering: ResolvedKeyOrder;
  /** Undefined: the database's own channel, where it has one. */
  wakeUp: OutboxWakeUpChannel | false | undefined;
  /** Every error text this outbox reports, and its loggers: made with the application's `redactError`. */
  errorText: OutboxErrorText;
  /** Undefined without the `metrics` option. */
  metrics: ResolvedMetricsOptions | undefined;
  /** Undefined when tracing is off. */
  tracing: OutboxTracer | undefined;
  /**
   * Set only by `OutboxTesting.override()`: failures are due again at once (no backoff, no
   * Retry-After), and every handler call is reported to `handlerCalled`.
   */
  testing: OutboxTestingHooks | undefined;
}

export interface OutboxTestingHooks {
  /** After each handler call (routes excluded), with the message it was given and its error, if any. */
  handlerCalled(handler: string, message: RecordedOutboxMessage, error: unknown): void;
  /** After an event was dead-lettered, however it died. */
  eventDeadLettered(record: OutboxDeadLetterRecord): void;
}

export interface ResolvedRetention {
  deliveredMs: number;
  /** `undefined`: dead letters are kept. */
  deadMs: number | undefined;
  intervalMs: number;
  batchSize: number;
}

/** A handler's or route's own retry policy, resolved: its backoff bounds and how many attempts it allows. */
export interface TargetRetry {
  initialDelayMs: number;
  maxDelayMs: number;
  /** Capped by `retry.maxAttempts`: a target may give up sooner, never later. */
  maxAttempts: number;
}

export interface ResolvedRoute extends OutboxRoute {
  timeoutMs: number;
  retry: TargetRetry;
  concurrency: number;
}
