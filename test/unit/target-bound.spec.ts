import { TargetActivity, TargetBound } from '../../lib/delivery/target-bound';

/** Only the clock of `performance.now()` is faked: the bound reads nothing else. */
beforeEach(() => jest.useFakeTimers({ doNotFake: ['setTimeout', 'setInterval', 'setImmediate', 'nextTick'] }));
afterEach(() => jest.useRealTimers());

describe('TargetBound', () => {
  it('gives out at most its concurrency of slots, and one more once a call settled', () => {
    const bound = new TargetBound(2);
    expect([bound.take(), bound.take(), bound.take()]).toEqual([true, true, false]);
    bound.give(bound.started());
    expect([bound.take(), bound.take()]).toEqual([true, false]);
  });

  it('hands a settled call’s slot to the share that waited first, and keeps the count at the bound', async () => {
    const bound = new TargetBound(1);
    const order: string[] = [];
    expect(bound.take()).toBe(true);
    const first = bound.wait().then(() => order.push('first'));
    const second = bound.wait().then(() => order.push('second'));
    bound.give(bound.started());
    await first;
    expect(order).toEqual(['first']);
    // The slot went to the first waiter: still none free.
    expect(bound.take()).toBe(false);
    bound.give(bound.started());
    await second;
    expect(order).toEqual(['first', 'second']);
    bound.give(bound.started());
    expect(bound.take()).toBe(true);
  });

  it('has a share wait on its lane while calls are short, and go back to the table once they are long', () => {
    const bound = new TargetBound(2);
    bound.take();
    bound.take();
    // No call has ended: the first has run for 5 ms, so far.
    jest.advanceTimersByTime(5);
    expect(bound.worthWaiting()).toBe(true);
    // It has run for 50 ms: slots free slowly.
    jest.advanceTimersByTime(45);
    expect(bound.worthWaiting()).toBe(false);
    // Calls of 10 ms on average: a slot every 5 ms.
    const started = bound.started();
    jest.advanceTimersByTime(10);
    bound.give(started);
    expect(bound.worthWaiting()).toBe(true);
  });

  it('takes a slot given back unused (its call never started) as no measure of the calls', () => {
    const bound = new TargetBound(1);
    bound.take();
    jest.advanceTimersByTime(100);
    bound.give();
    bound.take();
    // Still no call ended: the estimate is how long the first has been held, 100 ms, not a call of 0 ms.
    expect(bound.worthWaiting()).toBe(false);
  });

  it('puts off the shares of a full target one after the other, at the rate its slots free', () => {
    const bound = new TargetBound(2);
    bound.take();
    const started = bound.started();
    jest.advanceTimersByTime(4000);
    // One call took 4 s: with 2 slots, one frees every 2 s.
    bound.give(started);
    bound.take();
    bound.take();
    expect([bound.deferralMs(), bound.deferralMs(), bound.deferralMs()]).toEqual([2000, 4000, 6000]);
    // Time passes: the queue of shares put off moves with it.
    jest.advanceTimersByTime(5000);
    expect(bound.deferralMs()).toBe(3000);
    // Long after the last one was due, the next is due a slot's time from now.
    jest.advanceTimersByTime(60_000);
    expect(bound.deferralMs()).toBe(2000);
  });
});

describe('TargetBound.lanesWanted', () => {
  it('is true only while another target of the worker started a call within the last second', () => {
    const activity = new TargetActivity();
    const slow = new TargetBound(1, activity);
    const fast = new TargetBound(1, activity);
    // Nothing else has run: a share of `slow` would only come back to `slow`.
    slow.take();
    slow.started();
    expect(slow.lanesWanted()).toBe(false);
    fast.take();
    fast.give(fast.started());
    expect(slow.lanesWanted()).toBe(true);
    // `slow` starting again does not hide that `fast` ran.
    jest.advanceTimersByTime(600);
    slow.started();
    expect(slow.lanesWanted()).toBe(true);
    expect(fast.lanesWanted()).toBe(true);
    jest.advanceTimersByTime(500);
    expect(slow.lanesWanted()).toBe(false);
    // `slow` started 500 ms ago: lanes are wanted for `fast`'s shares.
    expect(fast.lanesWanted()).toBe(true);
  });

  it('keeps targets of different workers apart', () => {
    const mine = new TargetBound(1, new TargetActivity());
    const theirs = new TargetBound(1, new TargetActivity());
    theirs.take();
    theirs.started();
    expect(mine.lanesWanted()).toBe(false);
  });
});
