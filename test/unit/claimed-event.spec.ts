import { noAttemptLeft, previousAttemptExpired } from '../../lib/interfaces/claimed-event.interface';
import { LEASE_EXPIRED } from '../../lib/dialects/shared/claim-rules';
import type { StoredEvent } from '../../lib/dialects/shared/outbox-dialect.interface';

describe('previousAttemptExpired', () => {
  const event = (attempts: number, lastExpiredAttempt: number | null, lastError: string | null = null) =>
    ({ attempts, lastExpiredAttempt, lastError }) as StoredEvent;

  it('is true when the claim counted that the attempt just before this one outlived its lease', () => {
    expect(previousAttemptExpired(event(3, 2))).toBe(true);
    expect(previousAttemptExpired(event(11, 10))).toBe(true);
  });

  it('is false for an older expiry, none, or a handler error that only quotes the old text', () => {
    expect(previousAttemptExpired(event(4, 2))).toBe(false);
    expect(previousAttemptExpired(event(2, 2))).toBe(false);
    expect(previousAttemptExpired(event(3, null))).toBe(false);
    expect(previousAttemptExpired(event(3, null, `attempt 2 of 5 ${LEASE_EXPIRED}`))).toBe(false);
  });
});

describe('noAttemptLeft', () => {
  it('is true once the attempts reach maxAttempts, false before', () => {
    expect(noAttemptLeft(5, 5)).toBe(true);
    expect(noAttemptLeft(6, 5)).toBe(true);
    expect(noAttemptLeft(4, 5)).toBe(false);
    expect(noAttemptLeft(0, 1)).toBe(false);
  });
});
