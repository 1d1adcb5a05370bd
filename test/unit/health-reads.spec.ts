import { SingleReads, stateWarnings, within } from '../../lib/observability/health-reads';
import type { OutboxStats } from '../../lib/interfaces/outbox-operations.interface';

/** The health checks' reads on Jest's clock: a read that never answers is never waited for in real time. */
describe('health reads', () => {
  beforeEach(() => jest.useFakeTimers({ now: 0 }));
  afterEach(() => jest.useRealTimers());

  const never = () => new Promise<never>(() => undefined);

  it('within: the value, the error, or no answer once the time is up', async () => {
    await expect(within(Promise.resolve(1), 100)).resolves.toEqual({ answered: true, value: 1 });
    const failed = new Error('gone');
    await expect(within(Promise.reject(failed), 100)).resolves.toEqual({ answered: false, error: failed });
    const late = within(never(), 100);
    await jest.advanceTimersByTimeAsync(100);
    await expect(late).resolves.toEqual({ answered: false });
  });

  it('shares a running read, starts another once it settled, and leaves one that waited past shareMs', async () => {
    const reads = new SingleReads(30_000);
    const started: number[] = [];
    const read = () => {
      started.push(Date.now());
      return never();
    };
    const first = reads.of('stats', read);
    await jest.advanceTimersByTimeAsync(29_999);
    expect(reads.of('stats', read)).toBe(first);
    expect(reads.of('reach', read)).not.toBe(first);
    await jest.advanceTimersByTimeAsync(1);
    const second = reads.of('stats', read);
    expect(second).not.toBe(first);
    expect(started).toEqual([0, 29_999, 30_000]);

    let answer = 0;
    const answered = () => Promise.resolve(++answer);
    await expect(reads.of('figures', answered)).resolves.toBe(1);
    await expect(reads.of('figures', answered)).resolves.toBe(2);
  });

  it('counts in words: one dead letter, two dead letters, one blocked key', () => {
    const stats = (dead: number, blockedKeys: number) => ({ oldestDueAgeMs: null, dead, blockedKeys }) as OutboxStats;
    const limits = { maxDeadLetters: 0, maxBlockedKeys: 0 };
    expect(stateWarnings(stats(1, 1), limits)).toEqual(['1 dead letter (more than 0)', '1 blocked key (more than 0)']);
    expect(stateWarnings(stats(2, 3), limits)).toEqual([
      '2 dead letters (more than 0)',
      '3 blocked keys (more than 0)',
    ]);
    expect(stateWarnings(stats(2, 3), {})).toEqual([]);
  });
});
