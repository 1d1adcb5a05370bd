import { Injectable, type Type } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import type { Logger as TypeOrmLogger } from 'typeorm';
import {
  OutboxConfigurationError,
  OutboxEvents,
  OutboxHandler,
  OutboxLeaseLostError,
  type OutboxLifecycleEvent,
  type OutboxMessage,
} from '../../../lib';
import type { OutboxStore } from '../../../lib/store/outbox.store';
import { backends, type BackendName, isSqlite } from '../../fixtures/backends';
import { deferred, eventually } from '../../fixtures/eventually';
import { createTestApp, outboxRows, type TestApp, type TestAppOptions } from '../../fixtures/test-app';
import { drained } from '../../fixtures/drain-result';

const LEASE_MS = 1200;

/** The database clock `seconds` from now, as each backend stores times. */
const NOW_PLUS: Record<BackendName, (seconds: number) => string> = {
  postgres: (s) => `now() + interval '${s} seconds'`,
  mariadb: (s) => `UTC_TIMESTAMP(6) + INTERVAL ${s} SECOND`,
  sqlite3: (s) => `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '${s} seconds')`,
  'better-sqlite3': (s) => `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '${s} seconds')`,
};

/** Matches the renewal statement only: no other write starts its SET with `available_at`. */
const RENEWAL = /^\s*(WITH .*)?UPDATE .* SET [`"]available_at[`"] = /s;

@Injectable()
class Recorder {
  readonly seen: OutboxLifecycleEvent[] = [];
  constructor(events: OutboxEvents) {
    events.events$.subscribe((event) => this.seen.push(event));
  }

  only<T extends OutboxLifecycleEvent['type']>(type: T): Array<Extract<OutboxLifecycleEvent, { type: T }>> {
    return this.seen.filter((e): e is Extract<OutboxLifecycleEvent, { type: T }> => e.type === type);
  }
}

@Injectable()
class Work {
  /** How long the 'long' handler works. */
  workMs = 3 * LEASE_MS;
  readonly started: OutboxMessage[] = [];
  readonly firstStarted = deferred<OutboxMessage>();
  /** Abort reasons, by event id. */
  readonly aborted = new Map<string, unknown>();
  readonly firstAborted = deferred<unknown>();
  readonly finished: string[] = [];
}

@Injectable()
class LongHandlers {
  constructor(private readonly w: Work) {}

  /** Three leases of work, well within its own timeout, far beyond the lease. */
  @OutboxHandler('long', { timeoutMs: 20_000 })
  async long(m: OutboxMessage) {
    this.w.started.push(m);
    this.w.firstStarted.resolve(m);
    // The handler's own work: a call that answers after a while, given up when the signal says so.
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, this.w.workMs);
      m.signal.addEventListener('abort', () => {
        this.w.aborted.set(m.id, m.signal.reason);
        this.w.firstAborted.resolve(m.signal.reason);
        clearTimeout(timer);
        resolve();
      });
    });
    this.w.finished.push(m.id);
  }
}

@Injectable()
class MediumHandlers {
  /** 450 ms of work: with a 1 s lease and no renewal, too long for a second event of the claim to start. */
  @OutboxHandler('medium')
  async medium() {
    await new Promise((resolve) => setTimeout(resolve, 450));
  }
}

@Injectable()
class StarvedHandlers {
  readonly attempts: number[] = [];
  readonly returned = deferred<void>();
  /** What the handler does before it succeeds. */
  whileRunning: () => Promise<void> = () => Promise.resolve();

  @OutboxHandler('starved')
  async starved(m: OutboxMessage) {
    this.attempts.push(m.attempt);
    await this.whileRunning();
    this.returned.resolve();
  }
}

describe.each(backends())('lease renewal on %s', (backend) => {
  let app: TestApp;
  let work: Work;
  let recorder: Recorder;
  let store: OutboxStore;
  let statements: Array<{ sql: string; params: unknown[]; at: number }>;

  async function start(
    worker: NonNullable<TestAppOptions['outbox']>['worker'] = {},
    handlers: Type<unknown> = LongHandlers,
    extraTypeOrm?: TestAppOptions['extraTypeOrm'],
  ) {
    statements = [];
    const typeormLogger: TypeOrmLogger = {
      logQuery: (sql, params) => void statements.push({ sql, params: params ?? [], at: Date.now() }),
      logQueryError: () => undefined,
      logQuerySlow: () => undefined,
      logSchemaBuild: () => undefined,
      logMigration: () => undefined,
      log: () => undefined,
    };
    app = await createTestApp({
      backend,
      providers: [Work, handlers, Recorder],
      outbox: { worker: { leaseMs: LEASE_MS, ...worker }, retry: { maxAttempts: 3, initialDelayMs: 0, maxDelayMs: 0 } },
      typeormLogger,
      extraTypeOrm,
    });
    work = app.module.get(Work);
    recorder = app.module.get(Recorder);
    store = app.store;
  }
  afterEach(async () => {
    await app?.dispose();
    app = undefined as unknown as TestApp;
  });

  const publishMany = (topic: string, count: number) =>
    app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: count }, (_, n) => ({ topic, payload: { n } }))),
    );
  const row = async (id: string) => (await app.raw.query(`SELECT * FROM "${app.table}" WHERE "id" = ?`, [id]))[0];
  const renewals = () => statements.filter((s) => RENEWAL.test(s.sql));

  it('keeps the lease of a handler that runs three leases long: delivered once, attempt 1, and no other claim gets it meanwhile', async () => {
    await start({ concurrency: 3, targetConcurrency: 3 });
    const published = await publishMany('long', 3);
    const ids = published.map((p) => p.id);
    const startedAt = Date.now();
    const draining = app.worker.drain();
    await work.firstStarted.promise;

    // Another worker keeps trying, well past the lease the claim was given at first.
    let tries = 0;
    while (Date.now() - startedAt < 2.5 * LEASE_MS) {
      const other = await store.claim({ batchSize: 10, leaseMs: 60_000, maxAttempts: 3 });
      expect(other.events).toEqual([]);
      tries++;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(tries).toBeGreaterThan(5);

    expect(await draining).toEqual(drained({ delivered: 3 }));
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(3 * LEASE_MS);
    expect(work.started.map((m) => m.attempt)).toEqual([1, 1, 1]);
    expect(work.finished.sort()).toEqual([...ids].sort());
    expect(work.aborted.size).toBe(0);
    for (const id of ids) expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 1, claim_token: null });
    expect(recorder.only('lease.lost')).toEqual([]);
    expect(app.logger.matching(/lease renewal/)).toEqual([]);

    // One statement per renewal for the whole batch, every third of the lease: not one per event.
    const sent = renewals();
    expect(sent.length).toBeGreaterThanOrEqual(5);
    expect(sent.length).toBeLessThanOrEqual(12);
    for (const id of ids) expect(JSON.stringify(sent[0].params)).toContain(id);
  });

  it('aborts the signal of a handler whose lease another worker took, writes none of its outcome, and keeps renewing its batch-mate', async () => {
    await start({ concurrency: 2, targetConcurrency: 2 });
    await publishMany('long', 2);
    const draining = app.worker.drain();
    await eventually(() => work.started.length === 2, 10_000, 'both handlers running');
    const [taken, kept] = work.started;

    // What another worker does once the lease has expired: a claim of its own, with its own lease.
    const otherToken = randomUUID();
    await app.raw.query(
      `UPDATE "${app.table}" SET "claim_token" = ?, "available_at" = ${NOW_PLUS[backend](60)}, "attempts" = 2 WHERE "id" = ?`,
      [otherToken, taken.id],
    );
    const leftByTheTest = await row(taken.id);

    const reason = await work.firstAborted.promise;
    expect(reason).toBeInstanceOf(OutboxLeaseLostError);
    expect(reason).toMatchObject({ name: 'OutboxLeaseLostError', eventId: taken.id });
    expect(String((reason as Error).message)).toMatch(new RegExp(`lease of outbox event ${taken.id} was lost`));
    expect([...work.aborted.keys()]).toEqual([taken.id]);

    expect(await draining).toEqual(drained({ delivered: 1, lostLeases: 1 }));
    // The lost one: not acknowledged, not failed, not released — the row is as the other worker left it.
    expect(await row(taken.id)).toEqual(leftByTheTest);
    expect(leftByTheTest).toMatchObject({ status: 'pending', claim_token: otherToken, attempts: 2 });
    // Its batch-mate kept its lease to the end.
    expect(await row(kept.id)).toMatchObject({ status: 'delivered', attempts: 1, claim_token: null });
    expect(work.finished.sort()).toEqual([taken.id, kept.id].sort());

    const lost = recorder.only('lease.lost');
    expect(lost).toEqual([
      { type: 'lease.lost', at: expect.any(Date) as Date, ids: [taken.id], count: 1, what: 'renew' },
    ]);
    expect(
      app.logger.matching(
        new RegExp(`^Outbox lease renewal of event\\(s\\) ${taken.id} rejected: their lease expired`),
      ),
    ).toHaveLength(1);
    // Neither a recorded failure nor a handler outcome for the lost one reached the table.
    expect(recorder.only('retry.scheduled')).toEqual([]);
  });

  it('renews a lease that ran out while nothing renewed it, as long as no other claim took the event: delivered once, attempt 1', async () => {
    await start({ concurrency: 1 });
    const [{ id }] = await publishMany('long', 1);
    const draining = app.worker.drain();
    await work.firstStarted.promise;
    // As if the worker or the database had stalled past the lease: it has run out by the database clock.
    await app.raw.query(`UPDATE "${app.table}" SET "available_at" = ${NOW_PLUS[backend](-60)} WHERE "id" = ?`, [id]);
    expect(await row(id)).toMatchObject({ status: 'pending', attempts: 1 });

    expect(await draining).toEqual(drained({ delivered: 1 }));
    expect(work.started.map((m) => [m.id, m.attempt])).toEqual([[id, 1]]);
    expect(work.aborted.size).toBe(0);
    expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 1, expired_attempts: 0, note: null });
    expect(recorder.only('lease.lost')).toEqual([]);
  });

  // RELIABILITY 33: the app's own transactions hold every connection (SQLite: its one connection) past the lease.
  it('records the success of a handler whose renewal and acknowledgement waited past the lease for a connection: it runs once', async () => {
    const held = deferred<void>();
    let holding = 0;
    await start({ concurrency: 1 }, StarvedHandlers, { poolSize: 3 });
    const starved = app.module.get(StarvedHandlers);
    starved.whileRunning = async () => {
      // Every connection of the pool (one on SQLite) is in a transaction of the app's until `held` resolves.
      const transactions = isSqlite(backend) ? 1 : 3;
      for (let i = 0; i < transactions; i++) {
        void app.txHost.withTransaction(async () => {
          await app.txHost.tx.query('SELECT 1');
          holding++;
          await held.promise;
        });
      }
      await eventually(() => holding === transactions, 10_000, 'the app holding every connection');
    };
    const [{ id }] = await publishMany('starved', 1);
    const draining = app.worker.drain();
    await starved.returned.promise;
    // The handler has succeeded; its acknowledgement and the renewal wait for a connection until the
    // lease has run out by the database clock.
    await eventually(
      async () =>
        (
          await app.raw.query(
            `SELECT "id" FROM "${app.table}" WHERE "id" = ? AND "available_at" < ${NOW_PLUS[backend](0)}`,
            [id],
          )
        ).length === 1,
      10_000,
      'the lease to run out',
    );
    held.resolve();

    expect(await draining).toEqual(drained({ delivered: 1 }));
    expect(starved.attempts).toEqual([1]);
    expect(await row(id)).toMatchObject({ status: 'delivered', attempts: 1, expired_attempts: 0 });
    expect(await app.worker.drain()).toMatchObject({ delivered: 0 });
    expect(starved.attempts).toEqual([1]);
    expect(recorder.only('lease.lost')).toEqual([]);
  });

  it('with renewLease off: no renewal, and an event the lease cannot cover is given back unstarted', async () => {
    await start({ renewLease: false, leaseMs: 1000, concurrency: 1 }, MediumHandlers);
    await publishMany('medium', 2);
    const result = await app.worker.drain();
    // The first takes 450 ms of the 1 s lease; the second cannot fit its 500 ms timeout in the rest.
    expect(result).toEqual(drained({ delivered: 2, released: 1 }));
    expect(recorder.only('released')).toMatchObject([{ uncounted: true, why: 'lease-budget' }]);
    expect(renewals()).toEqual([]);
    expect((await outboxRows(app)).map((r) => [r.status, r.attempts])).toEqual([
      ['delivered', 1],
      ['delivered', 1],
    ]);
  });

  it('with renewLease on, the same claim runs both: the lease is extended while the batch runs', async () => {
    await start({ leaseMs: 1000, concurrency: 1 }, MediumHandlers);
    await publishMany('medium', 2);
    expect(await app.worker.drain()).toEqual(drained({ delivered: 2 }));
    expect(recorder.only('released')).toEqual([]);
    expect(renewals().length).toBeGreaterThanOrEqual(1);
  });

  it('with renewLease off, refuses at start-up a handler timeout the lease cannot cover', async () => {
    const error = await createTestApp({
      backend,
      providers: [Work, LongHandlers],
      outbox: { worker: { renewLease: false, leaseMs: LEASE_MS } },
    }).then(
      (opened) => {
        app = opened;
        throw new Error('the application started');
      },
      (refused: unknown) => refused,
    );
    expect(error).toBeInstanceOf(OutboxConfigurationError);
    expect((error as OutboxConfigurationError).option).toBe("@OutboxHandler('long') on LongHandlers.long: timeoutMs");
    expect((error as Error).message).toMatch(/from 1 to 1200, got 20000/);
  });

  it('stops renewing at shutdown: no renewal statement after app.close()', async () => {
    await start({ shutdownTimeoutMs: 100 });
    work.workMs = 60_000;
    await publishMany('long', 1);
    const draining = app.worker.drain();
    await work.firstStarted.promise;
    await eventually(() => renewals().length >= 1, 10_000, 'a renewal');
    await app.close();
    const closedAt = Date.now();
    // Shutdown aborted the handler and gave its event back.
    expect(await work.firstAborted.promise).toBeInstanceOf(Error);
    await draining;
    await new Promise((resolve) => setTimeout(resolve, 2 * LEASE_MS));
    expect(statements.filter((s) => s.at > closedAt)).toEqual([]);
  });
});
