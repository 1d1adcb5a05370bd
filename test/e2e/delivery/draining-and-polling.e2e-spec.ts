import { Injectable } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { filter, firstValueFrom, take, toArray } from 'rxjs';
import {
  OutboxEvents,
  OutboxHandler,
  OutboxRetryLaterError,
  type OutboxLifecycleEvent,
  type OutboxMessage,
} from '../../../lib';
import { backends } from '../../fixtures/backends';
import { eventually } from '../../fixtures/eventually';
import { createTestApp } from '../../fixtures/test-app';
import { Behaviour, Handlers, workerApps } from '../../fixtures/worker-app';

/** Fails an event's first attempt, asking for its retry `afterMs` from then; succeeds after. */
@Injectable()
class RetriesOnce {
  @OutboxHandler('retries.once')
  retriesOnce(m: OutboxMessage<{ afterMs: number }>) {
    if (m.attempt === 1) throw new OutboxRetryLaterError('not yet', m.payload.afterMs);
  }
}

describe.each(backends())('draining and polling on %s', (backend) => {
  const start = workerApps(backend);

  it('drains back to back while batches come back full, from a single poll', async () => {
    const { app } = await start();
    const total = 23;
    await app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: total }, (_, n) => ({ topic: 'plain', payload: { n } }))),
    );
    // A second application on the same database whose worker polls once at bootstrap, then not for an hour.
    const second = await createTestApp({
      backend,
      table: app.table,
      sqlitePath: app.sqlitePath,
      providers: [Behaviour, Handlers],
      outbox: { worker: { enabled: true, pollIntervalMs: 3_600_000, batchSize: 5 } },
    });
    try {
      await eventually(async () => (await second.outbox.counts()).delivered === total, 10_000, 'all delivered');
      expect(second.module.get(Behaviour).calls).toHaveLength(total);
    } finally {
      await second.close();
      await second.raw.close();
    }
  });

  it('never overlaps itself: a second drain waits for the first', async () => {
    const { app, b, publish } = await start({ worker: { concurrency: 1, batchSize: 1 } });
    await publish('blocking', { n: 1 });
    await publish('blocking', { n: 2 });
    const firstDrain = app.worker.drain();
    await b.entered.promise;
    let secondSettled = false;
    const secondDrain = app.worker.drain().then((r) => ((secondSettled = true), r));
    // Real database round trips while the first handler is held: the second drain must not start.
    for (let i = 0; i < 5; i++) await app.outbox.counts();
    expect(b.calls).toHaveLength(1);
    expect(secondSettled).toBe(false);
    b.gate.resolve();
    const [r1, r2] = await Promise.all([firstDrain, secondDrain]);
    expect(r1.delivered + r2.delivered).toBe(2);
    expect(b.maxRunning).toBe(1);
    expect(new Set(b.calls.map((c) => c.message.id)).size).toBe(2);
  });

  it('wakes for a retry due before the next poll, at its time', async () => {
    // The interval never fires within the test: only the retry's own timer can bring attempt 2.
    const { b, publish, row } = await start({
      worker: { enabled: true, pollIntervalMs: 3_600_000 },
      retry: { maxAttempts: 3, initialDelayMs: 300, maxDelayMs: 300 },
    });
    const { id } = await publish('multi', { n: 1 });
    await eventually(async () => (await row(id)).status === 'delivered', 10_000, 'the retry delivered');
    expect(b.calls.map((c) => `${c.handler}@${c.message.attempt}`)).toEqual(['first@1', 'second@1', 'second@2']);
  });

  it('wakes for every retry due before the next poll, not only the earliest', async () => {
    // The interval never fires within the test: only the retries' own timers can bring the second attempts.
    const { app } = await start(
      { worker: { enabled: true, pollIntervalMs: 3_600_000 } },
      { providers: [Behaviour, Handlers, RetriesOnce] },
    );
    const events = app.module.get(OutboxEvents).events$;
    const firstTwo = <T extends OutboxLifecycleEvent['type']>(type: T) =>
      firstValueFrom(
        events.pipe(
          filter((event): event is Extract<OutboxLifecycleEvent, { type: T }> => event.type === type),
          take(2),
          toArray(),
        ),
      );
    const [retries, deliveries] = [firstTwo('retry.scheduled'), firstTwo('delivered')];
    const [early, late] = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([
        { topic: 'retries.once', payload: { afterMs: 500 } },
        { topic: 'retries.once', payload: { afterMs: 1_500 } },
      ]),
    );
    const byId = (pairs: Array<[string, number]>) => Object.fromEntries(pairs);
    expect(byId((await retries).map((e) => [e.id, e.delayMs]))).toEqual({ [early.id]: 500, [late.id]: 1_500 });
    expect(byId((await deliveries).map((e) => [e.id, e.attempt]))).toEqual({ [early.id]: 2, [late.id]: 2 });
  }, 15_000);

  it.each([
    ['with ScheduleModule imported by the app', true],
    ['without ScheduleModule', false],
  ])('polls on its own schedule %s', async (_name, withSchedule) => {
    const { app, b, publish, row } = await start({ worker: { enabled: true, pollIntervalMs: 20 } }, { withSchedule });
    if (withSchedule) {
      expect(app.module.get(SchedulerRegistry).getIntervals()).toContain(`outbox-worker:${app.table}`);
    }
    const { id } = await publish('plain');
    await eventually(() => b.calls.some((c) => c.message.id === id), 10_000, 'scheduled delivery');
    await eventually(async () => (await row(id)).status === 'delivered', 10_000, 'acknowledgement');
  });
});
