import { Injectable } from '@nestjs/common';
import { config as rxjsConfig, map } from 'rxjs';
import {
  OutboxEvents,
  OutboxHandler,
  OutboxNonRetryableError,
  type OutboxLifecycleEvent,
  type OutboxMessage,
} from '../../../lib';
import { claimAsAnotherWorker } from '../../fixtures/another-claim';
import { backends, describeOn } from '../../fixtures/backends';
import { deferred, eventually } from '../../fixtures/eventually';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';
import { RETRY_TOMORROW } from '../../fixtures/retry';
import { drained } from '../../fixtures/drain-result';

/** Subscribes before the application boots, so it sees `worker.started` too. */
@Injectable()
class Recorder {
  readonly seen: OutboxLifecycleEvent[] = [];
  constructor(readonly events: OutboxEvents) {
    events.events$.subscribe((event) => this.seen.push(event));
  }

  /** The types of the events that concern one outbox event, in order. */
  trail(id: string): string[] {
    return this.about(id).map((e) => e.type);
  }

  about(id: string): OutboxLifecycleEvent[] {
    return this.seen.filter((e) => ('ids' in e ? e.ids.includes(id) : 'id' in e && e.id === id));
  }

  only<T extends OutboxLifecycleEvent['type']>(type: T): Array<Extract<OutboxLifecycleEvent, { type: T }>> {
    return this.seen.filter((e): e is Extract<OutboxLifecycleEvent, { type: T }> => e.type === type);
  }
}

@Injectable()
class Handlers {
  flakyCalls = 0;
  slowEntered = deferred();
  slowGate = deferred();
  slowIds: string[] = [];

  @OutboxHandler('ok')
  async ok() {}

  @OutboxHandler('ok.other')
  async okOther() {}

  @OutboxHandler('flaky')
  flaky() {
    if (++this.flakyCalls === 1) throw new Error('boom');
  }

  @OutboxHandler('always.fails')
  alwaysFails() {
    throw new Error('still broken');
  }

  @OutboxHandler('fatal')
  fatal() {
    throw new OutboxNonRetryableError('malformed order');
  }

  @OutboxHandler('slow')
  async slow(m: OutboxMessage) {
    this.slowIds.push(m.id);
    this.slowEntered.resolve();
    m.signal.addEventListener('abort', () => this.slowGate.resolve());
    await this.slowGate.promise;
  }
}

/** Every lease held now ends, by the database clock, as if its worker had stopped a minute ago. */
const MINUTE_AGO = {
  postgres: `now() - interval '1 minute'`,
  mariadb: 'UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE',
  sqlite3: `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-60 seconds')`,
  'better-sqlite3': `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-60 seconds')`,
};

describe.each(backends())('lifecycle events on %s', (backend) => {
  let app: TestApp;
  let recorder: Recorder;
  let handlers: Handlers;

  async function start(outbox: Parameters<typeof createTestApp>[0]['outbox'] = {}) {
    app = await createTestApp({ backend, providers: [Recorder, Handlers], outbox });
    recorder = app.module.get(Recorder);
    handlers = app.module.get(Handlers);
  }
  afterEach(() => app.dispose());

  const publish = (topic: string, payload: unknown = {}) =>
    app.txHost.withTransaction(() => app.outbox.publish(topic, payload));

  it('a delivered event: published after the commit, claimed, handler.succeeded, delivered', async () => {
    await start();
    const [first, second] = await app.txHost.withTransaction(async () => {
      const one = await app.outbox.publish('ok', { n: 1 });
      const [two] = await app.outbox.publishMany([{ topic: 'ok.other', payload: {} }]);
      // Nothing before the commit.
      expect(recorder.only('published')).toEqual([]);
      return [one, two];
    });
    expect(recorder.only('published')).toEqual([
      { type: 'published', at: expect.any(Date) as Date, ids: [first.id, second.id], topics: ['ok', 'ok.other'] },
    ]);
    await app.worker.drain();

    expect(recorder.trail(first.id)).toEqual(['published', 'claimed', 'handler.succeeded', 'delivered']);
    const [, claimed, succeeded, delivered] = recorder.about(first.id);
    expect(claimed).toEqual({
      type: 'claimed',
      at: expect.any(Date) as Date,
      token: expect.any(String) as string,
      count: 2,
      ids: expect.arrayContaining([first.id, second.id]) as string[],
      durationMs: expect.any(Number) as number,
    });
    expect((claimed as { durationMs: number }).durationMs).toBeGreaterThan(0);
    expect(succeeded).toEqual({
      type: 'handler.succeeded',
      at: expect.any(Date) as Date,
      id: first.id,
      topic: 'ok',
      handler: 'Handlers.ok',
      attempt: 1,
      durationMs: expect.any(Number) as number,
    });
    expect(delivered).toEqual({
      type: 'delivered',
      at: expect.any(Date) as Date,
      id: first.id,
      topic: 'ok',
      attempt: 1,
    });
    const [row] = (await outboxRows(app)).filter((r) => r.id === first.id);
    expect(row.status).toBe('delivered');
  });

  it('a failed attempt: handler.failed, then retry.scheduled with the delay and an approximate due time', async () => {
    await start({ retry: { maxAttempts: 3, ...RETRY_TOMORROW } });
    const { id } = await publish('flaky');
    const result = await app.worker.drain();
    expect(result.failed).toBe(1);

    expect(recorder.trail(id)).toEqual(['published', 'claimed', 'handler.failed', 'retry.scheduled']);
    const [, , failed, retry] = recorder.about(id);
    expect(failed).toEqual({
      type: 'handler.failed',
      at: expect.any(Date) as Date,
      id,
      topic: 'flaky',
      handler: 'Handlers.flaky',
      attempt: 1,
      durationMs: expect.any(Number) as number,
      error: 'Error: boom',
    });
    expect(retry).toMatchObject({
      type: 'retry.scheduled',
      id,
      topic: 'flaky',
      attempt: 1,
      error: 'Handlers.flaky: Error: boom',
      failedHandlers: ['Handlers.flaky'],
    });
    if (retry.type !== 'retry.scheduled') throw new Error('unreachable');
    expect(retry.delayMs).toBeGreaterThanOrEqual(0);
    expect(retry.delayMs).toBeLessThanOrEqual(RETRY_TOMORROW.initialDelayMs);
    // dueAt is computed just before `at`, from the same clock.
    expect(Math.abs(retry.dueAt.getTime() - (retry.at.getTime() + retry.delayMs))).toBeLessThan(1000);
    const [row] = await outboxRows(app);
    expect(row).toMatchObject({ status: 'pending', attempts: 1 });
  });

  it('dead letters, each with its reason: non-retryable, last attempt failed, no handler', async () => {
    await start({ retry: { maxAttempts: 1 } });
    const fatal = await publish('fatal');
    const spent = await publish('always.fails');
    const orphan = await publish('nobody.listens');
    const result = await app.worker.drain();
    expect(result.deadLettered).toBe(3);

    expect(recorder.trail(fatal.id)).toEqual(['published', 'claimed', 'handler.failed', 'dead-lettered']);
    expect(recorder.about(fatal.id)[3]).toEqual({
      type: 'dead-lettered',
      at: expect.any(Date) as Date,
      id: fatal.id,
      topic: 'fatal',
      attempt: 1,
      error: 'Handlers.fatal: OutboxNonRetryableError: malformed order',
      reason: 'non-retryable',
      failedHandlers: ['Handlers.fatal'],
    });
    expect(recorder.about(spent.id)[3]).toMatchObject({ type: 'dead-lettered', reason: 'handler', attempt: 1 });
    // No handler ran, so none failed: the dead letter says why.
    expect(recorder.trail(orphan.id)).toEqual(['published', 'claimed', 'dead-lettered']);
    expect(recorder.about(orphan.id)[2]).toMatchObject({
      reason: 'handler',
      failedHandlers: [],
      error: 'no handler or route for topic "nobody.listens" in this application',
    });
    expect((await outboxRows(app)).map((r) => r.status)).toEqual(['dead', 'dead', 'dead']);
  });

  it('a lease lost while the handler ran: another claim took the event, lease.lost on the acknowledgement; then the claim dead-letters the spent event', async () => {
    await start({ retry: { maxAttempts: 2 } });
    const { id } = await publish('slow');
    const draining = app.worker.drain();
    await handlers.slowEntered.promise;
    const expire = () =>
      app.raw.query(
        `UPDATE "${app.table}" SET "available_at" = ${MINUTE_AGO[backend]} WHERE "status" = 'pending' AND "claim_token" IS NOT NULL`,
      );
    // The lease runs out, another worker claims the event (its last attempt) and dies at once.
    await expire();
    expect(await claimAsAnotherWorker(app.store, [id], { batchSize: 10, leaseMs: 60_000, maxAttempts: 2 })).toEqual([
      id,
    ]);
    await expire();
    handlers.slowGate.resolve();
    const result = await draining;
    expect(result).toMatchObject({ delivered: 0, lostLeases: 1, deadLettered: 1 });

    expect(recorder.trail(id)).toEqual(['published', 'claimed', 'handler.succeeded', 'lease.lost', 'dead-lettered']);
    expect(recorder.about(id)[3]).toEqual({
      type: 'lease.lost',
      at: expect.any(Date) as Date,
      ids: [id],
      count: 1,
      what: 'acknowledge',
    });
    expect(recorder.about(id)[4]).toMatchObject({
      type: 'dead-lettered',
      reason: 'attempts-exhausted-at-claim',
      attempt: 2,
      failedHandlers: [],
    });
  });

  it('a graceful shutdown: the unstarted events are released, uncounted, why shutdown; worker.started and worker.stopped', async () => {
    await start({ worker: { enabled: true, pollIntervalMs: 10, concurrency: 1, shutdownTimeoutMs: 30_000 } });
    expect(recorder.only('worker.started')).toHaveLength(1);
    const published = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([0, 1, 2].map((i) => ({ topic: 'slow', payload: { i } }))),
    );
    await handlers.slowEntered.promise;
    // The handler may end once the worker's shutdown has begun (it stops starting handlers at once).
    const shutdownBegun = deferred();
    const beforeShutdown = app.worker.beforeApplicationShutdown.bind(app.worker);
    app.worker.beforeApplicationShutdown = () => {
      const stopping = beforeShutdown();
      shutdownBegun.resolve();
      return stopping;
    };
    const closing = app.close();
    await shutdownBegun.promise;
    handlers.slowGate.resolve();
    await closing;

    const [running] = handlers.slowIds;
    expect(handlers.slowIds).toHaveLength(1);
    const released = recorder.only('released');
    expect(released.flatMap((r) => r.ids).sort()).toEqual(
      published
        .map((p) => p.id)
        .filter((id) => id !== running)
        .sort(),
    );
    for (const r of released) expect(r).toMatchObject({ uncounted: true, why: 'shutdown' });
    expect(recorder.trail(running)).toEqual(['published', 'claimed', 'handler.succeeded', 'delivered']);
    expect(recorder.only('worker.stopped')).toEqual([
      { type: 'worker.stopped', at: expect.any(Date) as Date, timedOut: false },
    ]);
    expect(recorder.seen[recorder.seen.length - 1].type).toBe('worker.stopped');
  });

  it('a shutdown past its timeout: the running event released counted, the unstarted ones uncounted', async () => {
    await start({ worker: { enabled: false, concurrency: 1, shutdownTimeoutMs: 100 } });
    const published = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([0, 1, 2].map((i) => ({ topic: 'slow', payload: { i } }))),
    );
    const draining = app.worker.drain();
    await handlers.slowEntered.promise;
    await app.close();
    await draining;

    const [running] = handlers.slowIds;
    const unstarted = published.map((p) => p.id).filter((id) => id !== running);
    const released = recorder.only('released');
    expect(released).toContainEqual({
      type: 'released',
      at: expect.any(Date) as Date,
      ids: [running],
      uncounted: false,
      why: 'shutdown',
    });
    expect(released).toContainEqual({
      type: 'released',
      at: expect.any(Date) as Date,
      ids: expect.arrayContaining(unstarted) as string[],
      uncounted: true,
      why: 'shutdown',
    });
    expect(released).toHaveLength(2);
    // The worker was never scheduled (drain only): it neither started nor stopped.
    expect(recorder.only('worker.stopped')).toEqual([]);
  });

  it('a rollback publishes nothing; a rolled-back savepoint drops only its own events; a deduplicated publish is not published again', async () => {
    await start();
    await expect(
      app.txHost.withTransaction(async () => {
        await app.outbox.publish('ok', { lost: true });
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    expect(recorder.only('published')).toEqual([]);

    const runner = app.dataSource.createQueryRunner();
    let kept: string;
    try {
      await runner.startTransaction();
      kept = (await app.outbox.publish('ok', { kept: true }, { manager: runner.manager })).id;
      await runner.startTransaction(); // a savepoint
      await app.outbox.publish('ok', { dropped: true }, { manager: runner.manager });
      await runner.rollbackTransaction();
      await runner.commitTransaction();
    } finally {
      await runner.release();
    }
    expect(recorder.only('published')).toEqual([
      { type: 'published', at: expect.any(Date) as Date, ids: [kept], topics: ['ok'] },
    ]);

    const once = await app.txHost.withTransaction(() => app.outbox.publish('ok', {}, { dedupeKey: 'order-1' }));
    const again = await app.txHost.withTransaction(() => app.outbox.publish('ok', {}, { dedupeKey: 'order-1' }));
    expect(again).toEqual({ id: once.id, inserted: false });
    expect(recorder.only('published').map((p) => p.ids)).toEqual([[kept], [once.id]]);
  });

  it('subscribers that throw, reject, fail inside an operator or never finish change nothing, and the stream keeps flowing', async () => {
    const unhandled: unknown[] = [];
    const previous = rxjsConfig.onUnhandledError;
    // Where RxJS would send what escaped a subscriber (by default it rethrows from a timer, ending the process).
    rxjsConfig.onUnhandledError = (error) => unhandled.push(error);
    try {
      await start({ retry: { maxAttempts: 3, ...RETRY_TOMORROW } });
      const events = app.module.get(OutboxEvents);
      let throwingCalls = 0;
      events.events$.subscribe(() => {
        throwingCalls++;
        throw new Error('subscriber bug');
      });
      // eslint-disable-next-line @typescript-eslint/no-misused-promises -- deliberate: a rejecting subscriber is what OutboxEvents must isolate
      events.events$.subscribe(() => Promise.reject(new Error('async subscriber bug')));
      events.events$
        .pipe(
          map(() => {
            throw new Error('operator bug');
          }),
        )
        .subscribe(() => undefined);
      // eslint-disable-next-line @typescript-eslint/no-misused-promises -- deliberate: a subscriber whose promise never settles must hold nothing up
      events.ofType('delivered').subscribe(() => new Promise(() => undefined)); // never settles

      const ok = await app.txHost.withTransaction(() =>
        app.outbox.publishMany([0, 1, 2].map((i) => ({ topic: 'ok', payload: { i } }))),
      );
      const flaky = await publish('flaky');
      const result = await app.worker.drain();

      expect(result).toEqual(drained({ delivered: 3, failed: 1 }));
      for (const { id } of ok)
        expect(recorder.trail(id)).toEqual(['published', 'claimed', 'handler.succeeded', 'delivered']);
      expect(recorder.trail(flaky.id)).toEqual(['published', 'claimed', 'handler.failed', 'retry.scheduled']);
      // The throwing subscriber was called for every event, not only the first.
      expect(throwingCalls).toBe(recorder.seen.length);
      const rows = await outboxRows(app);
      expect(rows.map((r) => r.status).sort()).toEqual(['delivered', 'delivered', 'delivered', 'pending']);

      // Each failure was logged by the outbox; none reached RxJS's unhandled-error path.
      await eventually(
        () => app.logger.matching(/async subscriber bug/).length === recorder.seen.length,
        5_000,
        'the rejections',
      );
      expect(app.logger.matching(/OutboxEvents subscriber failed.*Error: subscriber bug/)).toHaveLength(
        recorder.seen.length,
      );
      // The operator's error ended only its own subscription, once.
      expect(app.logger.matching(/operator bug/)).toHaveLength(1);
      expect(unhandled).toEqual([]);
    } finally {
      rxjsConfig.onUnhandledError = previous;
    }
  });
});

describeOn('postgres')('lifecycle events of the PostgreSQL wake-up channel', () => {
  let app: TestApp;
  afterEach(() => app.dispose());

  it('wake-up.lost when the LISTEN connection is killed, wake-up.restored once it listens again', async () => {
    app = await createTestApp({
      backend: 'postgres',
      providers: [Recorder],
      outbox: { worker: { enabled: true, pollIntervalMs: 3_600_000 } },
    });
    const recorder = app.module.get(Recorder);
    const store = app.store;
    const killed = await eventually(() => store.wakeUp!.listenerPid, 10_000, 'the listener');
    await app.raw.query('SELECT pg_terminate_backend(?)', [killed]);
    await eventually(() => recorder.only('wake-up.restored').length > 0, 10_000, 'wake-up.restored');

    const wakeUps = recorder.seen.filter((e) => e.type.startsWith('wake-up.'));
    expect(wakeUps).toEqual([
      {
        type: 'wake-up.lost',
        at: expect.any(Date) as Date,
        side: 'listen',
        error: expect.stringMatching(/terminat|ended|Connection/i) as string,
      },
      { type: 'wake-up.restored', at: expect.any(Date) as Date, side: 'listen' },
    ]);
    expect(store.wakeUp!.listenerPid).not.toBe(killed);
  });
});
