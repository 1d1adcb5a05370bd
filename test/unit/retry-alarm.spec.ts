import { RetryAlarm } from '../../lib/delivery/retry-alarm';

/** The alarm's own timers on Jest's clock: what it wakes for, in order, never waiting in real time. */
describe('RetryAlarm', () => {
  beforeEach(() => jest.useFakeTimers({ now: 0 }));
  afterEach(() => jest.useRealTimers());

  const alarmOf = (maxTimes?: number) => {
    const woken: number[] = [];
    const alarm = new RetryAlarm(10_000, () => woken.push(Date.now()), maxTimes);
    return { alarm, woken };
  };

  it('wakes at the time of each retry due before the next poll, whatever order they came in', () => {
    const { alarm, woken } = alarmOf();
    for (const delay of [1_500, 500, 20_000, 1_000, 500]) alarm.retryIn(delay);
    expect(alarm.pending).toBe(3);
    jest.advanceTimersByTime(60_000);
    expect(woken).toEqual([500, 1_000, 1_500]);
    expect(alarm.pending).toBe(0);
  });

  it('takes a retry scheduled after its alarm fired', () => {
    const { alarm, woken } = alarmOf();
    alarm.retryIn(100);
    jest.advanceTimersByTime(100);
    alarm.retryIn(300);
    jest.advanceTimersByTime(1_000);
    expect(woken).toEqual([100, 400]);
  });

  it('keeps at most its cap of times: an earlier one wakes with the next, a later one moves the last', () => {
    const { alarm, woken } = alarmOf(3);
    for (const delay of [100, 200, 300, 150, 400]) alarm.retryIn(delay);
    expect(alarm.pending).toBe(3);
    jest.advanceTimersByTime(1_000);
    expect(woken).toEqual([100, 200, 400]);
  });

  it('forgets every time when stopped', () => {
    const { alarm, woken } = alarmOf();
    alarm.retryIn(100);
    alarm.retryIn(200);
    alarm.stop();
    jest.advanceTimersByTime(1_000);
    expect(woken).toEqual([]);
    expect(alarm.pending).toBe(0);
  });
});
