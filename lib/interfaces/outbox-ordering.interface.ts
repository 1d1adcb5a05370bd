/**
 * What happens to the events of a key behind a dead event of an ordered topic: `block` (they wait until
 * the dead event is redriven or discarded) or `skip` (the next event of the key goes on).
 */
export type OutboxDeadHeadPolicy = 'block' | 'skip';

/**
 * When a key's delivered events are acknowledged, and so what a crash may repeat:
 * - `event` (the default): each before the key's next event starts — a crash repeats at most the event
 *   in flight;
 * - `run`: the events a claim took of the key (its run) one after another, acknowledged together at the
 *   run's end (and every 250 ms, and before anything else of the key is recorded) — a crash repeats the
 *   key's unacknowledged events, in order, from the first. Many times the throughput of one busy key.
 */
export type OutboxAcknowledgeMode = 'event' | 'run';

/**
 * Topics whose events are delivered in per-key order: the events of one `key` one at a time, in the
 * order their publishing transactions committed (within one transaction, in publish order). Events of
 * these topics without a key, and of other topics, are unordered.
 */
export interface OutboxOrdering {
  /** Topic pattern, as a route's: exact, `*` for one segment, `#` for any number of them. */
  topic: string;
  /** What a dead event of the key does to the events behind it. Default `block`. */
  deadHead?: OutboxDeadHeadPolicy;
  /** When delivered events are acknowledged, and what a crash may repeat. Default `event`. */
  acknowledge?: OutboxAcknowledgeMode;
}

/** The `ordering` option resolved: which topics are ordered, and what their dead heads do. */
export interface ResolvedKeyOrder {
  /** Whether any topic is ordered: without, publishing and delivery never touch the keys' table. */
  readonly enabled: boolean;
  /** Whether an event of `topic` with `key` takes its place in its key's order: an ordered topic, and a key. */
  orders(topic: string, key: string | null): key is string;
  /** Whether a dead event of `topic` lets the next event of its key go on (`skip`) rather than block it. */
  skipsDeadHead(topic: string): boolean;
  /** Whether the next event of a key may start before an event of `topic` is acknowledged (`acknowledge: 'run'`). */
  acknowledgesByRun(topic: string): boolean;
}
