import { backoffDelayMs } from '../../lib/utils/backoff';

describe('backoffDelayMs (exponential, full jitter)', () => {
  const policy = { initialDelayMs: 100, maxDelayMs: 5000 };

  it('doubles the ceiling with each attempt and caps it', () => {
    const top = (attempt: number) => backoffDelayMs(attempt, policy, () => 0.999999);
    expect(top(1)).toBe(99);
    expect(top(2)).toBe(199);
    expect(top(3)).toBe(399);
    expect(top(6)).toBe(3199);
    expect(top(7)).toBe(4999);
    expect(top(60)).toBe(4999);
  });

  it('draws uniformly from zero up to the ceiling', () => {
    expect(backoffDelayMs(3, policy, () => 0)).toBe(0);
    expect(backoffDelayMs(3, policy, () => 0.5)).toBe(200);
    const samples = Array.from({ length: 2000 }, () => backoffDelayMs(4, policy));
    expect(Math.min(...samples)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...samples)).toBeLessThan(800);
    // Jitter: the draws spread over the range instead of repeating one value.
    expect(new Set(samples).size).toBeGreaterThan(100);
  });
});
