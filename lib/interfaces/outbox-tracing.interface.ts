import type { PublishResult } from './outbox-message.interface';

/** The `tracing` option, as an object (see docs/observability.md, "Tracing"). */
export interface OutboxTracingOptions {
  /**
   * `true`: each delivery attempt's span starts a trace of its own, linked to the span that published
   * the event, instead of continuing the publisher's trace as its child. For events delivered long
   * after the request that published them, where one trace would span hours. Default `false`.
   */
  link?: boolean;
  /**
   * `false`: no span at `publish()`; the attempt's span continues the caller's span directly. Default
   * `true`: each `publish()`/`publishMany()` call is a producer span `create <topic>` (`create` for a batch
   * of several topics), the parent of its events' attempts.
   */
  publishSpans?: boolean;
}

/** What the outbox traces with, once its option is resolved (internal). */
export interface OutboxTracer {
  /**
   * One `publish()`/`publishMany()` call of `items` (as given: not yet validated): runs `insert` (inside
   * the call's producer span, when there is one) with the trace context to store beside (never in) each
   * event's headers: JSON, undefined when there is none; what does not fit is left out, never refused.
   */
  publish(
    items: readonly unknown[],
    insert: (traceContext: string | undefined) => Promise<PublishResult[]>,
  ): Promise<PublishResult[]>;
  /**
   * Starts the span of one delivery attempt of `event`, from the context captured at publish; none
   * while the application has registered no tracer provider, nor when its sampler drops the span.
   */
  startAttempt(event: TracedEvent): OutboxAttemptSpan | undefined;
  /**
   * What a transport forwards: `headers` with the active context (the attempt's span), or without a
   * span, the event's stored `traceContext`.
   */
  forward(headers: Record<string, string>, traceContext: Record<string, string> | null): Record<string, string>;
}

/** What a delivery attempt's span is made from. */
export interface TracedEvent {
  readonly id: string;
  readonly topic: string;
  readonly headers: Record<string, string>;
  /** The publisher's context, as captured at publish; null for none. */
  readonly traceContext: Record<string, string> | null;
  readonly attempts: number;
}

/** How an attempt ended, as its span's `outbox.outcome` says. */
export type OutboxAttemptOutcome =
  | 'success'
  | 'retried'
  | 'dead-lettered'
  | 'lease-lost'
  | 'not-recorded'
  /** Every target that ran succeeded; the others were full (their `concurrency`) and wait in the table. */
  | 'deferred';

/** The span of one delivery attempt (internal). */
export interface OutboxAttemptSpan {
  /** Runs `fn` with the span active: the handler's spans, and what it publishes, nest under it. */
  run<T>(fn: () => T): T;
  /** Records a target's error on the span (redacted as everything the outbox reports of errors). */
  failed(target: string, error: unknown): void;
  end(outcome: OutboxAttemptOutcome): void;
}
