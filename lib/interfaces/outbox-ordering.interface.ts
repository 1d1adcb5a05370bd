/**
 * What happens to the events of a key behind a dead event of an ordered topic: `block` (they wait until
 * the dead event is redriven or discarded) or `skip` (the next event of the key goes on).
 */
export type OutboxDeadHeadPolicy = 'block' | 'skip';

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
}

/** The `ordering` option resolved: which topics are ordered, and what their dead heads do. */
export interface ResolvedKeyOrder {
  /** Whether any topic is ordered: without, publishing and delivery never touch the keys' table. */
  readonly enabled: boolean;
  /** Whether an event of `topic` with `key` takes its place in its key's order: an ordered topic, and a key. */
  orders(topic: string, key: string | null): key is string;
  /** Whether a dead event of `topic` lets the next event of its key go on (`skip`) rather than block it. */
  skipsDeadHead(topic: string): boolean;
}
