import { backends } from '../../fixtures/backends';
import { eventually } from '../../fixtures/eventually';
import { outboxRows } from '../../fixtures/test-app';
import { workerApps } from '../../fixtures/worker-app';
import { drained } from '../../fixtures/drain-result';

describe.each(backends())('batches and their acknowledgements on %s', (backend) => {
  const start = workerApps(backend);

  it('acknowledges the finished events of a batch while one of its handlers is still running', async () => {
    const { app, b, publish, row } = await start({ worker: { concurrency: 10 } });
    const { id: slowId } = await publish('blocking');
    const fast = await app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: 9 }, (_, n) => ({ topic: 'plain', payload: { n } }))),
    );
    const draining = app.worker.drain();
    await b.entered.promise;
    // The nine lanes that finished are idle from here on; the batch's own timer writes their successes.
    await eventually(
      async () => {
        const rows = await outboxRows(app);
        return fast.every(({ id }) => rows.find((r) => r.id === id)?.status === 'delivered');
      },
      10_000,
      'the nine fast events acknowledged',
    );
    expect(b.running).toBe(1);
    expect(await row(slowId)).toMatchObject({ status: 'pending' });
    b.gate.resolve();
    expect(await draining).toMatchObject({ delivered: 10 });
    expect(await row(slowId)).toMatchObject({ status: 'delivered', claim_token: null });
  });

  it.each([1, 10])('acknowledges a batch of quick successes in one statement (concurrency %i)', async (concurrency) => {
    const statements: string[] = [];
    const { app } = await start(
      { worker: { batchSize: 10, concurrency } },
      {
        typeormLogger: {
          logQuery: (query: string) => void statements.push(query),
          logQueryError: () => undefined,
          logQuerySlow: () => undefined,
          logSchemaBuild: () => undefined,
          logMigration: () => undefined,
          log: () => undefined,
        },
      },
    );
    await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2, 3, 4, 5].map((n) => ({ topic: 'plain', payload: { n } }))),
    );
    statements.length = 0;
    expect(await app.worker.drain()).toMatchObject({ delivered: 5 });
    expect(statements.filter((q) => /^\s*UPDATE .*'delivered'/s.test(q))).toHaveLength(1);
  });

  it('delivers a long claim of synchronous handlers on one lane, in claim order', async () => {
    // The largest claim there is. Each event ends before its lane's next one starts, all in one turn of
    // the event loop: the lane passes on in a loop, not a call deeper per event, or the stack overflows.
    const { app, b } = await start({ worker: { batchSize: 5000, concurrency: 1 } });
    const published = await app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: 5000 }, (_, n) => ({ topic: 'plain', payload: { n } }))),
    );
    expect(await app.worker.drain()).toEqual(drained({ delivered: 5000 }));
    expect(b.calls.map((call) => call.message.id)).toEqual(published.map((event) => event.id));
    expect((await outboxRows(app)).every((r) => r.status === 'delivered')).toBe(true);
  });

  it('acknowledges the successes of a slow batch while the batch still runs', async () => {
    const { app, b, row } = await start({ worker: { batchSize: 3, concurrency: 1 } });
    // One at a time: a quick one, one whose work outlasts the 250 ms flush interval, one held open.
    await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2, 3].map((n) => ({ topic: 'paced', payload: { n } }))),
    );
    const draining = app.worker.drain();
    await eventually(() => b.paced.length === 3, 10_000, 'the third handler running');
    const [quick, slow, held] = b.paced;
    await eventually(
      async () => (await outboxRows(app)).filter((r) => r.status === 'delivered').length === 2,
      10_000,
      'the first two acknowledged while the third runs',
    );
    expect((await row(quick)).status).toBe('delivered');
    expect((await row(slow)).status).toBe('delivered');
    expect((await row(held)).status).toBe('pending');
    b.gate.resolve();
    expect(await draining).toEqual(drained({ delivered: 3 }));
  });

  it('runs as many handlers at once as `concurrency`, and no more', async () => {
    const { app, b } = await start({ worker: { concurrency: 2, targetConcurrency: 2, batchSize: 10 } });
    await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2, 3].map((n) => ({ topic: 'parallel', payload: { n } }))),
    );
    const draining = app.worker.drain();
    await eventually(() => b.running === 2, 10_000, 'two handlers running');
    // Real round trips while both are held: a third must not start.
    for (let i = 0; i < 3; i++) await app.outbox.counts();
    expect(b.started).toHaveLength(2);
    b.gate.resolve();
    expect(await draining).toMatchObject({ delivered: 3 });
    expect(b.maxRunning).toBe(2);
  });
});
