import type { EntityManager } from 'typeorm';
/** What a handler receives. */
export interface OutboxMessage<T = unknown> {
  /** The event id (UUIDv7). The same on every attempt: use it to drop duplicates. */
  id: string;
  topic: string;
  /** The key given to `publish()` (see `PublishOptions.key`), or `null`. */
  key: string | null;
  payload: T;
  headers: Record<string, string>;
  /** 1 on the first try. */
  attempt: number;
  /** When the event was written, by the database clock. */
  createdAt: Date;
  /**
   * Aborted when the handler's time is up or the application shuts down. Pass it to `fetch()` and
   * similar calls so a timed-out attempt stops instead of running next to its retry.
   */
  signal: AbortSignal;
  /**
   * For a transactional handler (`@OutboxHandler(topic, { transactional: true })`), the transaction it runs
   * in: its writes, the record of its success and the events it publishes commit together. Code that
   * joins through nestjs-cls (`@Transactional()`, `TransactionHost.tx`, `OutboxService.publish()`) is in
   * it already; pass it where that is not set up. `undefined` for other handlers.
   */
  readonly manager?: EntityManager;
}

/** A message as tests record it (`InMemoryTransport`, `OutboxTesting`): its data, without the `signal`. */
export type RecordedOutboxMessage = Omit<OutboxMessage, 'signal' | 'manager'>;

/**
 * An event as `OutboxTesting` records its death: its data (the `payload` is `undefined` only for a stored
 * row that could not be decoded), the attempt it died at, and the error recorded, as `last_error` holds it.
 */
export interface OutboxDeadLetterRecord<T = unknown> extends Omit<OutboxMessage<T>, 'signal' | 'createdAt'> {
  error: string;
}

export interface OutboxHandlerOptions {
  /**
   * Stable name of this handler, recorded when it succeeds so a retry skips it. Default
   * `ClassName.methodName`; set it before renaming a class or method that has events in flight.
   */
  name?: string;
  /**
   * Time limit of one call, in ms: up to 24 h with `worker.renewLease` (the default), else shorter than
   * `worker.leaseMs`. Default `worker.handlerTimeoutMs`.
   */
  timeoutMs?: number;
  /**
   * Backoff bounds for this handler's failures (the largest among the failed handlers of an event is
   * used), and the attempts it allows, capped by the module's `retry.maxAttempts`; an event is
   * dead-lettered when a handler fails on its own last attempt.
   */
  retry?: { initialDelayMs?: number; maxDelayMs?: number; maxAttempts?: number };
  /**
   * How many calls of this handler run at once on this instance (1 to 1000). An event whose share for
   * this handler finds it full is delivered to its other targets, and its share here goes back to the
   * table, uncounted, due when a call is expected to have ended. Default `worker.targetConcurrency`.
   */
  concurrency?: number;
  /**
   * Runs the handler in a transaction of its own on the outbox's DataSource, and records its success
   * in that transaction before it commits (fenced by the claim): its writes happen exactly once. A
   * failure, a timeout or a lost claim rolls them back. `true`, or `{ isolation }` to choose the
   * isolation level (default `READ COMMITTED`: set on MySQL and MariaDB, PostgreSQL's own default there;
   * SQLite transactions are serializable). See docs/exactly-once.md.
   */
  transactional?: boolean | { isolation?: OutboxIsolationLevel };
}

/** A transaction's isolation level, as TypeORM names it. */
export type OutboxIsolationLevel = 'READ UNCOMMITTED' | 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';

export type OutboxHandlerFn<T = unknown> = (message: OutboxMessage<T>) => Promise<void> | void;

export interface PublishOptions {
  /**
   * A key of your own for the event, such as its aggregate's id (1–255 printable ASCII characters): stored
   * with it, handed to handlers, used as the Kafka message key by `ClientProxyTransport`, searchable with
   * `OutboxOperations.find({ key })`. Nothing orders deliveries by it: events of one key may be delivered
   * concurrently and in any order.
   */
  key?: string;
  /** Idempotent enqueue: the same key and content return the first event's id with `inserted: false`. */
  dedupeKey?: string;
  /** String map handed to handlers and transports. */
  headers?: Record<string, string>;
  /** Deliver no earlier than this many ms after the publishing statement, by the database clock. */
  delayMs?: number;
  /** Deliver no earlier than this instant. */
  availableAt?: Date;
  /** A TypeORM `EntityManager` of an active transaction; default: the ambient transaction. */
  manager?: import('typeorm').EntityManager;
}

export interface PublishResult {
  id: string;
  /** `false` when an event with the same `dedupeKey` and content already existed. */
  inserted: boolean;
}

export interface PublishManyItem<T = unknown> {
  topic: string;
  payload: T;
  key?: string;
  dedupeKey?: string;
  headers?: Record<string, string>;
  delayMs?: number;
  availableAt?: Date;
}

/** Counts of the outbox table by state, by the database clock. */
export interface OutboxCounts {
  /** Not claimed by a live lease: `due` + `scheduled`. */
  pending: number;
  /** Pending and due now: waiting for a worker (alert when this stays above zero). */
  due: number;
  /**
   * Pending but not due yet: delayed (`delayMs`, `availableAt`), backing off after a failure, or (ordered
   * topics) waiting behind an earlier event of its key.
   */
  scheduled: number;
  /** Claimed by a worker whose lease has not expired. */
  inFlight: number;
  delivered: number;
  dead: number;
}
