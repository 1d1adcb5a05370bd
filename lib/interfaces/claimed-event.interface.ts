import type { OutboxEventRecord } from './outbox-event-record.interface';

/*
 * A claimed event and the rules about its attempts, in one place: the claim's SQL (dialects), the
 * failure policy and the claimed batch (delivery) all read them from here.
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
