import { backends } from '../../fixtures/backends';
import { workerApps } from '../../fixtures/worker-app';

describe.each(backends())('counts and the database clock on %s', (backend) => {
  const start = workerApps(backend);

  it('counts pending, in-flight, delivered and dead events apart', async () => {
    const { app, b, store, publish } = await start({ retry: { maxAttempts: 1 } });
    b.reject = new Error('no');
    await publish('plain');
    await publish('rejects');
    await app.worker.drain();
    await publish('plain', { held: true });
    const held = await store.claim({ batchSize: 10, leaseMs: 60_000, maxAttempts: 1 });
    expect(held.events).toHaveLength(1);
    await publish('plain', { waiting: true });
    expect(await app.outbox.counts()).toEqual({ pending: 1, due: 1, scheduled: 0, inFlight: 1, delivered: 1, dead: 1 });
  });

  it('tells due pending events from scheduled ones (delayed, or backing off after a failure)', async () => {
    // A delay of up to a day (full jitter): the failed event is still backing off when counted.
    const { app, b, store, publish } = await start({
      retry: { maxAttempts: 3, initialDelayMs: 86_400_000, maxDelayMs: 86_400_000 },
    });
    b.reject = new Error('no');
    await publish('rejects');
    expect(await app.worker.drain()).toMatchObject({ failed: 1 });
    await publish('plain', { delayed: true }, { delayMs: 60_000 });
    await publish('plain', { due: true });
    const held = await store.claim({ batchSize: 10, leaseMs: 60_000, maxAttempts: 3 });
    expect(held.events).toHaveLength(1);
    await publish('plain', { due: true });
    expect(await app.outbox.counts()).toEqual({ pending: 3, due: 1, scheduled: 2, inFlight: 1, delivered: 0, dead: 0 });
  });

  it('keeps delivering when the database clock is the only clock: the app clock shifted ±10 minutes changes nothing', async () => {
    const { app, b, store, publish } = await start();
    const RealDate = Date;
    const shift = (offsetMs: number) => {
      class ShiftedDate extends RealDate {
        constructor(...args: unknown[]) {
          if (args.length === 0) super(RealDate.now() + offsetMs);
          else super(...(args as [number]));
        }
        static override now() {
          return RealDate.now() + offsetMs;
        }
      }
      global.Date = ShiftedDate as DateConstructor;
    };
    try {
      // Published with a 60 s delay while the app clock runs 10 minutes ahead: still not due.
      shift(10 * 60_000);
      const immediate = await publish('plain', { delayed: false });
      await app.txHost.withTransaction(() => app.outbox.publish('plain', { delayed: true }, { delayMs: 60_000 }));
      expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
      expect(b.calls.map((c) => c.message.id)).toEqual([immediate.id]);
      // A live lease is not stolen by a worker whose clock runs 10 minutes ahead.
      const { id } = await publish('plain');
      shift(0);
      const held = await store.claim({ batchSize: 10, leaseMs: 60_000, maxAttempts: 3 });
      expect(held.events.map((e) => e.id)).toContain(id);
      shift(10 * 60_000);
      expect(await app.worker.drain()).toMatchObject({ delivered: 0 });
      shift(-10 * 60_000);
      expect(await app.worker.drain()).toMatchObject({ delivered: 0 });
      expect((await app.outbox.counts()).pending).toBe(1);
    } finally {
      global.Date = RealDate;
    }
  });
});
