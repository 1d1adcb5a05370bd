import type { OutboxMessage } from './outbox-message.interface';

/** Where a route sends a topic's events. */
export interface OutboxRoute {
  /**
   * Topic pattern, in segments separated by dots: exact (`order.placed`), `*` for exactly one segment
   * (`order.*`), `#` for any number of segments, also none (`order.#`, `#`).
   */
  topic: string;
  /** Name of one of the module's `transports`. */
  transport: string;
  /** Transport-specific settings of this route (for example the webhook `url`). */
  options?: Record<string, unknown>;
  /** Time limit of one send, in ms; shorter than `worker.leaseMs`. Default `worker.handlerTimeoutMs`. */
  timeoutMs?: number;
  /**
   * Backoff bounds for this route's failures, and the attempts it allows (capped by `retry.maxAttempts`:
   * the event is dead-lettered when it fails here on its `maxAttempts`-th attempt).
   */
  retry?: { initialDelayMs?: number; maxDelayMs?: number; maxAttempts?: number };
  /**
   * How many sends of this route run at once on this instance (1 to 1000); an event's share that finds
   * it full waits in the table while its other targets are delivered. Default `worker.targetConcurrency`.
   */
  concurrency?: number;
}

/**
 * Delivers a message somewhere outside the process (a broker, a webhook). Resolving means the
 * destination accepted it (confirmed, where the destination can confirm); rejecting means "retry
 * later"; rejecting with `OutboxNonRetryableError` dead-letters the event; rejecting with
 * `OutboxRetryLaterError` asks for a delay (for example from a `Retry-After` header).
 */
export interface OutboxTransport {
  /** Unique among the module's transports; routes refer to it. */
  readonly name: string;
  /** Sends one message. Honour `message.signal`: it aborts when the send's time is up or the app stops. */
  send(message: OutboxMessage, route: OutboxRoute): Promise<void>;
  /**
   * Optional batch delivery: the messages the worker is delivering at the same moment (up to
   * `worker.concurrency`) in one call — one broker round trip instead of many. Settle one result per
   * item, in order; each is judged like the outcome of `send`.
   */
  sendMany?(items: Array<{ message: OutboxMessage; route: OutboxRoute }>): Promise<PromiseSettledResult<void>[]>;
  /**
   * Checks a route's `options` at start-up; throw (with a message saying what is wrong) to stop the
   * application instead of failing every event of the route later.
   */
  validateRoute?(route: OutboxRoute): void;
  /** Called once when the application has started, before the first send. */
  onApplicationBootstrap?(): Promise<void> | void;
  /** Called once when the application stops, after the worker drained. */
  beforeApplicationShutdown?(): Promise<void> | void;
}
