import { Injectable } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { randomUUID } from 'node:crypto';
import type { Logger as TypeOrmLogger } from 'typeorm';
import { OutboxConfigurationError, OutboxHandler, OutboxNonRetryableError, type OutboxMessage } from '../../../lib';
import { backends, type BackendName } from '../../fixtures/backends';
import { eventually } from '../../fixtures/eventually';
import { createTestApp, type TestApp, type TestAppOptions } from '../../fixtures/test-app';

@Injectable()
class Sink {
  @OutboxHandler('kept')
  async keep(_m: OutboxMessage) {}

  @OutboxHandler('doomed')
  doom(_m: OutboxMessage) {
    throw new OutboxNonRetryableError('never deliverable');
  }
}

/** The database's now, `minutes` ago, as the column type of each backend wants it. */
function minutesAgo(backend: BackendName, minutes: number): string {
  if (backend === 'postgres') return `now() - interval '${minutes} minutes'`;
  if (backend === 'mariadb') return `UTC_TIMESTAMP(6) - INTERVAL ${minutes} MINUTE`;
  return `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '${minutes < 0 ? '+' : '-'}${Math.abs(minutes)} minutes')`;
}

const HOUR_MS = 3_600_000;

/** Statements the app's DataSource ran, as its TypeORM logger saw them. */
function statementLog(): { statements: string[]; logger: TypeOrmLogger } {
  const statements: string[] = [];
  const ignore = () => undefined;
  return {
    statements,
    logger: {
      logQuery: (query: string) => void statements.push(query),
      logQueryError: ignore,
      logQuerySlow: ignore,
      logSchemaBuild: ignore,
      logMigration: ignore,
      log: ignore,
    },
  };
}

/**
 * DESIGN 13, "delivered rows are removed by retention in bounded batches": what retention deletes (by
 * the database clock), in batches of at most `batchSize`, by several instances at once, and when.
 */
describe.each(backends())('retention on %s', (backend) => {
  const apps: TestApp[] = [];
  afterEach(async () => {
    // The first app made the table (and the SQLite file): it goes last.
    for (const app of apps.splice(0).reverse()) await app.dispose();
  });

  async function start(options: Omit<TestAppOptions, 'backend'> = {}): Promise<TestApp> {
    const app = await createTestApp({ backend, providers: [Sink], ...options });
    apps.push(app);
    return app;
  }

  const setProcessedAt = (app: TestApp, ids: string[], minutes: number) =>
    app.raw.query(
      app.sql(
        `UPDATE "${app.table}" SET "processed_at" = ${minutesAgo(backend, minutes)} WHERE "id" IN (${ids.map(() => '?').join(', ')})`,
      ),
      ids,
    );

  /** Finished rows written directly, `minutes` old, as many as `count`. */
  async function insertFinished(
    app: TestApp,
    status: 'delivered' | 'dead',
    minutes: number,
    count: number,
  ): Promise<string[]> {
    const ids = Array.from({ length: count }, () => randomUUID());
    const at = minutesAgo(backend, minutes);
    const values = ids.map(() => `(?, 'kept', '{}', '{}', '${status}', 1, ${at}, '[]', ${at}, ${at})`).join(', ');
    await app.raw.query(
      app.sql(
        `INSERT INTO "${app.table}" ("id", "topic", "payload", "headers", "status", "attempts", "available_at",
           "completed_handlers", "created_at", "processed_at") VALUES ${values}`,
      ),
      ids,
    );
    return ids;
  }

  const idsLeft = async (app: TestApp) =>
    (await app.raw.query<{ id: string }>(`SELECT "id" FROM "${app.table}"`)).map((row) => String(row.id)).sort();

  it('deletes delivered rows older than deliveredMs by the database clock, and nothing pending, in flight, younger or dead', async () => {
    const app = await start({ outbox: { retention: { deliveredMs: HOUR_MS } } });
    const [old, young, fresh, dead] = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([
        { topic: 'kept', payload: { n: 1 } },
        { topic: 'kept', payload: { n: 2 } },
        { topic: 'kept', payload: { n: 3 } },
        { topic: 'doomed', payload: { n: 4 } },
      ]),
    );
    expect(await app.worker.drain()).toMatchObject({ delivered: 3, deadLettered: 1 });
    const [scheduled, inFlight] = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([
        { topic: 'kept', payload: { n: 5 }, delayMs: HOUR_MS },
        { topic: 'kept', payload: { n: 6 } },
      ]),
    );
    await app.raw.query(
      app.sql(
        `UPDATE "${app.table}" SET "claim_token" = ?, "available_at" = ${minutesAgo(backend, -30)} WHERE "id" = ?`,
      ),
      [randomUUID(), inFlight.id],
    );
    // On either side of the hour by the database's clock; the unfinished rows carry an old time too,
    // so only their status keeps them.
    await setProcessedAt(app, [old.id], 61);
    await setProcessedAt(app, [young.id], 59);
    await setProcessedAt(app, [dead.id, scheduled.id, inFlight.id], 60 * 24 * 365);

    expect(await app.worker.purge()).toEqual({ delivered: 1, dead: 0 });
    expect(await idsLeft(app)).toEqual([young.id, fresh.id, dead.id, scheduled.id, inFlight.id].sort());
    expect(app.logger.matching(/^Retention deleted/).map((l) => [l.message, l.context])).toEqual([
      [`Retention deleted 1 delivered and 0 dead event(s) from ${app.table}`, 'OutboxRetention'],
    ]);

    // A pass that deletes nothing logs nothing.
    expect(await app.worker.purge()).toEqual({ delivered: 0, dead: 0 });
    expect(app.logger.matching(/^Retention deleted/)).toHaveLength(1);
  });

  it('ends the dedupe window of a key with its row: published again after retention, it is a new event', async () => {
    const app = await start({ outbox: { retention: { deliveredMs: HOUR_MS } } });
    const publish = () =>
      app.txHost.withTransaction(() => app.outbox.publish('kept', { n: 1 }, { dedupeKey: 'order-7' }));
    const first = await publish();
    expect(await publish()).toEqual({ id: first.id, inserted: false });
    await app.worker.drain();
    await setProcessedAt(app, [first.id], 61);
    expect(await app.worker.purge()).toEqual({ delivered: 1, dead: 0 });

    const again = await publish();
    expect(again.inserted).toBe(true);
    expect(again.id).not.toBe(first.id);
  });

  it('deletes dead letters only with deadMs, older than it', async () => {
    const keeping = await start({ outbox: { retention: { deliveredMs: HOUR_MS } } });
    const ancient = await insertFinished(keeping, 'dead', 60 * 24 * 3650, 2);
    expect(await keeping.worker.purge()).toEqual({ delivered: 0, dead: 0 });
    expect(await idsLeft(keeping)).toEqual([...ancient].sort());

    const app = await start({ outbox: { retention: { deliveredMs: HOUR_MS, deadMs: 2 * HOUR_MS } } });
    await insertFinished(app, 'dead', 121, 2);
    const youngDead = await insertFinished(app, 'dead', 119, 1);
    await insertFinished(app, 'delivered', 90, 1);
    expect(await app.worker.purge()).toEqual({ delivered: 1, dead: 2 });
    expect(await idsLeft(app)).toEqual(youngDead);
    expect(app.logger.matching(/^Retention deleted/).map((l) => l.message)).toEqual([
      `Retention deleted 1 delivered and 2 dead event(s) from ${app.table}`,
    ]);
  });

  it('deletes in batches of at most batchSize, one statement each, until a batch comes back short', async () => {
    const { statements, logger } = statementLog();
    const app = await start({ outbox: { retention: { deliveredMs: HOUR_MS, batchSize: 3 } }, typeormLogger: logger });
    await insertFinished(app, 'delivered', 120, 10);
    const young = await insertFinished(app, 'delivered', 30, 2);
    statements.length = 0;

    expect(await app.worker.purge()).toEqual({ delivered: 10, dead: 0 });
    expect(await idsLeft(app)).toEqual(young.sort());
    // 3 + 3 + 3 + 1: had any statement deleted more than 3, fewer statements would have emptied the
    // table (the pass stops at the first batch short of 3).
    const deletes = statements.filter((q) => /^\s*(WITH .*)?DELETE FROM/s.test(q));
    // Then one for the rows of idle ordered keys (there are none: it comes back short at once) — on
    // MariaDB the statement that locks them, with nothing to delete after it.
    const keysTable = `${app.table}_keys`;
    const idleKeys = statements.filter((q) => q.includes(keysTable) && /DELETE FROM|SKIP LOCKED/.test(q));
    expect(idleKeys).toHaveLength(1);
    expect(deletes.filter((q) => !q.includes(keysTable))).toHaveLength(4);
    for (const q of deletes) expect(q).toContain(app.table);
  });

  it('lets two instances purge the same table at once, deleting every old row exactly once', async () => {
    const first = await start({ outbox: { retention: { deliveredMs: HOUR_MS, deadMs: HOUR_MS, batchSize: 7 } } });
    const second = await start({
      table: first.table,
      sqlitePath: first.sqlitePath,
      outbox: { retention: { deliveredMs: HOUR_MS, deadMs: HOUR_MS, batchSize: 5 } },
    });
    let expected = { delivered: 0, dead: 0 };
    const total = { delivered: 0, dead: 0 };
    for (let round = 0; round < 4; round++) {
      await insertFinished(first, 'delivered', 120 + round, 200);
      await insertFinished(first, 'dead', 120 + round, 40);
      expected = { delivered: expected.delivered + 200, dead: expected.dead + 40 };
      const results = await Promise.all(
        Array.from({ length: 4 }, () => [first.worker.purge(), second.worker.purge()]).flat(),
      );
      for (const r of results) {
        total.delivered += r.delivered;
        total.dead += r.dead;
      }
      expect(total).toEqual(expected);
      expect(await idsLeft(first)).toEqual([]);
    }
  });

  it('runs beside a worker claiming and acknowledging on the same table, each finishing its own work', async () => {
    const app = await start({
      outbox: { worker: { batchSize: 20 }, retention: { deliveredMs: HOUR_MS, batchSize: 50 } },
    });
    const purger = await start({
      table: app.table,
      sqlitePath: app.sqlitePath,
      outbox: { retention: { deliveredMs: HOUR_MS, batchSize: 50 } },
    });
    await insertFinished(app, 'delivered', 120, 1500);
    const published = await app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: 300 }, (_, n) => ({ topic: 'kept', payload: { n } }))),
    );

    const [drained, purged] = await Promise.all([app.worker.drain(), purger.worker.purge()]);
    expect(drained).toMatchObject({ delivered: 300, failed: 0, lostLeases: 0 });
    expect(purged).toEqual({ delivered: 1500, dead: 0 });
    const left = await app.raw.query<{ id: string; status: string }>(`SELECT "id", "status" FROM "${app.table}"`);
    expect(left.map((row) => String(row.id)).sort()).toEqual(published.map((p) => p.id).sort());
    expect(new Set(left.map((row) => row.status))).toEqual(new Set(['delivered']));
  });

  it('reads the retention index in order, without a scan or a sort, with 100,000 rows kept', async () => {
    const app = await start({ outbox: { retention: { deliveredMs: HOUR_MS, batchSize: 10_000 } } });
    const rows = 100_000;
    // Delivered rows one second apart (the older half past the hour), every tenth one pending.
    const columns = `"id", "topic", "payload", "headers", "status", "attempts", "available_at", "completed_handlers", "created_at", "processed_at"`;
    if (backend === 'postgres') {
      await app.raw.query(
        `INSERT INTO "${app.table}" (${columns}) SELECT gen_random_uuid(), 'bulk', '{}', '{}',
           CASE WHEN n % 10 = 0 THEN 'pending' ELSE 'delivered' END, 1, now(), '[]', now(), now() - n * interval '1 second'
         FROM generate_series(1, ${rows}) AS n`,
      );
      await app.raw.query(`ANALYZE "${app.table}"`);
    } else if (backend === 'mariadb') {
      await app.raw.query(
        app.sql(`INSERT INTO "${app.table}" (${columns}) SELECT UUID(), 'bulk', '{}', '{}',
           IF(seq % 10 = 0, 'pending', 'delivered'), 1, UTC_TIMESTAMP(6), '[]', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) - INTERVAL seq SECOND
         FROM seq_1_to_${rows}`),
      );
      await app.raw.query(app.sql(`ANALYZE TABLE "${app.table}"`));
    } else {
      await app.raw.query(
        `INSERT INTO "${app.table}" (${columns}) WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < ${rows})
         SELECT lower(hex(randomblob(16))), 'bulk', '{}', '{}', CASE WHEN n % 10 = 0 THEN 'pending' ELSE 'delivered' END, 1,
           ${minutesAgo(backend, 0)}, '[]', ${minutesAgo(backend, 0)}, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || n || ' seconds')
         FROM seq`,
      );
      await app.raw.query(`ANALYZE`);
    }
    const store = app.store;
    const index = `${app.table}_retention_idx`;
    for (const status of ['delivered', 'dead'] as const) {
      const { sql, params } = store.purgeSelection({
        status,
        olderThanMs: HOUR_MS,
        batchSize: 1000,
      });
      if (backend === 'postgres') {
        const plan = (await app.raw.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${sql}`, params))
          .map((r) => r['QUERY PLAN'])
          .join('\n');
        expect(plan).toMatch(new RegExp(`Index (Only )?Scan using ${index}`));
        expect(plan).not.toMatch(/Seq Scan|Sort/);
      } else if (backend === 'mariadb') {
        const [row] = await app.raw.query<{ type: string; key: string; Extra: string | null }>(
          `EXPLAIN ${sql}`,
          params,
        );
        expect(row.key).toBe(index);
        expect(row.type).toBe('range');
        expect(row.Extra ?? '').not.toMatch(/filesort/i);
      } else {
        const plan = (await app.raw.query<{ detail: string }>(`EXPLAIN QUERY PLAN ${sql}`, params))
          .map((r) => r.detail)
          .join('\n');
        expect(plan).toMatch(new RegExp(`USING (COVERING )?INDEX ${index}`));
        expect(plan).not.toMatch(/SCAN|TEMP B-TREE/);
      }
    }
    // The delivered rows more than an hour old when the pass ran: a row ages while the test runs.
    const { delivered } = await app.worker.purge();
    expect(delivered).toBeGreaterThanOrEqual(86_760);
    expect(delivered).toBeLessThan(86_760 + 54);
  }, 60_000);

  it('runs on the worker’s schedule, and logs the pass', async () => {
    const app = await start({
      withSchedule: true,
      outbox: {
        worker: { enabled: true, pollIntervalMs: 60_000 },
        retention: { deliveredMs: HOUR_MS, intervalMs: 1000 },
      },
    });
    expect(app.module.get(SchedulerRegistry).getIntervals()).toContain(`outbox-retention:${app.table}`);
    await insertFinished(app, 'delivered', 90, 4);
    await eventually(
      () => app.logger.matching(/^Retention deleted 4 delivered and 0 dead/).length > 0,
      20_000,
      'the scheduled pass',
    );
    expect(await idsLeft(app)).toEqual([]);
    await app.close();
    expect(app.module.get(SchedulerRegistry).getIntervals()).not.toContain(`outbox-retention:${app.table}`);
  });

  it('schedules nothing with retention: false, where purge() says retention is off', async () => {
    const app = await start({
      withSchedule: true,
      outbox: { worker: { enabled: true, pollIntervalMs: 60_000 }, retention: false },
    });
    const intervals = app.module.get(SchedulerRegistry).getIntervals();
    expect(intervals).toContain(`outbox-worker:${app.table}`);
    expect(intervals).not.toContain(`outbox-retention:${app.table}`);
    const refused = await app.worker.purge().catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OutboxConfigurationError);
    expect((refused as Error).message).toMatch(/"retention".*retention is off/);
  });

  it('is not scheduled where the worker is disabled, yet purge() runs a pass there', async () => {
    const app = await start({ withSchedule: true, outbox: { retention: { deliveredMs: HOUR_MS } } });
    expect(app.module.get(SchedulerRegistry).getIntervals()).toEqual([]);
    await insertFinished(app, 'delivered', 61, 2);
    expect(await app.worker.purge()).toEqual({ delivered: 2, dead: 0 });
  });
});
