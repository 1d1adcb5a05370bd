import { Injectable } from '@nestjs/common';
import { OutboxHandler, type OutboxMessage } from '../../../lib';
import { backends, describeEachServer, sqliteBackends } from '../../fixtures/backends';
import { startWorkerProcess, type RunningChild } from '../../fixtures/child';
import { eventually } from '../../fixtures/eventually';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';

@Injectable()
class LocalHandler {
  seen: OutboxMessage[] = [];
  @OutboxHandler('work.item')
  handle(m: OutboxMessage) {
    this.seen.push(m);
  }
}

async function createLog(app: TestApp) {
  await app.dataSource.query(
    app.sql(
      `CREATE TABLE "${app.table}_log" ("event_id" varchar(36) NOT NULL, "attempt" integer NOT NULL, "pid" integer NOT NULL)`,
    ),
  );
}

async function logRows(app: TestApp) {
  return app.raw.query<{ event_id: string; attempt: number; pid: number }>(`SELECT * FROM "${app.table}_log"`);
}

const children: RunningChild[] = [];
afterEach(async () => {
  for (const child of children.splice(0)) {
    if (child.process.exitCode === null && child.process.signalCode === null) child.process.kill('SIGKILL');
    await child.exited;
  }
});

describe.each(backends())('a worker process killed with SIGKILL on %s', (backend) => {
  let app: TestApp;
  afterEach(() => app.dispose());

  async function killMidHandler(maxAttempts: number) {
    app = await createTestApp({
      backend,
      providers: [LocalHandler],
      outbox: { worker: { leaseMs: 1500 }, retry: { maxAttempts, initialDelayMs: 0, maxDelayMs: 0 } },
    });
    await createLog(app);
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish('work.item', { n: 1 }));
    const child = startWorkerProcess({
      backend,
      table: app.table,
      sqlitePath: app.sqlitePath,
      mode: 'hang',
      worker: { pollIntervalMs: 20, leaseMs: 1500, handlerTimeoutMs: 1000 },
      maxAttempts,
    });
    children.push(child);
    await child.waitFor(new RegExp(`^STARTED ${id} 1$`));
    child.process.kill('SIGKILL');
    expect((await child.exited).signal).toBe('SIGKILL');

    // The attempt was counted when the dead process claimed it, and the row is still leased.
    const [leased] = await outboxRows(app);
    expect(leased).toMatchObject({ id, status: 'pending', attempts: 1 });
    expect(leased.claim_token).not.toBeNull();
    return id;
  }

  it('leaves the attempt counted; the event is delivered again, with the same id, after the lease', async () => {
    const id = await killMidHandler(3);
    const local = app.module.get(LocalHandler);
    await eventually(async () => (await app.worker.drain()).delivered === 1, 15_000, 'redelivery after the lease');
    expect(local.seen.map((m) => [m.id, m.attempt])).toEqual([[id, 2]]);
    expect(await outboxRows(app)).toMatchObject([{ id, status: 'delivered', attempts: 2 }]);
  });

  it('dead-letters the event when the killed attempt was its last', async () => {
    const id = await killMidHandler(1);
    await eventually(async () => (await app.worker.drain()).deadLettered === 1, 15_000, 'dead letter after the lease');
    expect(app.module.get(LocalHandler).seen).toHaveLength(0);
    const [row] = await outboxRows(app);
    expect(row).toMatchObject({ id, status: 'dead', attempts: 1 });
    expect(row.note).toMatch(/attempt 1 of 1 did not finish before its lease expired/);
    expect(row).toMatchObject({ expired_attempts: 1, last_expired_attempt: 1, last_error: null });
  });
});

/** Starts `count` worker processes on the app's table and waits until each is polling. */
async function startWorkers(app: TestApp, count: number, worker: Record<string, number>, holdMs = 0) {
  const workers = Array.from({ length: count }, () =>
    startWorkerProcess({
      backend: app.backend,
      table: app.table,
      sqlitePath: app.sqlitePath,
      mode: 'record',
      worker,
      holdMs,
    }),
  );
  children.push(...workers);
  await Promise.all(workers.map((w) => w.waitFor(/^READY$/)));
  return workers;
}

/**
 * Publishes `total` events in transactions of `chunk`, returning their ids. Each transaction reads
 * before it writes, as business code does (on SQLite, a deferred transaction that read first cannot
 * take the write lock once another process has committed).
 */
async function publishItems(app: TestApp, total: number, chunk: number): Promise<string[]> {
  const ids: string[] = [];
  for (let start = 0; start < total; start += chunk) {
    const results = await app.txHost.withTransaction(async () => {
      await app.txHost.tx.query(app.sql(`SELECT count(*) AS n FROM "${app.table}"`));
      return app.outbox.publishMany(
        Array.from({ length: Math.min(chunk, total - start) }, (_, i) => ({
          topic: 'work.item',
          payload: { n: start + i },
        })),
      );
    });
    ids.push(...results.map((r) => r.id));
  }
  return ids;
}

/** Every event delivered exactly once, each on its first attempt, by more than one process. */
async function auditExactlyOnce(app: TestApp, ids: string[], processes: number) {
  const log = await logRows(app);
  expect(log).toHaveLength(ids.length);
  expect(new Set(log.map((r) => `${r.event_id}#${r.attempt}`)).size).toBe(ids.length);
  expect(new Set(log.map((r) => r.event_id))).toEqual(new Set(ids));
  expect(log.every((r) => Number(r.attempt) === 1)).toBe(true);
  expect(new Set(log.map((r) => r.pid)).size).toBeGreaterThan(1);
  expect(new Set(log.map((r) => r.pid)).size).toBeLessThanOrEqual(processes);
  const [{ n }] = await app.raw.query<{ n: string }>(
    `SELECT count(*) AS n FROM "${app.table}" WHERE "status" = 'delivered' AND "attempts" = 1`,
  );
  expect(Number(n)).toBe(ids.length);
}

describeEachServer('competing worker processes on %s', (backend) => {
  let app: TestApp;
  afterEach(() => app.dispose());

  it('4 processes drain 5,000 events published while they run: no duplicate attempt, no loss, no deadlock surfaced', async () => {
    app = await createTestApp({ backend });
    await createLog(app);
    // All polling before the first event exists, so none drains everything alone; the producer keeps
    // inserting while the claims run.
    const workers = await startWorkers(app, 4, {
      pollIntervalMs: 20,
      batchSize: 100,
      concurrency: 10,
      leaseMs: 30_000,
    });
    const ids = await publishItems(app, 5000, 250);
    await eventually(async () => (await app.outbox.counts()).delivered === ids.length, 80_000, 'all delivered');
    await auditExactlyOnce(app, ids, 4);
    for (const worker of workers) expect(worker.stderr()).not.toMatch(/deadlock|lock wait|failed/i);
  });
});

describe.each(sqliteBackends())('two worker processes sharing one SQLite file (%s)', (backend) => {
  let app: TestApp;
  afterEach(() => app.dispose());

  it('drain 2,000 events with no duplicate attempt and no loss, while this process keeps publishing', async () => {
    app = await createTestApp({ backend });
    await createLog(app);
    // Writes to one file are serialised, and a process waiting for the lock backs off while the other
    // takes it again at once: with handlers that cost nothing, one process can claim every batch. Each
    // handler takes 5 ms, so a batch keeps its process busy, not the lock, and the other claims the next.
    const workers = await startWorkers(
      app,
      2,
      { pollIntervalMs: 20, batchSize: 50, concurrency: 10, leaseMs: 30_000 },
      5,
    );
    // This process's transactions write the same file the workers claim from.
    const ids = await publishItems(app, 2000, 100);
    await eventually(async () => (await app.outbox.counts()).delivered === ids.length, 60_000, 'all delivered');
    await auditExactlyOnce(app, ids, 2);
    for (const worker of workers) expect(worker.stderr()).not.toMatch(/busy|locked|failed/i);
  });
});
