/**
 * The cross-instance wake-up channel: `listen` is the side that wakes this worker when another
 * instance publishes (PostgreSQL's LISTEN connection, a broker subscription, the SQLite file watch),
 * `notify` the side that wakes the others after a commit here (NOTIFY, a broker message).
 */
export type OutboxWakeUpSide = 'listen' | 'notify';

/** Where a wake-up channel reports on its connections: the `wake-up.lost` / `wake-up.restored` events and the worker's log. */
export interface OutboxWakeUpReport {
  /** A side failed (reconnection is the channel's own business; polling still delivers everything). */
  failed(error: unknown, side: OutboxWakeUpSide): void;
  /** A side works (again): a subscription is in place, a notification went out. */
  working(side: OutboxWakeUpSide): void;
}

/**
 * Tells the workers of other instances that events were committed, so they claim at once rather than
 * at their next poll. A hint, never the delivery path: a lost notification costs one poll interval.
 * `ClientProxyWakeUp` is one over Redis or NATS; implement this for anything else.
 */
export interface OutboxWakeUpChannel {
  /** Called once, before anything else: where to report failures and recoveries of either side. */
  start(report: OutboxWakeUpReport): void;
  /** Called after each commit that published events here. Must be cheap and never throw. */
  notify(): void;
  /**
   * Calls `wake` whenever another instance notifies, and after each (re)connection (notifications sent
   * meanwhile are gone). Only on instances whose worker runs.
   */
  listen(wake: () => void): Promise<void>;
  /** At shutdown, before the application's own connections close. */
  close(): Promise<void>;
}
