import { OutboxEventNotFoundError, OutboxStateConflictError } from '../errors/outbox.errors';
import type { OutboxOperationResult } from '../interfaces/outbox-operations.interface';

/**
 * The result of an operation that must have applied to every event it selected, as an endpoint acting
 * on one event wants it: the result itself, or the error of the first event it skipped —
 * `OutboxEventNotFoundError` (HTTP 404 in Nest) for one that does not exist, `OutboxStateConflictError`
 * (HTTP 409) for one in another state (not a dead letter, or changed by another call meanwhile).
 * The events it did change stay changed.
 */
export function requireChanged(result: OutboxOperationResult): OutboxOperationResult {
  const [skipped] = result.skipped;
  if (!skipped) return result;
  if (skipped.reason === 'not-found') throw new OutboxEventNotFoundError(skipped.id);
  throw new OutboxStateConflictError(skipped.id, skipped.reason);
}
