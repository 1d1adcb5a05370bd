import type { OutboxEventRecord } from './outbox-event-record.interface';

/*
 * A claimed event, the rules about its attempts and what a failed attempt writes, in one place: the
 * claim's and the outcomes' SQL (dialects), the failure policy, the claimed batch and the recorder
 * (delivery) all read them from here.
 */

/**
 * What the worker reads of a claimed row, and all a claim returns: every column more is paid for per
 * event (sent, parsed, decoded) on the hottest path.
 */
export type ClaimedEvent = Pick<
  OutboxEventRecord,
  | 'id'
  | 'topic'
  | 'key'
  | 'payload'
  | 'headers'
  | 'status'
  | 'attempts'
  | 'completedHandlers'
  | 'lastError'
  | 'note'
  | 'lastExpiredAttempt'
  | 'createdAt'
  | 'seq'
  | 'traceContext'
>;

/**
 * The dead-letter rule: an event that has had `maxAttempts` attempts has none left. The claim applies
 * it before an attempt (an event whose last attempt ended without an outcome dies unrun), the failure
 * policy after one (the last attempt failed).
 */
export function noAttemptLeft(attempts: number, maxAttempts: number): boolean {
  return attempts >= maxAttempts;
}

/**
 * Whether the attempt before this one ended with its lease expired rather than with a recorded outcome:
 * the claim that took the event back counted it. Such an event may be what stopped the last worker
 * that ran it.
 */
export function previousAttemptExpired(event: ClaimedEvent): boolean {
  return event.lastExpiredAttempt !== null && event.lastExpiredAttempt === event.attempts - 1;
}

/**
 * What a failed attempt writes (the recorder decides it with the failure policy; the fenced fail
 * statement writes it): the stored error, the handlers done so far, and dead, or due again after
 * `retryDelayMs`.
 */
export interface FailureUpdate {
  error: string;
  completedHandlers: string[];
  deadLetter: boolean;
  retryDelayMs: number;
}
