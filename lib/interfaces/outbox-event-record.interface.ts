/** `waiting`: an event of an ordered key behind an earlier one of its key (see the `ordering` option). */
export type OutboxStatus = 'pending' | 'waiting' | 'delivered' | 'dead';

/** How an attempt that did not succeed ended: a successful attempt is the delivered row itself. */
export type OutboxAttemptOutcome = 'failed' | 'dead' | 'expired' | 'released';

/** One recorded attempt of an event, with the database's times. */
export interface OutboxAttemptRecord {
  attempt: number;
  startedAt: Date | null;
  finishedAt: Date | null;
  outcome: OutboxAttemptOutcome;
  /** The error it recorded (its first 500 characters), for `failed` and `dead`. */
  error: string | null;
  /** The event's redrive count when the attempt ran: 0 before its first redrive. */
  round: number;
}

/** One row of the outbox table, as the worker and the entity read it on every database. */
export interface OutboxEventRecord {
  id: string;
  topic: string;
  key: string | null;
  dedupeKey: string | null;
  payload: unknown;
  headers: Record<string, string>;
  /** `pending` also covers events claimed by a worker (`claimToken` set, lease in `availableAt`). */
  status: OutboxStatus;
  attempts: number;
  /** Due time; while claimed, the end of the lease. */
  availableAt: Date;
  claimToken: string | null;
  /**
   * Names of the targets that succeeded in an earlier attempt that failed as a whole (a retry skips
   * them); left as it was when the event is delivered.
   */
  completedHandlers: string[];
  /** The error the last failed attempt recorded; never overwritten by a lease expiry or a release. */
  lastError: string | null;
  /** How many attempts outlived their lease (the worker stopped, crashed or stalled mid-attempt). */
  expiredAttempts: number;
  /** The number of the last attempt that outlived its lease. */
  lastExpiredAttempt: number | null;
  /** What the outbox itself noted: "attempt 2 of 5 did not finish before its lease expired …". */
  note: string | null;
  createdAt: Date;
  /** When the event was delivered or dead-lettered. */
  processedAt: Date | null;
  /** When its current (or last) attempt was claimed. */
  claimedAt: Date | null;
  /** The last attempts that did not succeed (failed, dead-lettered, expired, given back), oldest first. */
  attemptLog: OutboxAttemptRecord[];
  /** How many times an operator redrove it from the dead letters. */
  redriveCount: number;
  /**
   * Its place in its key's order, for an event of an ordered topic published with a key (see the
   * `ordering` option); `null` for every other event.
   */
  seq: number | null;
  /**
   * The publisher's trace context as its propagators wrote it (W3C `traceparent`, `tracestate`,
   * `baggage`), with tracing on and a trace active at publish; `null` otherwise. Kept apart from
   * `headers`: it is not part of what the event is.
   */
  traceContext: Record<string, string> | null;
}
