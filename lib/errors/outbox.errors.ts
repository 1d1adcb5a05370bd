/** Base class of every error this library throws on purpose. */
export class OutboxError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/**
 * Base class of the errors that mean an HTTP answer (400, 404, 409). They carry the shape of the `http-errors`
 * package — `statusCode`, `status` equal to it, and `expose` (true below 500: the message may reach the client) —
 * because that is what Nest's exception filter maps to an answer for an error that is not an `HttpException`:
 * NestJS 11 reads `statusCode`, NestJS 12 maps only an error that has all three, and answers 500 otherwise.
 */
export abstract class OutboxHttpError extends OutboxError {
  /** The HTTP status that answers this error. */
  abstract readonly statusCode: number;

  /** The same as `statusCode`, as `http-errors` sets it. */
  get status(): number {
    return this.statusCode;
  }

  /** Whether the message may be sent to the client: `http-errors`' rule, true for a 4xx. */
  get expose(): boolean {
    return this.statusCode < 500;
  }
}

/** An option handed to `OutboxModule.forRoot()` / `forRootAsync()` is missing, mistyped or out of range. */
export class OutboxConfigurationError extends OutboxError {
  constructor(
    /** Dotted path of the offending option, e.g. `worker.batchSize`. */
    readonly option: string,
    problem: string,
  ) {
    super(`Invalid outbox option "${option}": ${problem}`);
  }
}

/** The database server is older than the outbox needs (SKIP LOCKED, RETURNING, …). */
export class OutboxUnsupportedDatabaseError extends OutboxError {
  constructor(
    readonly product: string,
    readonly foundVersion: string,
    readonly minimumVersion: string,
  ) {
    super(
      `${product} ${foundVersion || '(unknown version)'} is not supported by the outbox: it needs ${product} ` +
        `${minimumVersion} or newer (for FOR UPDATE SKIP LOCKED and the claim it allows). Upgrade the server.`,
    );
  }
}

/**
 * An argument of `publish()` / `publishMany()` or of an operation is invalid. Nothing was written.
 * Nest's exception filter answers it with HTTP 400.
 */
export class OutboxValidationError extends OutboxHttpError {
  readonly statusCode: number = 400;

  constructor(
    /** Which argument was wrong: `topic`, `key`, `payload`, `headers`, `dedupeKey`, `delayMs`, ... */
    readonly field: string,
    problem: string,
  ) {
    super(`Invalid outbox ${field}: ${problem}`);
  }
}

/** The payload serialises to more bytes than the configured limit. Nothing was written. */
export class OutboxPayloadTooLargeError extends OutboxValidationError {
  constructor(
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(
      'payload',
      `it serialises to ${bytes} bytes of JSON, over the limit of ${limit} bytes; ` +
        'store large data elsewhere and publish a reference to it',
    );
  }
}

/** The headers serialise to more bytes than every backend's headers column holds. Nothing was written. */
export class OutboxHeadersTooLargeError extends OutboxValidationError {
  constructor(
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(
      'headers',
      `they serialise to ${bytes} bytes of JSON, over the limit of ${limit} bytes for all headers together; ` +
        'move large values into the payload',
    );
  }
}

/**
 * `publish()` found no active transaction. The event would not be atomic with the business change,
 * so nothing was written.
 */
export class OutboxTransactionRequiredError extends OutboxError {
  constructor(detail?: string) {
    super(
      'OutboxService.publish() must run inside a database transaction: ' +
        (detail ?? 'no transaction is active in the current context') +
        '. Wrap the call in @Transactional() / TransactionHost.withTransaction() from @nestjs-cls/transactional, ' +
        'or pass { manager } from dataSource.transaction(...).',
    );
  }
}

/**
 * The outbox table is not where the DataSource places it (its `schema` on PostgreSQL, its
 * `entityPrefix`): the migration has not run there. Found at start-up, before anything is written.
 */
export class OutboxTableMissingError extends OutboxError {
  constructor(
    readonly table: string,
    hint: string,
  ) {
    super(`The outbox table ${table} does not exist. ${hint}`);
  }
}

/**
 * The outbox table is at an older schema version than this version of the library needs: a migration
 * of `OutboxMigrations` has not run. Found at start-up, before anything is written.
 */
export class OutboxSchemaOutdatedError extends OutboxError {
  constructor(
    readonly table: string,
    readonly foundVersion: number,
    readonly neededVersion: number,
    readonly missingMigration: string,
  ) {
    super(
      `The outbox table ${table} is at schema version ${foundVersion}; this version of nestjs-typeorm-outbox needs ` +
        `${neededVersion}. Run the missing migration ${missingMigration}: list every outbox migration in your ` +
        "DataSource's migrations (`migrations: [...OutboxMigrations]`, or `...createOutboxMigrations('<table>')`) and " +
        'run them (see docs/upgrading.md in the package).',
    );
  }
}

/**
 * A `dedupeKey` was published again with a different topic, key, payload or headers. Nothing was written.
 * Nest's exception filter answers it with HTTP 409.
 */
export class OutboxDedupeConflictError extends OutboxHttpError {
  readonly statusCode = 409;

  constructor(
    readonly dedupeKey: string,
    readonly existingId: string,
  ) {
    super(
      `An outbox event with dedupeKey "${dedupeKey}" already exists (id ${existingId}) with different content; ` +
        'the original is kept. Use a new dedupe key for a different event.',
    );
  }
}

/**
 * Throw this from an `@OutboxHandler()` to dead-letter the message at once, without further retries
 * (for example when the payload can never be processed).
 */
export class OutboxNonRetryableError extends OutboxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message);
    if (options && 'cause' in options) {
      (this as { cause?: unknown }).cause = options.cause;
    }
  }
}

/**
 * Throw (or reject with) this from a handler or transport to ask for the next attempt no earlier than
 * `retryAfterMs` from now — for example from an HTTP `Retry-After` header. Counts as a failed attempt.
 */
export class OutboxRetryLaterError extends OutboxError {
  constructor(
    message: string,
    readonly retryAfterMs: number,
  ) {
    super(message);
  }
}

/*
 * The reasons a handler's `message.signal` is aborted with: tell them apart with `instanceof`. None is
 * thrown by the library itself; a handler that passes the signal on may see them come back.
 */

/** The handler's time is up (its `timeoutMs`, or `worker.handlerTimeoutMs`): the attempt is recorded as failed with this error. */
export class OutboxHandlerTimeoutError extends OutboxError {
  constructor(readonly timeoutMs: number) {
    super(`handler did not finish within its timeout of ${timeoutMs} ms`);
  }
}

/**
 * The event's lease ran out and another claim took it (a lease renewal found it gone): this attempt's
 * outcome will not be recorded, and another worker may be running the event already.
 */
export class OutboxLeaseLostError extends OutboxError {
  constructor(readonly eventId: string) {
    super(
      `the lease of outbox event ${eventId} was lost (it expired, and another claim took the event); ` +
        'stop the work: this attempt will not be recorded',
    );
  }
}

/**
 * The application is shutting down and `worker.shutdownTimeoutMs` ran out before the handler ended:
 * the event is given back (its attempt counted) and runs again after the restart.
 */
export class OutboxShutdownError extends OutboxError {
  constructor() {
    super('the application is shutting down');
  }
}

/** No event has this id (it never existed, or retention or a discard deleted it). Nest answers it with HTTP 404. */
export class OutboxEventNotFoundError extends OutboxHttpError {
  readonly statusCode = 404;

  constructor(readonly id: string) {
    super(`No outbox event has the id ${id}`);
  }
}

/**
 * An operation left an event unchanged because it was not in the state the operation applies to (a
 * redrive of an event that is no dead letter, or that another call redrove first). Nest answers it
 * with HTTP 409.
 */
export class OutboxStateConflictError extends OutboxHttpError {
  readonly statusCode = 409;

  constructor(
    readonly id: string,
    /** The state the event was in. */
    readonly state: string,
  ) {
    super(`The outbox event ${id} is ${state.replace('_', ' ')}: the operation did not apply to it, nothing changed`);
  }
}

/**
 * A message reached an inbox without a usable outbox message id (none in the transport's metadata, or
 * not a UUID), or with a consumer name out of shape. Nothing was written and the handler did not run.
 * Nest answers it with HTTP 400.
 */
export class OutboxInboxMessageError extends OutboxValidationError {
  constructor(problem: string) {
    super('inbox message', problem);
  }
}

/**
 * A webhook reached an inbox without a valid signature of the configured secret: it was not written
 * and its handler did not run. Nest answers it with HTTP 401.
 */
export class OutboxWebhookSignatureError extends OutboxHttpError {
  readonly statusCode = 401;

  constructor(problem: string) {
    super(`Webhook refused: ${problem}`);
  }
}

/**
 * The admin page refused a request the guards let through: a mutation in read-only mode, without the
 * CSRF token, or from another site. Nothing was written. Nest answers it with HTTP 403.
 */
export class OutboxAdminForbiddenError extends OutboxHttpError {
  readonly statusCode = 403;

  constructor(problem: string) {
    super(`Outbox admin: ${problem}`);
  }
}
