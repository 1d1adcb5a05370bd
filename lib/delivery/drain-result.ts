/** What one `drain()` did. */
export interface OutboxDrainResult {
  /** Events whose every handler succeeded. */
  delivered: number;
  /** Events that failed and will be retried. */
  failed: number;
  /** Events dead-lettered (by a handler's failure on the last attempt, or an expired final lease). */
  deadLettered: number;
  /** Events given back unstarted (shutdown, or too little lease left to start). */
  released: number;
  /**
   * Events some of whose targets were full (each runs at most its `concurrency` calls at once): the
   * others were delivered, and the event went back, uncounted, due when those should have room.
   */
  deferred: number;
  /**
   * Acknowledgements, failures and releases the database rejected because the claim had lost its
   * lease. A database error while recording is logged and not counted here: the lease decides then.
   */
  lostLeases: number;
}

export function emptyResult(): OutboxDrainResult {
  return { delivered: 0, failed: 0, deadLettered: 0, released: 0, deferred: 0, lostLeases: 0 };
}
