import { performance } from 'node:perf_hooks';
import { HandlerWatchdog } from '../../lib/delivery/handler-watchdog';

/** Resolves with the time `expire` ran, as the watchdog calls it. */
function expiry() {
  let resolve!: (at: number) => void;
  const at = new Promise<number>((r) => (resolve = r));
  return { at, expire: () => resolve(performance.now()) };
}

/** Timers that keep the process alive (getActiveResourcesInfo lists only those). */
const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

describe('HandlerWatchdog', () => {
  it('expires a call once its timeout has passed, never before', async () => {
    const dog = new HandlerWatchdog();
    const started = performance.now();
    const { at, expire } = expiry();
    dog.watch(30, { expire });
    // Node's timers count whole milliseconds of the loop's clock: allow the sub-millisecond rounding.
    expect((await at) - started).toBeGreaterThanOrEqual(29);
  });

  it('never expires a call that ended, and still expires the others', async () => {
    const dog = new HandlerWatchdog();
    const ended = jest.fn();
    const watch = dog.watch(10, { expire: ended });
    const { at, expire } = expiry();
    dog.watch(40, { expire });
    watch.end();
    watch.end();
    await at;
    expect(ended).not.toHaveBeenCalled();
  });

  it('expires a shorter timeout started after a longer one first', async () => {
    const dog = new HandlerWatchdog();
    const order: string[] = [];
    const long = expiry();
    const short = expiry();
    dog.watch(200, { expire: () => (order.push('long'), long.expire()) });
    dog.watch(20, { expire: () => (order.push('short'), short.expire()) });
    await short.at;
    expect(order).toEqual(['short']);
    await long.at;
    expect(order).toEqual(['short', 'long']);
  });

  it('expires exactly the calls still running, in the order they started', async () => {
    const dog = new HandlerWatchdog();
    const expired: number[] = [];
    const last = expiry();
    const watches = Array.from({ length: 1000 }, (_, i) =>
      dog.watch(25, {
        expire: () => {
          expired.push(i);
          if (i === 999) last.expire();
        },
      }),
    );
    watches.forEach((watch, i) => i % 2 === 0 && watch.end());
    await last.at;
    expect(expired).toEqual(Array.from({ length: 500 }, (_, i) => 2 * i + 1));
  });

  it('keeps the process alive only while a call is watched', () => {
    const dog = new HandlerWatchdog();
    const before = timers();
    const a = dog.watch(60_000, { expire: jest.fn() });
    const b = dog.watch(1_000, { expire: jest.fn() });
    expect(timers()).toBe(before + 1);
    a.end();
    expect(timers()).toBe(before + 1);
    b.end();
    expect(timers()).toBe(before);
    const c = dog.watch(1_000, { expire: jest.fn() });
    expect(timers()).toBe(before + 1);
    c.end();
    expect(timers()).toBe(before);
  });

  it('watches calls started by an expiry', async () => {
    const dog = new HandlerWatchdog();
    const second = expiry();
    dog.watch(10, { expire: () => dog.watch(10, { expire: second.expire }) });
    await expect(second.at).resolves.toEqual(expect.any(Number));
  });
});
