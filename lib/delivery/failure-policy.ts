import { type ClaimedEvent, noAttemptLeft } from '../interfaces/claimed-event.interface';
import { OutboxNonRetryableError, OutboxRetryLaterError } from '../errors/outbox.errors';
import { LIMITS } from '../outbox.constants';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import { backoffDelayMs } from '../utils/backoff';
import type { HandlerOutcome } from './handler-invoker';

/** The longest error text stored on an event. */
export const MAX_ERROR_LENGTH = 4000;

// eslint-disable-next-line no-control-regex
const NUL = /\u0000/g;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * An error text as every database stores it: PostgreSQL's text refuses NUL (the whole failure write
 * failed, and the event waited out its lease instead of its backoff) and SQLite ends the text there,
 * so NUL is written as the escape a JSON parser quotes it with; a lone surrogate, which is no Unicode,
 * becomes U+FFFD; and the text is cut to `MAX_ERROR_LENGTH` at a code point, never inside a pair.
 */
export function storableError(text: string): string {
  // Megabytes of text cost only what is kept.
  const clean = text
    .slice(0, MAX_ERROR_LENGTH + 1)
    .replace(NUL, '\\u0000')
    .replace(LONE_SURROGATE, '\ufffd');
  if (clean.length <= MAX_ERROR_LENGTH) return clean;
  const cut = clean.slice(0, MAX_ERROR_LENGTH);
  return /[\ud800-\udbff]$/.test(cut) ? cut.slice(0, -1) : cut;
}

/** What to record for an event some of whose targets failed (or that had none). */
export interface FailureDecision {
  /** The text stored in `last_error`, not yet cut to `MAX_ERROR_LENGTH`. */
  errorText: string;
  /** The targets done so far, this attempt's successes included: a retry runs only the others. */
  completedHandlers: string[];
  deadLetter: boolean;
  /** Dead-lettered because a target threw `OutboxNonRetryableError`, whatever attempts are left. */
  nonRetryable: boolean;
  /** The attempts allowed: the fewest among the failed targets' (`retry.maxAttempts` without targets). */
  maxAttempts: number;
  retryDelayMs: number;
}

/**
 * Decides an event's failure: dead letter on a non-retryable error or on the last attempt, else a
 * retry after the backoff of the failed targets. `targetCount` is how many targets the topic has;
 * none is a failure too. Each target's error is written by `errors`.
 */
export function decideFailure(
  event: ClaimedEvent,
  targetCount: number,
  outcomes: HandlerOutcome[],
  retry: ResolvedOutboxOptions['retry'],
  errors: OutboxErrorText,
): FailureDecision {
  const failures = outcomes.filter((o) => 'error' in o);
  const succeeded = outcomes.filter((o) => !('error' in o)).map((o) => o.handler.name);
  const errorText =
    targetCount === 0
      ? `no handler or route for topic "${event.topic}" in this application`
      : failures.map((f) => `${f.handler.name}: ${errors.describe(f.error)}`).join('; ');
  const nonRetryable = failures.some((f) => f.error instanceof OutboxNonRetryableError);
  const policies = failures.length > 0 ? failures.map((f) => f.handler.retry) : [retry];
  const maxAttempts = Math.min(...policies.map((policy) => policy.maxAttempts));
  // A target may name its own delay (Retry-After); the longest wish among the failures wins.
  const retryDelayMs = Math.max(
    ...policies.map((policy) => backoffDelayMs(event.attempts, policy)),
    ...failures.map((f) =>
      f.error instanceof OutboxRetryLaterError ? Math.min(f.error.retryAfterMs, LIMITS.retryDelayMs.max) : 0,
    ),
  );
  return {
    errorText,
    completedHandlers: [...event.completedHandlers, ...succeeded],
    deadLetter: nonRetryable || noAttemptLeft(event.attempts, maxAttempts),
    nonRetryable,
    maxAttempts,
    retryDelayMs,
  };
}

/**
 * Why the claim dead-lettered an event: its last attempt outlived the lease (the note says so, and the
 * error of the attempt before, if any, follows), or no attempt is left after a recorded failure.
 */
export function deadLetterReason(event: ClaimedEvent): string {
  if (event.lastExpiredAttempt !== event.attempts) return event.lastError ?? event.note ?? 'no attempt left';
  return event.lastError ? `${event.note}; last error: ${event.lastError}` : String(event.note);
}

/** The error of a claimed row the store could not decode: retrying cannot mend it. */
export function undecodableError(reason: string): string {
  return `the stored row cannot be decoded (${reason}); it was dead-lettered without delivery`;
}
