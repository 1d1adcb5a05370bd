/**
 * Exponential backoff with full jitter: a uniform delay between 0 and
 * min(maxDelayMs, initialDelayMs * 2^(attempt - 1)). Full jitter spreads the retries of events that
 * failed together (a broker outage) instead of sending them back in waves.
 */
export function backoffDelayMs(
  attempt: number,
  policy: { initialDelayMs: number; maxDelayMs: number },
  random: () => number = Math.random,
): number {
  const exponent = Math.min(Math.max(attempt - 1, 0), 30);
  const ceiling = Math.min(policy.maxDelayMs, policy.initialDelayMs * 2 ** exponent);
  return Math.floor(random() * ceiling);
}
