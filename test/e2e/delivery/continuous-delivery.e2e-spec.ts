import { backends } from '../../fixtures/backends';
import { eventually } from '../../fixtures/eventually';
import { createTestApp, outboxRows } from '../../fixtures/test-app';
import { Behaviour, Handlers, workerApps } from '../../fixtures/worker-app';

/** The scheduled worker, woken by this app's own commits; its interval never fires within a test. */
const SCHEDULED = { enabled: true, pollIntervalMs: 3_600_000 };

describe.each(backends())('continuous delivery on %s', (backend) => {
  const start = workerApps(backend);

  it('delivers an event published while a slow handler runs, without waiting for that handler', async () => {
    const { b, publish, row } = await start({ worker: { ...SCHEDULED, concurrency: 10 } });
    const { id: slowId } = await publish('blocking');
    await b.entered.promise;
    const { id } = await publish('plain');
    await eventually(async () => (await row(id)).status === 'delivered', 10_000, 'the later event delivered');
    // The slow handler still holds its lane, and its event its lease.
    expect(b.running).toBe(1);
    expect(await row(slowId)).toMatchObject({ status: 'pending', attempts: 1 });
    b.gate.resolve();
    await eventually(async () => (await row(slowId)).status === 'delivered', 10_000, 'the slow event delivered');
  });

  it('shares `concurrency` lanes among its claims, and claims nothing while every lane is busy', async () => {
    const { app, b, publish } = await start({ worker: { ...SCHEDULED, concurrency: 2, targetConcurrency: 2 } });
    // Each in a transaction of its own, so each wakes the worker for a claim of its own.
    const first = await publish('blocking', { n: 1 });
    await b.entered.promise;
    const second = await publish('blocking', { n: 2 });
    await eventually(() => b.running === 2, 10_000, 'two handlers running');
    const later = [await publish('blocking', { n: 3 }), await publish('plain')];
    // Real round trips while both lanes are held: the later events stay in the outbox, unclaimed, for
    // a lane here or a worker elsewhere.
    for (let i = 0; i < 3; i++) await app.outbox.counts();
    const unclaimed = (await outboxRows(app)).filter((r) => later.some((e) => e.id === r.id));
    expect(unclaimed.map((r) => [r.attempts, r.claim_token])).toEqual([
      [0, null],
      [0, null],
    ]);
    expect(b.calls.map((c) => c.message.id)).toEqual([first.id, second.id]);
    b.gate.resolve();
    await eventually(async () => (await app.outbox.counts()).delivered === 4, 10_000, 'all four delivered');
    expect(b.maxRunning).toBe(2);
  });

  it('runs a crash suspect with nothing else in flight, also when another claim brought it', async () => {
    // This app publishes, and plays the worker that dies; the second one delivers, woken only by its own
    // commits, so the test decides which claim takes what.
    const { app, publish, store, row } = await start();
    const { id: slowId } = await publish('blocking');
    const second = await createTestApp({
      backend,
      table: app.table,
      sqlitePath: app.sqlitePath,
      providers: [Behaviour, Handlers],
      outbox: { worker: { ...SCHEDULED, concurrency: 10 }, wakeUp: false },
    });
    try {
      const b = second.module.get(Behaviour);
      // Its first claim, at bootstrap, takes the slow event alone.
      await b.entered.promise;
      // A worker claims an event and dies: its lease runs out, so its next attempt is a crash suspect.
      const { id: suspectId } = await publish('sabotage', { suspect: true });
      // It may end its process as it did the last one's: what the instance delivered is written before it starts.
      const seenAtStart: unknown[] = [];
      b.sabotage = async () => seenAtStart.push((await row(slowId)).status);
      await store.claim({ batchSize: 10, leaseMs: 100, maxAttempts: 3 });
      await eventually(async () => (await app.outbox.counts()).inFlight === 1, 10_000, 'the dead lease run out');
      // A commit on the second app wakes its worker: this claim takes the suspect and the fresh event.
      const fresh = await second.txHost.withTransaction(() => second.outbox.publish('plain', { fresh: true }));
      await eventually(async () => (await row(fresh.id)).status === 'delivered', 10_000, 'the fresh event delivered');
      for (let i = 0; i < 3; i++) await app.outbox.counts();
      expect(b.calls.map((c) => c.message.id)).toEqual([slowId, fresh.id]);
      expect(await row(suspectId)).toMatchObject({ status: 'pending', attempts: 2 });
      b.gate.resolve();
      await eventually(async () => (await row(suspectId)).status === 'delivered', 10_000, 'the suspect delivered');
      expect(b.calls.map((c) => c.message.id)).toEqual([slowId, fresh.id]);
      expect(seenAtStart).toEqual(['delivered']);
      expect(
        second.logger.matching(/: attempt 1 did not finish before its lease expired; running attempt 2 alone$/),
      ).toHaveLength(1);
    } finally {
      await second.close();
      await second.raw.close();
    }
  });
});
