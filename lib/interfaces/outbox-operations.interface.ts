import type { OutboxAttemptOutcome, OutboxEventRecord } from './outbox-event-record.interface';

/**
 * Where an event stands, by the database clock: `due` (pending, its time has come — an expired lease
 * included), `scheduled` (pending, its time ahead: delayed or backing off), `in_flight` (claimed by a
 * live lease), `waiting` (an event of an ordered key behind an earlier one of its key, see the
 * `ordering` option), `delivered`, `dead`. `pending` in a filter means `due` or `scheduled`.
 */
export type OutboxEventState = 'due' | 'scheduled' | 'in_flight' | 'waiting' | 'delivered' | 'dead';

/** Which events: every field narrows the selection (AND); an empty filter is every event. */
export interface OutboxEventFilter {
  status?: OutboxEventState | 'pending' | Array<OutboxEventState | 'pending'>;
  /** An exact topic, or a route pattern: `*` one dot-separated segment, `#` any number of them. */
  topic?: string;
  key?: string;
  /** One id or up to 1000. */
  id?: string | string[];
  dedupeKey?: string;
  /** Text in the last error or the outbox's note (1–255 characters), ignoring the case of A–Z. */
  errorContains?: string;
  createdAfter?: Date;
  createdBefore?: Date;
  /** Delivered or dead-lettered within this range. */
  processedAfter?: Date;
  processedBefore?: Date;
}

export interface OutboxPageRequest {
  /** Events per page: 1 to 500, default 50. */
  limit?: number;
  /** `nextCursor` of the page before; it belongs to the same filter and order. */
  cursor?: string;
  /** By id, which is a UUIDv7 (its creation time first): `newest` (the default) or `oldest` first. */
  order?: 'newest' | 'oldest';
}

/** One event as operations see it: the stored fields they share with the row, and where it stands. */
export interface OutboxEventView extends Pick<
  OutboxEventRecord,
  | 'id'
  | 'topic'
  | 'key'
  | 'dedupeKey'
  | 'payload'
  | 'headers'
  | 'status'
  | 'lastError'
  | 'createdAt'
  | 'processedAt'
  | 'redriveCount'
> {
  state: OutboxEventState;
  /** Attempts counted since it was published or last redriven. */
  attempts: number;
  /**
   * The handlers and routes that succeeded in an earlier attempt, one that failed as a whole or whose
   * other targets were full (their `concurrency`): a retry runs only the others. `[]` for an event delivered at its first attempt — all of its targets
   * succeeded then, and none was left for later.
   */
  succeededEarlier: string[];
  /** @deprecated The same list as `succeededEarlier`, under the name that read as "no handler ran"; removed in 1.0. */
  completedHandlers: string[];
  /** What the outbox itself noted (a lease that expired, a last attempt given back). */
  note: string | null;
  /** When it is (or was) due: set for `due` and `scheduled` events. */
  dueAt: Date | null;
  /** When the worker's lease on it expires: set for `in_flight` events. */
  leaseExpiresAt: Date | null;
}

export interface OutboxEventPage {
  items: OutboxEventView[];
  /** Pass it back as `cursor` for the next page; null on the last page. */
  nextCursor: string | null;
}

/** One attempt in an event's history. */
export interface OutboxAttemptView {
  attempt: number;
  /** Outcomes recorded as they happened, plus `delivered` and `running` read from the event itself. */
  outcome: OutboxAttemptOutcome | 'delivered' | 'running';
  startedAt: Date | null;
  finishedAt: Date | null;
  durationMs: number | null;
  error: string | null;
  /** How many redrives came before it: 0 for attempts before the first redrive. */
  round: number;
}

export interface OutboxEventDetails extends OutboxEventView {
  /** The last attempts, oldest first (the history keeps 20; older ones are dropped, not lost from `attempts`). */
  history: OutboxAttemptView[];
  /** Attempts since the last redrive that the history no longer holds (dropped as it filled up, or made before it existed). */
  historyOmitted: number;
}

/**
 * Which events an operation applies to: listed ids (up to 1000), every event a filter selects, or a
 * failure group of `failureGroups()`. Each operation also checks the state it changes, row by row.
 */
export type OutboxSelection =
  { ids: string[] } | { filter: OutboxEventFilter } | { group: { topic: string; fingerprint: string } };

export interface OutboxOperationOptions {
  /** Count what would change, change nothing. */
  dryRun?: boolean;
}

export interface OutboxRedriveOptions extends OutboxOperationOptions {
  /**
   * true (the default): the attempts start again from 0. false: the count is kept, except that an event
   * which used all its attempts gets one more (its count becomes `retry.maxAttempts` − 1).
   */
  resetAttempts?: boolean;
}

/** An event of the selection the operation left as it was, and why. */
export interface OutboxSkippedEvent {
  id: string;
  /** `not-found`: no such event (maybe deleted by retention). Otherwise the state it was in. */
  reason: 'not-found' | OutboxEventState;
}

export interface OutboxOperationResult {
  dryRun: boolean;
  /** Events of the selection in the state the operation changes. */
  matched: number;
  /** Events changed (0 on a dry run). */
  changed: number;
  /** Selected events the operation did not change: listed ids not in that state, or taken by someone else meanwhile. */
  skipped: OutboxSkippedEvent[];
}

/** Dead letters of one topic that failed the same way. */
export interface OutboxFailureGroup {
  topic: string;
  /** Identifies the group for `redrive({ group })` and `discard({ group })`. */
  fingerprint: string;
  /** The error with numbers, ids and quoted values replaced by placeholders. */
  signature: string;
  count: number;
  firstSeen: Date;
  lastSeen: Date;
  sampleId: string;
  sampleError: string;
}

export interface OutboxTopicStats {
  topic: string;
  due: number;
  scheduled: number;
  inFlight: number;
  dead: number;
  /** Delivered rows kept, when counted exactly (see `OutboxStats.deliveredExact`); else null. */
  delivered: number | null;
}

export interface OutboxStatsOptions {
  /** Count every delivered row, whatever the table's size (a scan of the delivered rows). */
  exact?: boolean;
}

/** The outbox's state, computed by the database: right even when no worker runs anywhere. */
export interface OutboxStats {
  /** The database clock when the figures were taken. */
  at: Date;
  due: number;
  scheduled: number;
  inFlight: number;
  dead: number;
  /**
   * Delivered rows kept (retention deletes them): counted exactly on tables under 100,000 rows and
   * with `exact: true`; else the table's rows (PostgreSQL's and InnoDB's estimate, SQLite's count)
   * less the exact counts of the others (`deliveredExact: false`).
   */
  delivered: number;
  deliveredExact: boolean;
  byTopic: OutboxTopicStats[];
  /** Keys of ordered topics stopped behind a dead head (`deadHead: 'block'`): see `blockedKeys()`. */
  blockedKeys: number;
  /** How long the oldest due event has waited since it became due, in ms; null when none is due. */
  oldestDueAgeMs: number | null;
  /** When a worker (of any instance) last claimed an event; null when none is recorded. */
  lastClaimAt: Date | null;
  deliveredLastMinute: number;
  deliveredLastHour: number;
}

/** A key of an ordered topic whose events wait behind a dead head (`deadHead: 'block'`). */
export interface OutboxBlockedKey {
  key: string;
  /** The dead event at the key's head: redrive it (it goes first) or discard it (the next one goes on). */
  headId: string;
  topic: string;
  /** The head's state: dead until redriven or discarded. */
  state: 'dead';
  attempts: number;
  /** The head's last error, or the outbox's note where it has none. */
  error: string | null;
  /** When the head died, by the database clock. */
  since: Date;
  /** Events of the key waiting behind it. */
  waiting: number;
}

export interface OutboxBlockedKeysOptions {
  /** Most keys returned, oldest blocked first: 1 to 500, default 50. */
  limit?: number;
}
