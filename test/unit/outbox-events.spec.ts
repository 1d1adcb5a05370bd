import { config as rxjsConfig, filter, firstValueFrom, map, take } from 'rxjs';
import { OutboxEvents } from '../../lib';

const delivered = (id: string) => ({ type: 'delivered' as const, id, topic: 't', attempt: 1 });

describe('OutboxEvents', () => {
  let unhandled: unknown[];
  let previous: typeof rxjsConfig.onUnhandledError;
  beforeEach(() => {
    unhandled = [];
    previous = rxjsConfig.onUnhandledError;
    rxjsConfig.onUnhandledError = (error) => unhandled.push(error);
  });
  afterEach(() => {
    rxjsConfig.onUnhandledError = previous;
  });

  it('is observed only while someone is subscribed, through operators and firstValueFrom too', async () => {
    const events = new OutboxEvents();
    expect(events.observed).toBe(false);

    const direct = events.events$.subscribe(() => undefined);
    expect(events.observed).toBe(true);
    direct.unsubscribe();
    expect(events.observed).toBe(false);

    const piped = events
      .ofType('delivered')
      .pipe(map((e) => e.id))
      .subscribe(() => undefined);
    expect(events.observed).toBe(true);
    piped.unsubscribe();
    expect(events.observed).toBe(false);

    const first = firstValueFrom(
      events.events$.pipe(
        filter((e) => e.type === 'delivered'),
        take(1),
      ),
    );
    expect(events.observed).toBe(true);
    events.emit(delivered('a'));
    await expect(first).resolves.toMatchObject({ type: 'delivered', id: 'a', at: expect.any(Date) as Date });
    expect(events.observed).toBe(false);
  });

  it('keeps every subscriber, the throwing one included, receiving; nothing reaches RxJS’s unhandled errors', async () => {
    const events = new OutboxEvents();
    const seen: string[] = [];
    const thrownAt: string[] = [];
    events.events$.subscribe((e) => {
      thrownAt.push((e as { id: string }).id);
      throw new Error('subscriber bug');
    });
    events.events$.subscribe({
      // eslint-disable-next-line @typescript-eslint/no-misused-promises -- deliberate: a rejecting subscriber is what OutboxEvents must isolate
      next() {
        return Promise.reject(new Error('rejected'));
      },
    });
    events.ofType('delivered').subscribe((e) => seen.push(e.id));

    expect(() => events.emit(delivered('a'))).not.toThrow();
    expect(() => events.emit(delivered('b'))).not.toThrow();
    await new Promise((resolve) => setImmediate(resolve));

    expect(seen).toEqual(['a', 'b']);
    expect(thrownAt).toEqual(['a', 'b']);
    expect(unhandled).toEqual([]);
  });

  it('sends a chain’s error to its error callback when it has one', () => {
    const events = new OutboxEvents();
    const errors: unknown[] = [];
    events.events$
      .pipe(
        map(() => {
          throw new Error('operator bug');
        }),
      )
      .subscribe({ error: (error) => errors.push(error) });
    events.emit(delivered('a'));
    expect(errors).toEqual([new Error('operator bug')]);
    expect(events.observed).toBe(false);
    expect(unhandled).toEqual([]);
  });

  it('wants an event type while a meter reads it or anyone subscribes; a meter taken off no longer counts', () => {
    const events = new OutboxEvents();
    const read: string[] = [];
    const off = events.addMeter((e) => read.push(e.type), ['claimed', 'handler.succeeded']);
    expect(events.observed).toBe(true);
    expect(events.wants('claimed')).toBe(true);
    expect(events.wants('delivered')).toBe(false);
    const subscription = events.events$.subscribe(() => undefined);
    expect(events.wants('delivered')).toBe(true);
    subscription.unsubscribe();
    expect(events.wants('delivered')).toBe(false);
    events.emit({ type: 'claimed', token: 't', count: 1, ids: ['1'], durationMs: 1 });
    expect(read).toEqual(['claimed']);
    off();
    expect(events.wants('claimed')).toBe(false);
    expect(events.observed).toBe(false);
  });
});
