import type { OutboxWakeUpSide } from '../interfaces/outbox-wake-up.interface';

/**
 * What happens to events between publish and acknowledgement, as `OutboxEvents.events$` reports it.
 * Every event carries `at`, the moment it was emitted (the application's clock, not the database's).
 * Events are emitted only once what they report has happened: a write to the table is reported after
 * the database accepted it.
 */
export type OutboxLifecycleEvent =
  | OutboxPublishedEvent
  | OutboxClaimedEvent
  | OutboxHandlerSucceededEvent
  | OutboxHandlerFailedEvent
  | OutboxDeliveredEvent
  | OutboxRetryScheduledEvent
  | OutboxDeadLetteredEvent
  | OutboxReleasedEvent
  | OutboxDeferredEvent
  | OutboxLeaseLostEvent
  | OutboxWorkerStartedEvent
  | OutboxWorkerStoppedEvent
  | OutboxWakeUpLostEvent
  | OutboxWakeUpRestoredEvent
  | OutboxKeyBlockedEvent
  | OutboxKeyUnblockedEvent
  | OutboxAdminActionEvent;

export type OutboxLifecycleEventType = OutboxLifecycleEvent['type'];

/**
 * The transaction that published these events committed. One per outermost commit; a rollback
 * (or a rolled-back savepoint, for the events published inside it) emits nothing. Events a dedupe key
 * resolved to an existing row are not listed: this transaction did not write them.
 */
export interface OutboxPublishedEvent {
  type: 'published';
  at: Date;
  ids: string[];
  /** `topics[i]` is the topic of `ids[i]`. */
  topics: string[];
}

/** A claim leased these events to this worker under `token`; `count` is `ids.length`. */
export interface OutboxClaimedEvent {
  type: 'claimed';
  at: Date;
  token: string;
  count: number;
  ids: string[];
  /** How long the claim's statements took, in ms. */
  durationMs: number;
}

interface OutboxHandlerRun {
  at: Date;
  id: string;
  topic: string;
  /** The handler's recorded name: `Class.method`, or `transport:<name>` for a route. */
  handler: string;
  /** 1 for the first delivery attempt. */
  attempt: number;
  /** From the call to the handler to its end (or its timeout). */
  durationMs: number;
}

/** One handler of an event returned. The event is `delivered` once all its handlers have. */
export interface OutboxHandlerSucceededEvent extends OutboxHandlerRun {
  type: 'handler.succeeded';
}

/** One handler of an event threw, rejected or timed out; `error` is its name and message. */
export interface OutboxHandlerFailedEvent extends OutboxHandlerRun {
  type: 'handler.failed';
  error: string;
}

/** The event's acknowledgement was written: it will not be delivered again. */
export interface OutboxDeliveredEvent {
  type: 'delivered';
  at: Date;
  id: string;
  topic: string;
  attempt: number;
}

/** The failed attempt was recorded and the event will be claimed again, `delayMs` from now. */
export interface OutboxRetryScheduledEvent {
  type: 'retry.scheduled';
  at: Date;
  id: string;
  topic: string;
  /** The attempt that failed. */
  attempt: number;
  delayMs: number;
  /**
   * `at + delayMs`, by the application's clock. Approximate: the database sets the due time by its
   * own clock, and a claim may come later (polling, busy workers).
   */
  dueAt: Date;
  /** Each failed handler's name and error, joined by `; ` (as stored in `last_error`). */
  error: string;
  /** The targets that failed in this attempt (as `handler.failed` names them); empty when its topic has none. */
  failedHandlers: string[];
}

/**
 * Why an event was dead-lettered:
 * - `handler`: its last allowed attempt failed (a handler's error or timeout, or no handler or route
 *   for its topic);
 * - `non-retryable`: a handler threw `OutboxNonRetryableError`;
 * - `attempts-exhausted-at-claim`: its last allowed attempt outlived its lease (the worker running it
 *   stopped or stalled) and a claim dead-lettered it without running it again;
 * - `undecodable`: the stored row cannot be read back (say, JSON cut short by MySQL's non-strict
 *   `sql_mode`); no handler was given it.
 */
export type OutboxDeadLetterReason = 'handler' | 'non-retryable' | 'attempts-exhausted-at-claim' | 'undecodable';

/** The event is dead: it stays in the table, and is not delivered again. */
export interface OutboxDeadLetteredEvent {
  type: 'dead-lettered';
  at: Date;
  id: string;
  topic: string;
  /** The attempt that ended it (for `attempts-exhausted-at-claim`, the last one, which outlived its lease). */
  attempt: number;
  error: string;
  reason: OutboxDeadLetterReason;
  /**
   * The targets whose failure in this attempt ended it (as `handler.failed` names them); empty when none
   * ran: no target for its topic, `attempts-exhausted-at-claim`, `undecodable`.
   */
  failedHandlers: string[];
}

/**
 * An event of an ordered topic whose dead head blocks its key (`deadHead: 'block'`) died: the events
 * of `key` behind it wait until it is redriven or discarded (see `OutboxOperations.blockedKeys()`).
 */
export interface OutboxKeyBlockedEvent {
  type: 'key.blocked';
  at: Date;
  key: string;
  /** The dead event at the key's head. */
  id: string;
  topic: string;
}

/** An operator redrove or discarded the dead head of `key`: its events go on. */
export interface OutboxKeyUnblockedEvent {
  type: 'key.unblocked';
  at: Date;
  key: string;
  /** The dead event that was the key's head. */
  id: string;
  how: 'redrive' | 'discard';
}

/**
 * A mutation made through the admin page or its API ran (not a dry run): who, what, on which selection,
 * and how many events it changed. `auditId` is its row in the audit trail.
 */
export interface OutboxAdminActionEvent {
  type: 'admin.action';
  at: Date;
  auditId: string;
  actor: string | null;
  action: 'redrive' | 'discard' | 'deliverNow';
  selection: unknown;
  matched: number;
  changed: number;
}

/**
 * Why claimed events were given back before their handlers ended:
 * - `shutdown`: the application is stopping;
 * - `lease-budget`: too little of the lease was left to cover the longest handler timeout;
 * - `isolation`: another event of the claim may have stopped a worker before and runs alone;
 * - `order`: events of an ordered key claimed behind an earlier one of their key, which did not succeed.
 */
export type OutboxReleaseReason = 'shutdown' | 'lease-budget' | 'isolation' | 'order';

/**
 * Claimed events were given back, due at once. `uncounted`: no handler started, so the attempt the
 * claim counted was taken back; false for events whose handlers were still running at shutdown.
 */
export interface OutboxReleasedEvent {
  type: 'released';
  at: Date;
  ids: string[];
  uncounted: boolean;
  why: OutboxReleaseReason;
}

/**
 * An event's share for `targets` went back to the table, its attempt uncounted, due in `delayMs`: each
 * of them ran as many calls at once as its `concurrency` allows. Its other targets were delivered in
 * this attempt (and are recorded as done); none failed.
 */
export interface OutboxDeferredEvent {
  type: 'deferred';
  at: Date;
  id: string;
  topic: string;
  targets: string[];
  delayMs: number;
}

/**
 * The database refused a write of this worker because the claim had lost its lease (it expired, and
 * another worker may hold the events now): the acknowledgement, recorded failure, release or lease
 * renewal did not happen. `count` of `ids` were refused; when it is less than `ids.length`, the others
 * were written and the database did not say which (a batch's lease expires at one moment, so this is
 * not expected). A renewal names exactly the events it lost.
 */
export interface OutboxLeaseLostEvent {
  type: 'lease.lost';
  at: Date;
  ids: string[];
  count: number;
  /** `renew`: a lease renewal found the events no longer held; their handlers were aborted, their outcome not written. */
  what: 'acknowledge' | 'fail' | 'release' | 'renew';
}

/** The worker was scheduled (bootstrap, with `worker.enabled`). */
export interface OutboxWorkerStartedEvent {
  type: 'worker.started';
  at: Date;
}

/**
 * The worker stopped at shutdown. `timedOut`: the run in progress outlived `shutdownTimeoutMs` and
 * was given up (its unfinished events released).
 */
export interface OutboxWorkerStoppedEvent {
  type: 'worker.stopped';
  at: Date;
  timedOut: boolean;
}

/**
 * The wake-up channel stopped working on one side (reconnection is attempted; polling still delivers
 * everything, at the poll interval). Emitted once per outage, with the error that began it.
 */
export interface OutboxWakeUpLostEvent {
  type: 'wake-up.lost';
  at: Date;
  side: OutboxWakeUpSide;
  error: string;
}

/** That side works again: the listener is back (LISTEN, a subscription), or a notification went through. */
export interface OutboxWakeUpRestoredEvent {
  type: 'wake-up.restored';
  at: Date;
  side: OutboxWakeUpSide;
}
