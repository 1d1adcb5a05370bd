import { Injectable } from '@nestjs/common';
import { OutboxHandler, type OutboxMessage } from '../../lib';
import { backends, sql } from '../fixtures/backends';
import { startWorkerProcess, type RunningChild } from '../fixtures/child';
import { eventually } from '../fixtures/eventually';
import { createTestApp, outboxRows, type TestApp } from '../fixtures/test-app';

@Injectable()
class LocalHandler {
  seen: OutboxMessage[] = [];
  @OutboxHandler('work.item')
  async handle(m: OutboxMessage) {
    this.seen.push(m);
  }
}

async function createLog(app: TestApp) {
  await app.dataSource.query(
    `CREATE TABLE "${app.table}_log" ("event_id" varchar(36) NOT NULL, "attempt" integer NOT NULL, "pid" integer NOT NULL)`,
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
    expect(row.last_error).toMatch(/attempt 1 of 1 did not finish before its lease expired/);
  });
});

const postgresOnly = backends().includes('postgres') ? describe : describe.skip;
// Skipped only when PostgreSQL is unreachable on a developer machine (global-setup fails CI instead).
postgresOnly('two worker processes on PostgreSQL', () => {
  let app: TestApp;
  afterEach(() => app.dispose());

  it('drain 2,000 events with no duplicate attempt and no loss', async () => {
    app = await createTestApp({ backend: 'postgres' });
    await createLog(app);
    const workers = [0, 1].map(() =>
      startWorkerProcess({
        backend: 'postgres',
        table: app.table,
        mode: 'record',
        worker: { pollIntervalMs: 20, batchSize: 50, concurrency: 10, leaseMs: 30_000 },
      }),
    );
    children.push(...workers);
    // Both polling before the first event exists, so neither drains everything alone.
    await Promise.all(workers.map((w) => w.waitFor(/^READY$/)));
    const total = 2000;
    const ids = new Set<string>();
    for (let chunk = 0; chunk < total; chunk += 500) {
      const results = await app.txHost.withTransaction(() =>
        app.outbox.publishMany(Array.from({ length: 500 }, (_, i) => ({ topic: 'work.item', payload: { n: chunk + i } }))),
      );
      results.forEach((r) => ids.add(r.id));
    }
    expect(ids.size).toBe(total);

    await eventually(async () => (await app.outbox.counts()).delivered === total, 60_000, 'all delivered');

    const log = await logRows(app);
    const attempts = new Set(log.map((r) => `${r.event_id}#${r.attempt}`));
    expect(log).toHaveLength(total);
    expect(attempts.size).toBe(total);
    expect(new Set(log.map((r) => r.event_id))).toEqual(ids);
    expect(log.every((r) => r.attempt === 1)).toBe(true);
    // Both processes took part.
    expect(new Set(log.map((r) => r.pid)).size).toBe(2);
    const rows = await app.raw.query<{ n: string }>(
      sql('postgres', `SELECT count(*) AS n FROM "${app.table}" WHERE "status" = 'delivered' AND "attempts" = 1`),
    );
    expect(Number(rows[0].n)).toBe(total);
  });
});
