import type { OutboxDialect, StoredEvent } from '../dialects/shared/outbox-dialect.interface';
import { ATTEMPT_LOG_SIZE } from '../dialects/shared/attempt-log';
import type {
  OutboxAttemptView,
  OutboxEventDetails,
  OutboxEventState,
  OutboxEventView,
} from '../interfaces/outbox-operations.interface';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';

/**
 * A row as operations read it. One that cannot be decoded (JSON cut short by MySQL's non-strict
 * `sql_mode`, say) is still shown: its payload as the stored text, so it can be found and discarded.
 */
export function readEvent(
  dialect: OutboxDialect,
  row: Record<string, unknown>,
  errorText: OutboxErrorText,
): { event: StoredEvent; state: OutboxEventState } {
  const state = String(row.op_state) as OutboxEventState;
  try {
    return { event: dialect.decode(row), state };
  } catch (error) {
    const event = dialect.decode({
      ...row,
      payload: 'null',
      headers: '{}',
      completed_handlers: '[]',
      attempt_log: null,
    });
    event.payload = String(row.payload);
    event.note = `${event.note ? `${event.note}; ` : ''}the stored row cannot be decoded: ${errorText.describe(error)}`;
    return { event, state };
  }
}

export function eventView(event: StoredEvent, state: OutboxEventState): OutboxEventView {
  return {
    id: event.id,
    topic: event.topic,
    key: event.key,
    dedupeKey: event.dedupeKey,
    payload: event.payload,
    headers: event.headers,
    status: event.status,
    state,
    attempts: event.attempts,
    succeededEarlier: event.completedHandlers,
    completedHandlers: event.completedHandlers,
    lastError: event.lastError,
    note: event.note,
    dueAt: state === 'due' || state === 'scheduled' ? event.availableAt : null,
    leaseExpiresAt: state === 'in_flight' ? event.availableAt : null,
    createdAt: event.createdAt,
    processedAt: event.processedAt,
    redriveCount: event.redriveCount,
  };
}

function durationMs(startedAt: Date | null, finishedAt: Date | null): number | null {
  return startedAt && finishedAt ? Math.max(0, finishedAt.getTime() - startedAt.getTime()) : null;
}

/**
 * The current attempt, read from the row: the history records only attempts that did not succeed, so
 * a delivered event's last attempt, a running one and one whose lease just expired come from here.
 */
function currentAttempt(
  event: StoredEvent,
  state: OutboxEventState,
): Omit<OutboxAttemptView, 'durationMs'> | undefined {
  const base = { attempt: event.attempts, startedAt: event.claimedAt, error: null, round: event.redriveCount };
  if (state === 'delivered') return { ...base, outcome: 'delivered', finishedAt: event.processedAt };
  if (state === 'in_flight') return { ...base, outcome: 'running', finishedAt: null };
  // Due with a claim token: the lease ran out and no worker has claimed it again yet.
  if (state === 'due' && event.claimToken !== null)
    return { ...base, outcome: 'expired', finishedAt: event.availableAt };
  return undefined;
}

export function eventDetails(event: StoredEvent, state: OutboxEventState): OutboxEventDetails {
  const recorded = event.attemptLog.map((entry) => ({ ...entry }));
  const current = currentAttempt(event, state);
  const all = current ? [...recorded, current] : recorded;
  const history = all
    .slice(-ATTEMPT_LOG_SIZE)
    .map((a) => ({ ...a, durationMs: durationMs(a.startedAt, a.finishedAt) }));
  const inRound = history.filter((a) => a.round === event.redriveCount).length;
  return { ...eventView(event, state), history, historyOmitted: Math.max(0, event.attempts - inRound) };
}
