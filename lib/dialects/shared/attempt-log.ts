import type { OutboxAttemptOutcome, OutboxAttemptRecord } from '../../interfaces/outbox-event-record.interface';

/** How many attempts an event's history keeps: the latest, the older ones dropped one by one. */
export const ATTEMPT_LOG_SIZE = 20;
/** How much of an attempt's error its history entry keeps (`last_error` keeps up to 4000 characters). */
export const LOGGED_ERROR_LENGTH = 500;

/** One entry of `attempt_log`, as stored (times as the database wrote them into JSON). */
export interface StoredAttempt {
  attempt: number;
  startedAt: string | null;
  finishedAt: string | null;
  outcome: OutboxAttemptOutcome;
  error: string | null;
  round: number;
}

/** The SQL of one entry's fields: column references, parameters or the database clock. */
export interface AttemptEntrySql {
  attempt: string;
  startedAt: string;
  finishedAt: string;
  outcome: string;
  /** NULL (no error) as each database types it, or an expression. */
  error: string | null;
  round: string;
}

/** A dialect's JSON functions for the attempt log. */
export interface AttemptLogSql {
  /** A JSON object of the entry's fields. */
  object(entry: AttemptEntrySql): string;
  /** `log` (NULL when empty) with `entry` appended, its oldest entry dropped when it already holds ATTEMPT_LOG_SIZE. */
  append(log: string, entry: string): string;
}

/** The expression that appends an attempt to the `attempt_log` of the row being updated. */
export function appendAttempt(json: AttemptLogSql, log: string, entry: AttemptEntrySql): string {
  return json.append(log, json.object(entry));
}

function parseTime(value: unknown): Date | null {
  if (value == null) return null;
  // MySQL's JSON carries DATETIME(6) as "YYYY-MM-DD HH:MM:SS.ffffff", in UTC; the others ISO-8601 text.
  const text = value as string;
  return new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(text) ? text : `${text.replace(' ', 'T')}Z`);
}

/** Decodes `attempt_log` (JSON text, or parsed already by the driver); NULL is an empty history. */
export function decodeAttemptLog(value: unknown): OutboxAttemptRecord[] {
  if (value == null) return [];
  const entries = (typeof value === 'string' ? JSON.parse(value) : value) as StoredAttempt[];
  return entries.map((e) => ({
    attempt: Number(e.attempt),
    startedAt: parseTime(e.startedAt),
    finishedAt: parseTime(e.finishedAt),
    outcome: e.outcome,
    error: e.error ?? null,
    round: Number(e.round ?? 0),
  }));
}
