/** Injection token of the resolved, validated options (see `resolveOutboxOptions`). */
export const OUTBOX_OPTIONS = Symbol('outbox:options');
/**
 * The module's options, resolved once: by `forRoot()` when it is called, or by `forRootAsync()`'s factory
 * when Nest runs it. `OUTBOX_OPTIONS` is this value, unless `OutboxTesting.override()` builds it from this.
 */
export const OUTBOX_RESOLVED_OPTIONS = Symbol('outbox:resolved-options');
/** Injection token of the raw options handed to forRoot / returned by the forRootAsync factory. */
export const OUTBOX_RAW_OPTIONS = Symbol('outbox:raw-options');
/** Injection token of the module-definition extras (table name, data source, global flag). */
export const OUTBOX_EXTRAS = Symbol('outbox:extras');
/** Injection token of the outbox's one path of error texts and its loggers (`ResolvedOutboxOptions.errorText`). */
export const OUTBOX_ERROR_TEXT = Symbol('outbox:error-text');
/** Injection token of the store (dialect SQL bound to the data source). */
export const OUTBOX_STORE = Symbol('outbox:store');
/** Metadata key that `@OutboxHandler()` writes on a method. */
export const OUTBOX_HANDLER_METADATA = 'outbox:handler';

export const DEFAULT_TABLE_NAME = 'outbox_event';

/** The ranges options and names are validated against. */
export const LIMITS = {
  leaseMs: { min: 1000, max: 3_600_000 },
  /**
   * The longest handler time limit with lease renewal on (`worker.renewLease`): a day. Without renewal
   * a timeout must fit in the lease instead.
   */
  handlerTimeoutMs: { max: 86_400_000 },
  /** The longest wait before a retry, whoever asks for it (backoff bounds, Retry-After): a day. */
  retryDelayMs: { max: 86_400_000 },
  maxAttempts: { min: 1, max: 100 },
  tableName: /^[a-zA-Z_][a-zA-Z0-9_]{0,47}$/,
} as const;
