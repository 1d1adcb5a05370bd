import { runProblems } from '../faults/fixtures/run-order';

/**
 * The fault suite's rule for a key acknowledged by run, on made-up logs: `starts` per event of the key
 * (in key order), each event's acknowledgement time.
 */
describe('the run acknowledgement audit (fault suite)', () => {
  /** Events 0..n−1; `log` the places started, one per millisecond from 1; `acked[i]` event i's acknowledgement time. */
  const key = (log: number[], acked: number[]) =>
    runProblems(
      'k',
      acked.map((ackedAt, place) => ({
        starts: log.flatMap((p, t) => (p === place ? [t + 1] : [])),
        ackedAt,
      })),
    );

  it('passes a key delivered straight through, and one replayed from its first unacknowledged event after a crash', () => {
    expect(key([0, 1, 2, 3], [10, 10, 10, 10])).toEqual([]);
    // 0 and 1 acknowledged at 2.5; 2, 3, 4 ran, the worker died; 2, 3, 4, 5 again.
    expect(key([0, 1, 2, 3, 4, 2, 3, 4, 5], [2.5, 2.5, 20, 20, 20, 20])).toEqual([]);
  });

  it('refuses a step back beyond the first unacknowledged event, an acknowledged event again, and a skip ahead', () => {
    // Only event 0 acknowledged: a replay must start from 1, not from 2.
    expect(key([0, 1, 2, 3, 2, 3], [2.5, 20, 20, 20])).toEqual([
      'k: event 2 started after event 3, with 1 acknowledged (neither the next nor the first unacknowledged)',
    ]);
    expect(key([0, 1, 2, 0, 1, 2], [3.5, 3.5, 3.5])).toEqual(
      [0, 1, 2].map((n) => `k: event ${n} started again after its acknowledgement`),
    );
    expect(key([0, 2, 1], [10, 10, 10])).toEqual([
      'k: event 2 started after event 0, with 0 acknowledged (neither the next nor the first unacknowledged)',
      'k: event 1 started after event 2, with 0 acknowledged (neither the next nor the first unacknowledged)',
    ]);
  });
});
