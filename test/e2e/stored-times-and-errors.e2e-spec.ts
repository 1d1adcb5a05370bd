import { Injectable } from '@nestjs/common';
import { OutboxHandler, type OutboxMessage } from '../../lib';
import { OUTBOX_STORE } from '../../lib/outbox.constants';
import type { OutboxStore } from '../../lib/store/outbox.store';
import { backends, type BackendName } from '../fixtures/backends';
import { eventually } from '../fixtures/eventually';
import { createTestApp, outboxRows, type TestApp } from '../fixtures/test-app';

@Injectable()
class Upstream {
  calls: OutboxMessage[] = [];
  @OutboxHandler('sync')
  async handle(m: OutboxMessage) {
    this.calls.push(m);
    throw new Error('upstream answered 503');
  }
}

/** A stored time as an instant, whatever form the raw driver returns it in. */
function instant(value: unknown): number {
  if (value instanceof Date) return value.getTime();
  const text = String(value);
  return new Date(/Z$/.test(text) ? text : `${text.replace(' ', 'T')}Z`).getTime();
}

/** Holds the open transaction for a while, the way a long request or report would. */
async function stall(app: TestApp, backend: BackendName): Promise<void> {
  if (backend === 'postgres') await app.txHost.tx.query('SELECT pg_sleep(1.2)');
  else if (backend === 'mariadb') await app.txHost.tx.query('SELECT SLEEP(1.2)');
  // SQLite has no sleep function: the transaction stays open while this process waits.
  else await new Promise((resolve) => setTimeout(resolve, 1200));
}

describe.each(backends())('stored times and errors on %s', (backend) => {
  const apps: TestApp[] = [];
  afterEach(async () => {
    for (const app of apps.splice(0).reverse()) await app.dispose();
  });

  async function start(maxAttempts: number, from?: TestApp, retryDelayMs = 0): Promise<TestApp> {
    const app = await createTestApp({
      backend,
      table: from?.table,
      sqlitePath: from?.sqlitePath,
      providers: [Upstream],
      outbox: { retry: { maxAttempts, initialDelayMs: retryDelayMs, maxDelayMs: retryDelayMs } },
    });
    if (from) await from.close();
    apps.push(app);
    return app;
  }

  // RELIABILITY case 28: delayMs counts from the publish call on every database, not from BEGIN.
  it('counts delayMs from the publish call, also late in a long transaction', async () => {
    const app = await start(3);
    let calledAt = 0;
    const { id } = await app.txHost.withTransaction(async () => {
      await app.txHost.tx.query(app.sql('SELECT 1'));
      await stall(app, backend);
      calledAt = Date.now();
      return app.outbox.publish('sync', {}, { delayMs: 2000 });
    });
    const [row] = (await outboxRows(app)).filter((r) => r.id === id);
    // The database and this process share one clock here; a few ms of slack for its resolution.
    expect(instant(row.available_at)).toBeGreaterThanOrEqual(calledAt + 2000 - 5);
  });

  // RELIABILITY case 30: the dead letter keeps the real error of the last attempt.
  it('dead-letters at claim an event whose attempts a lowered maxAttempts used up, keeping its real error', async () => {
    const first = await start(5, undefined, 60_000);
    const { id } = await first.txHost.withTransaction(() => first.outbox.publish('sync', {}));
    expect(await first.worker.drain()).toMatchObject({ failed: 1 });
    const [failed] = await outboxRows(first);
    expect(failed).toMatchObject({ status: 'pending', attempts: 1 });

    // The retry falls due under the next deployment, which allows fewer attempts than were used.
    await first.raw.query(`UPDATE "${first.table}" SET "available_at" = "created_at"`);
    const next = await start(1, first);
    expect(await next.worker.drain()).toMatchObject({ deadLettered: 1, delivered: 0 });
    expect(next.module.get(Upstream).calls).toEqual([]);
    const [dead] = await outboxRows(next);
    expect(dead).toMatchObject({ id, status: 'dead', attempts: 1 });
    expect(dead.last_error).toBe('Upstream.handle: Error: upstream answered 503');
    expect(next.logger.matching(/Dead-lettered outbox event .*upstream answered 503/)).toHaveLength(1);
  });

  it('says so when the last attempt was given back unfinished and left no error', async () => {
    const app = await start(2);
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish('sync', {}));
    // As a release at shutdown leaves the final attempt: counted, unleased, no error written.
    await app.raw.query(app.sql(`UPDATE "${app.table}" SET "attempts" = 2 WHERE "id" = ?`), [id]);
    expect(await app.worker.drain()).toMatchObject({ deadLettered: 1 });
    const [dead] = await outboxRows(app);
    expect(dead).toMatchObject({ status: 'dead', attempts: 2 });
    expect(dead).toMatchObject({ last_error: null, note: 'attempt 2 of 2 ended without a recorded outcome, and no attempt is left' });
  });

  it('keeps the real error of an attempt when the next one outlives its lease, and notes the expiry apart', async () => {
    const app = await start(2, undefined, 60_000);
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish('sync', {}));
    expect(await app.worker.drain()).toMatchObject({ failed: 1 });
    await app.raw.query(`UPDATE "${app.table}" SET "available_at" = "created_at"`);
    // A worker takes attempt 2 and is never heard of again.
    const store = app.module.get<OutboxStore>(OUTBOX_STORE);
    expect((await store.claim({ batchSize: 10, leaseMs: 1000, maxAttempts: 2 })).events).toHaveLength(1);
    await eventually(async () => (await app.worker.drain()).deadLettered === 1, 10_000, 'the lease to expire');
    const [dead] = await outboxRows(app);
    expect(dead).toMatchObject({
      id,
      status: 'dead',
      attempts: 2,
      last_error: 'Upstream.handle: Error: upstream answered 503',
      note: expect.stringMatching(/^attempt 2 of 2 did not finish before its lease expired/),
    });
    expect(Number(dead.expired_attempts)).toBe(1);
    expect(app.logger.matching(/attempt 2 of 2 did not finish .*; last error: Upstream.handle: Error: upstream answered 503$/)).toHaveLength(1);
  });
});
