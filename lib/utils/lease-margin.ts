/**
 * How much of a lease must be left after a handler's timeout: time to write the acknowledgement before
 * another worker may claim the event. A tenth of the lease, at most a second. Start-up checks every
 * timeout against it, and the worker starts no event with less lease left than timeout plus margin.
 */
export function leaseMarginMs(leaseMs: number): number {
  return Math.min(1000, Math.floor(leaseMs / 10));
}
