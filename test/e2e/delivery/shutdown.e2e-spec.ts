import { Injectable } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { OutboxHandler, OutboxShutdownError, type OutboxMessage, type OutboxTransport } from '../../../lib';
import { backends } from '../../fixtures/backends';
import { deferred, eventually } from '../../fixtures/eventually';
import { createTestApp, outboxRows, type TestApp, type TestAppOptions } from '../../fixtures/test-app';

@Injectable()
class Slow {
  entered = deferred();
  gate = deferred();
  calls: OutboxMessage[] = [];
  aborted = false;
  abortReason: unknown;

  @OutboxHandler('slow')
  async handle(m: OutboxMessage) {
    this.calls.push(m);
    this.entered.resolve();
    m.signal.addEventListener('abort', () => {
      this.aborted = true;
      this.abortReason = m.signal.reason;
      this.gate.resolve();
    });
    await this.gate.promise;
  }
}

@Injectable()
class Fast {
  calls: OutboxMessage[] = [];

  @OutboxHandler('fast')
  handle(m: OutboxMessage) {
    this.calls.push(m);
  }
}

describe.each(backends())('graceful shutdown on %s', (backend) => {
  let app: TestApp;
  let slow: Slow;
  /** Statements the store issued, with whether the DataSource was still initialised. */
  let statements: boolean[];

  async function start(worker: Record<string, number | boolean>, extra: Partial<TestAppOptions> = {}) {
    app = await createTestApp({ backend, providers: [Slow, Fast], ...extra, outbox: { ...extra.outbox, worker } });
    slow = app.module.get(Slow);
    statements = [];
    const create = app.dataSource.createQueryRunner.bind(app.dataSource);
    app.dataSource.createQueryRunner = (...args) => {
      statements.push(app.dataSource.isInitialized);
      return create(...args);
    };
  }
  afterEach(() => app.dispose());

  const publishSlow = (n: number) =>
    app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: n }, (_, i) => ({ topic: 'slow', payload: { i } }))),
    );

  it('lets the running handler finish, writes its acknowledgement, releases unstarted events, then stops', async () => {
    await start({ enabled: true, pollIntervalMs: 10, concurrency: 1, shutdownTimeoutMs: 30_000 });
    const published = await publishSlow(3);
    await slow.entered.promise;
    const started = slow.calls[0].id;

    let closed = false;
    const closing = app.close().then(() => (closed = true));
    // The DataSource must stay up while the handler runs: the raw connection sees the claim held.
    for (let i = 0; i < 3; i++) await app.raw.query('SELECT 1');
    expect(closed).toBe(false);
    slow.gate.resolve();
    await closing;

    const rows = await outboxRows(app);
    const byId = new Map(rows.map((r) => [r.id, r]));
    expect(byId.get(started)).toMatchObject({ status: 'delivered', claim_token: null });
    for (const { id } of published.filter((p) => p.id !== started)) {
      // Claimed in the same batch but never started: given back with the attempt uncounted.
      expect(byId.get(id)).toMatchObject({ status: 'pending', claim_token: null, attempts: 0 });
    }
    expect(slow.calls).toHaveLength(1);
    expect(slow.aborted).toBe(false);
    expect(statements.length).toBeGreaterThan(0);
    expect(statements.every((initialised) => initialised)).toBe(true);
    expect(app.logger.matching(/failed/)).toEqual([]);
    // One line when shutdown starts waiting, one when it ends.
    expect(app.logger.matching(/^Shutdown/).map((l) => l.message)).toEqual([
      'Shutdown: waiting up to 30000 ms for 1 running handler(s); 2 claimed event(s) not started go back to the outbox',
      expect.stringMatching(/^Shutdown finished after \d+ ms: 1 event\(s\) delivered, 2 released$/),
    ]);
  });

  it('after shutdownTimeoutMs aborts the handler, releases its lease, and runs no SQL after the DataSource is gone', async () => {
    await start({ enabled: false, shutdownTimeoutMs: 100 });
    const [event] = await publishSlow(1);
    const draining = app.worker.drain();
    await slow.entered.promise;
    await app.close();
    await draining;

    expect(slow.aborted).toBe(true);
    expect(slow.abortReason).toBeInstanceOf(OutboxShutdownError);
    const [row] = await outboxRows(app);
    expect(row).toMatchObject({ id: event.id, status: 'pending', claim_token: null, attempts: 1 });
    expect(statements.every((initialised) => initialised)).toBe(true);
    expect(app.logger.matching(/still running after 100 ms; releasing/)).toHaveLength(1);
    expect(app.logger.matching(/skipped: the worker has shut down/)).toHaveLength(1);
    expect(app.logger.matching(/^Shutdown: waiting|^Shutdown stopped/).map((l) => l.message)).toEqual([
      'Shutdown: waiting up to 100 ms for 1 running handler(s); 0 claimed event(s) not started go back to the outbox',
      expect.stringMatching(/^Shutdown stopped waiting after \d+ ms: 0 event\(s\) delivered, \d+ released$/),
    ]);
  });

  /** The same table in a fresh application, as after a restart; its Slow handler returns at once. */
  async function restart(): Promise<TestApp> {
    const next = await createTestApp({
      backend,
      table: app.table,
      sqlitePath: app.sqlitePath,
      providers: [Slow, Fast],
      outbox: { retry: { maxAttempts: 5 } },
    });
    next.module.get(Slow).gate.resolve();
    return next;
  }

  async function closeRestarted(next: TestApp) {
    await next.close();
    await next.raw.close();
  }

  it('at shutdownTimeoutMs writes the acknowledgements of the batch-mates that finished: nothing runs twice after a restart', async () => {
    await start({ enabled: false, concurrency: 10, shutdownTimeoutMs: 100 });
    const [slowEvent] = await publishSlow(1);
    const fast = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([0, 1, 2, 3].map((i) => ({ topic: 'fast', payload: { i } }))),
    );
    const draining = app.worker.drain();
    await slow.entered.promise;
    await eventually(() => app.module.get(Fast).calls.length === 4, 10_000, 'the four fast handlers');
    await app.close();
    await draining;

    const byId = new Map((await outboxRows(app)).map((r) => [r.id, r]));
    for (const { id } of fast) expect(byId.get(id)).toMatchObject({ status: 'delivered', claim_token: null });
    expect(byId.get(slowEvent.id)).toMatchObject({ status: 'pending', claim_token: null, attempts: 1 });
    expect(statements.every((initialised) => initialised)).toBe(true);

    const next = await restart();
    try {
      expect(await next.worker.drain()).toMatchObject({ delivered: 1 });
      expect(next.module.get(Fast).calls).toHaveLength(0);
      expect(next.module.get(Slow).calls.map((m) => m.id)).toEqual([slowEvent.id]);
    } finally {
      await closeRestarted(next);
    }
  });

  it('at shutdownTimeoutMs gives back the claimed events that never started, uncounted and due at once', async () => {
    await start({ enabled: false, concurrency: 1, shutdownTimeoutMs: 100 });
    const published = await publishSlow(5);
    const draining = app.worker.drain();
    await slow.entered.promise;
    const started = slow.calls[0].id;
    await app.close();
    await draining;

    expect(slow.calls).toHaveLength(1);
    const byId = new Map((await outboxRows(app)).map((r) => [r.id, r]));
    expect(byId.get(started)).toMatchObject({ status: 'pending', claim_token: null, attempts: 1 });
    const unstarted = published.filter((p) => p.id !== started);
    for (const { id } of unstarted) {
      expect(byId.get(id)).toMatchObject({ status: 'pending', claim_token: null, attempts: 0 });
    }
    // Only the outcome of the handler that ended after the worker closed goes unwritten.
    expect(app.logger.matching(/skipped: the worker has shut down/)).toHaveLength(1);
    expect(statements.every((initialised) => initialised)).toBe(true);

    // Due at once, not after the 60 s lease: a restarted worker delivers all five now, the four
    // given back on their first attempt.
    const next = await restart();
    try {
      expect(await next.worker.drain()).toMatchObject({ delivered: 5 });
      const attempts = new Map(next.module.get(Slow).calls.map((m) => [m.id, m.attempt]));
      expect(attempts.get(started)).toBe(2);
      for (const { id } of unstarted) expect(attempts.get(id)).toBe(1);
    } finally {
      await closeRestarted(next);
    }
  });

  it('removes its interval from the application’s scheduler', async () => {
    await start({ enabled: true, pollIntervalMs: 60_000 }, { withSchedule: true });
    const registry = app.module.get(SchedulerRegistry);
    expect(registry.getIntervals()).toContain(`outbox-worker:${app.table}`);
    await app.close();
    expect(registry.getIntervals()).not.toContain(`outbox-worker:${app.table}`);
  });

  it('stops every transport, logging one that fails to stop', async () => {
    const stopped: string[] = [];
    const transport = (name: string, stop: () => Promise<void>): OutboxTransport => ({
      name,
      send: () => Promise.resolve(),
      beforeApplicationShutdown: stop,
    });
    await start(
      {},
      {
        outbox: {
          transports: [
            transport('broken', () => Promise.reject(new Error('socket already gone'))),
            transport('fine', () => {
              stopped.push('fine');
              return Promise.resolve();
            }),
          ],
        },
      },
    );
    await app.close();
    expect(stopped).toEqual(['fine']);
    expect(app.logger.matching(/^Outbox transport broken failed to stop: Error: socket already gone$/)).toHaveLength(1);
  });
});
