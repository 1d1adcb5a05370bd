import { Injectable } from '@nestjs/common';
import { OutboxHandler, OutboxOperations, type OutboxMessage } from '../../../lib';
import { backends, type BackendName } from '../../fixtures/backends';
import { startWorkerProcess } from '../../fixtures/child';
import { eventually } from '../../fixtures/eventually';
import { createTestApp, onMariadb, outboxRows, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Upstream {
  calls: OutboxMessage[] = [];
  @OutboxHandler('sync')
  handle(m: OutboxMessage) {
    this.calls.push(m);
    throw new Error('upstream answered 503');
  }
}

/** Throws what a JSON.parse of gzip bytes does, a lone surrogate and a megabyte of text. */
@Injectable()
class Garbled {
  @OutboxHandler('garbled')
  handle() {
    throw new Error(
      `Unexpected token '\u0000', "\u001f\u008b\b\u0000" is not valid JSON; cut \ud83d; ${'x'.repeat(1_000_000)}`,
    );
  }
}

@Injectable()
class Seen {
  messages: OutboxMessage[] = [];
  @OutboxHandler('tz.check')
  handle(m: OutboxMessage) {
    this.messages.push(m);
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
      providers: [Upstream, Garbled, Seen],
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

  it('gives a handler the createdAt its row holds, to the millisecond, its microseconds cut off', async () => {
    const app = await start(3);
    const [onTheMs, withMicros] = await app.txHost.withTransaction(() =>
      app.outbox.publishMany([1, 2].map((n) => ({ topic: 'tz.check', payload: { n } }))),
    );
    // SQLite stores milliseconds; the others keep microseconds, which a Date cannot hold.
    const stored = (micros: string) =>
      backend === 'postgres'
        ? `'2026-01-02T03:04:05.678${micros}Z'::timestamptz`
        : backend === 'mariadb'
          ? `'2026-01-02 03:04:05.678${micros}'`
          : `'2026-01-02T03:04:05.678Z'`;
    for (const [event, micros] of [
      [onTheMs, '000'],
      [withMicros, '999'],
    ] as const) {
      await app.dataSource.query(
        app.sql(`UPDATE "${app.table}" SET "created_at" = ${stored(micros)} WHERE "id" = '${event.id}'`),
      );
    }
    await app.worker.drain();
    const seen = app.module.get(Seen).messages;
    expect(seen.map((m) => [m.id, m.createdAt.toISOString()]).sort()).toEqual(
      [onTheMs.id, withMicros.id].map((id) => [id, '2026-01-02T03:04:05.678Z']).sort(),
    );
  });

  // RELIABILITY case 30: the dead letter keeps the real error of the last attempt.
  // RELIABILITY case 34: PostgreSQL refused the NUL, so the failure was never written and the event waited out its lease.
  it('records an error text with NUL, a lone surrogate and a megabyte of text: cleaned, bounded, with its backoff', async () => {
    const app = await start(3, undefined, 60_000);
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish('garbled', {}));
    // The jitter pinned at half the ceiling (30 s): a full-jitter draw under 1 s would look like no backoff.
    const random = jest.spyOn(Math, 'random').mockReturnValue(0.5);
    try {
      expect(await app.worker.drain()).toMatchObject({ failed: 1, lostLeases: 0 });
    } finally {
      random.mockRestore();
    }
    const [row] = await outboxRows(app);
    expect(row).toMatchObject({ id, status: 'pending', attempts: 1, claim_token: null, expired_attempts: 0 });
    const error = String(row.last_error);
    expect(
      error.startsWith(
        `Garbled.handle: Error: Unexpected token '\\u0000', "\u001f\u008b\b\\u0000" is not valid JSON; cut \ufffd; xxx`,
      ),
    ).toBe(true);
    expect(error).toHaveLength(4000);
    // Retried after its backoff, not after a lease: the failure was written.
    expect(instant(row.available_at) - instant(row.created_at)).toBeGreaterThan(1000);
    const history = (await app.module.get(OutboxOperations).get(id))!.history;
    expect(history.map((h) => [h.outcome, h.error?.slice(0, 40)])).toEqual([['failed', error.slice(0, 40)]]);
  });

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
    expect(dead).toMatchObject({
      last_error: null,
      note: 'attempt 2 of 2 ended without a recorded outcome, and no attempt is left',
    });
  });

  it('keeps the real error of an attempt when the next one outlives its lease, and notes the expiry apart', async () => {
    const app = await start(2, undefined, 60_000);
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish('sync', {}));
    expect(await app.worker.drain()).toMatchObject({ failed: 1 });
    await app.raw.query(`UPDATE "${app.table}" SET "available_at" = "created_at"`);
    // A worker takes attempt 2 and is never heard of again.
    const store = app.store;
    expect((await store.claim({ batchSize: 10, leaseMs: 1000, maxAttempts: 2 })).events).toHaveLength(1);
    await eventually(async () => (await app.worker.drain()).deadLettered === 1, 10_000, 'the lease to expire');
    const [dead] = await outboxRows(app);
    expect(dead).toMatchObject({
      id,
      status: 'dead',
      attempts: 2,
      last_error: 'Upstream.handle: Error: upstream answered 503',
      note: expect.stringMatching(/^attempt 2 of 2 did not finish before its lease expired/) as string,
    });
    expect(Number(dead.expired_attempts)).toBe(1);
    expect(
      app.logger.matching(
        /attempt 2 of 2 did not finish .*; last error: Upstream.handle: Error: upstream answered 503$/,
      ),
    ).toHaveLength(1);
  });
});

onMariadb('stored times on MariaDB', ({ admin, disposeAfter }) => {
  let app: TestApp;

  describe('with the session time zone away from UTC', () => {
    let savedGlobalZone: string;
    beforeAll(async () => {
      [{ zone: savedGlobalZone }] = await admin().query<{ zone: string }>('SELECT @@GLOBAL.time_zone AS zone');
      await admin().query(`SET GLOBAL time_zone = '+05:00'`); // every new session starts there
    });
    afterAll(() => admin().query('SET GLOBAL time_zone = ?', [savedGlobalZone]));

    async function publishAll(topic: string) {
      const inHalfAnHour = new Date(Date.now() + 30 * 60_000);
      const published = await app.txHost.withTransaction(async () => ({
        now: await app.outbox.publish(topic, { when: 'now' }),
        delayed: await app.outbox.publish(topic, { when: 'delayed' }, { delayMs: 60_000 }),
        future: await app.outbox.publish(topic, { when: 'future' }, { availableAt: inHalfAnHour }),
        past: await app.outbox.publish(topic, { when: 'past' }, { availableAt: new Date(Date.now() - 5000) }),
      }));
      return { published, inHalfAnHour };
    }

    it('stores UTC and compares with UTC_TIMESTAMP: due times, delays and createdAt stay right', async () => {
      app = disposeAfter(await createTestApp({ backend: 'mariadb', providers: [Seen] }));
      const [{ zone }] = await app.dataSource.query<Array<{ zone: string }>>('SELECT @@SESSION.time_zone AS zone');
      expect(zone).toBe('+05:00');

      const { published, inHalfAnHour } = await publishAll('tz.check');
      await app.worker.drain();
      const seen = app.module.get(Seen).messages;
      expect(seen.map((m) => (m.payload as { when: string }).when).sort()).toEqual(['now', 'past']);
      for (const m of seen) expect(Math.abs(m.createdAt.getTime() - Date.now())).toBeLessThan(60_000);

      const rows = await outboxRows(app);
      const future = rows.find((r) => r.id === published.future.id)!;
      // DATETIME(6) holds the instant in UTC, whatever the session thinks.
      expect(String(future.available_at).slice(0, 23)).toBe(inHalfAnHour.toISOString().replace('T', ' ').slice(0, 23));
    });

    it('claims the same events from a worker process whose TZ is America/New_York', async () => {
      app = disposeAfter(await createTestApp({ backend: 'mariadb' }));
      await app.dataSource.query(
        app.sql(
          `CREATE TABLE "${app.table}_log" ("event_id" varchar(36) NOT NULL, "attempt" integer NOT NULL, "pid" integer NOT NULL)`,
        ),
      );
      const { published } = await publishAll('work.item'); // the worker process's topic
      const child = startWorkerProcess(
        { backend: 'mariadb', table: app.table, mode: 'record', worker: { pollIntervalMs: 20 } },
        { TZ: 'America/New_York' },
      );
      try {
        await child.waitFor(/^READY$/);
        const log = await eventually(
          async () => {
            const rows = await app.raw.query<{ event_id: string }>(`SELECT "event_id" FROM "${app.table}_log"`);
            return rows.length >= 2 ? rows : undefined;
          },
          20_000,
          'two deliveries',
        );
        // Claimed in one batch with whatever else looked due: had the zone leaked, the delayed and
        // future events would have come along.
        expect(log.map((r) => r.event_id).sort()).toEqual([published.now.id, published.past.id].sort());
        expect((await app.outbox.counts()).pending).toBe(2);
      } finally {
        child.process.kill('SIGKILL');
        await child.exited;
      }
    });
  });
});
