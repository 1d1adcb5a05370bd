import { Injectable } from '@nestjs/common';
import type { Logger as TypeOrmLogger } from 'typeorm';
import { OutboxHandler, type OutboxMessage } from '../../lib';
import { OUTBOX_STORE } from '../../lib/outbox.constants';
import type { OutboxStore } from '../../lib/store/outbox.store';
import { backends, rawDb, type RawDb } from '../fixtures/backends';
import { startWorkerProcess } from '../fixtures/child';
import { eventually } from '../fixtures/eventually';
import { createTestApp, outboxRows, type TestApp } from '../fixtures/test-app';

@Injectable()
class Seen {
  messages: OutboxMessage[] = [];
  @OutboxHandler('tz.check')
  async handle(m: OutboxMessage) {
    this.messages.push(m);
  }
}

/** Records the driver errors TypeORM logs, so a test can wait for one. */
class ErrorLog implements TypeOrmLogger {
  errors: unknown[] = [];
  logQueryError(error: unknown) {
    this.errors.push(error);
  }
  logQuery() {}
  logQuerySlow() {}
  logSchemaBuild() {}
  logMigration() {}
  log() {}
}

const mariadb = backends().includes('mariadb') ? describe : describe.skip;
// Skipped only when MariaDB is unreachable on a developer machine (global-setup fails CI instead).
mariadb('MariaDB specifics', () => {
  let app: TestApp;
  let admin: RawDb;
  beforeAll(async () => {
    admin = await rawDb('mariadb');
  });
  afterAll(() => admin.close());
  afterEach(() => app?.dispose());

  describe('with the session time zone away from UTC', () => {
    let savedGlobalZone: string;
    beforeAll(async () => {
      [{ zone: savedGlobalZone }] = await admin.query<{ zone: string }>('SELECT @@GLOBAL.time_zone AS zone');
      await admin.query(`SET GLOBAL time_zone = '+05:00'`); // every new session starts there
    });
    afterAll(() => admin.query('SET GLOBAL time_zone = ?', [savedGlobalZone]));

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
      app = await createTestApp({ backend: 'mariadb', providers: [Seen] });
      const [{ zone }] = await app.dataSource.query('SELECT @@SESSION.time_zone AS zone');
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
      app = await createTestApp({ backend: 'mariadb' });
      await app.dataSource.query(
        app.sql(`CREATE TABLE "${app.table}_log" ("event_id" varchar(36) NOT NULL, "attempt" integer NOT NULL, "pid" integer NOT NULL)`),
      );
      const { published } = await publishAll('work.item'); // the worker process's topic
      const child = startWorkerProcess(
        { backend: 'mariadb', table: app.table, mode: 'record', worker: { pollIntervalMs: 20 } },
        { TZ: 'America/New_York' },
      );
      try {
        await child.waitFor(/^READY$/);
        const log = await eventually(async () => {
          const rows = await app.raw.query<{ event_id: string }>(`SELECT "event_id" FROM "${app.table}_log"`);
          return rows.length >= 2 ? rows : undefined;
        }, 20_000, 'two deliveries');
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

  it('fenced writes by id lock no row they do not change: a producer holding an uncommitted delayed event blocks none of them (REPEATABLE READ)', async () => {
    app = await createTestApp({ backend: 'mariadb' });
    const store = app.module.get<OutboxStore>(OUTBOX_STORE);
    const ids = (
      await app.txHost.withTransaction(() =>
        app.outbox.publishMany(Array.from({ length: 12 }, (_, n) => ({ topic: 'tz.check', payload: { n } }))),
      )
    ).map((r) => r.id);
    const { token } = await store.claim({ batchSize: 12, leaseMs: 60_000, maxAttempts: 5 });

    // The application's transaction, at the server's default isolation, has inserted an event due in
    // a minute — inside the range the lease condition covers — and has not committed yet.
    const producer = await rawDb('mariadb');
    try {
      await producer.query('START TRANSACTION');
      await producer.query(
        `INSERT INTO "${app.table}" ("id", "topic", "payload", "headers", "available_at", "completed_handlers", "created_at")
         VALUES (UUID(), 'tz.check', '{}', '{}', UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE, '[]', UTC_TIMESTAMP(6))`,
      );
      const failure = { error: 'x', completedHandlers: [], deadLetter: false, retryDelayMs: 0 };
      const writes = [
        () => store.acknowledge(ids.slice(0, 10), token),
        () => store.fail(ids[10], token, failure),
        () => store.release(ids[11], token, true),
      ];
      for (const write of writes) {
        let settled = false;
        const done = write().finally(() => (settled = true));
        // Through the claim index, the write stalled here until the producer ended (it shows as
        // "Updating", not as a lock wait); by primary key it finishes at once.
        await eventually(() => settled, 10_000, 'the write to finish while the producer transaction is open');
        await done;
      }
      expect((await outboxRows(app)).filter((r) => ids.includes(String(r.id))).map((r) => r.status).sort()).toEqual([
        ...Array(10).fill('delivered'),
        'pending',
        'pending',
      ]);
    } finally {
      await producer.query('ROLLBACK');
      await producer.close();
    }
  });

  it('retries an acknowledgement that hit a lock wait timeout (1205) instead of failing it', async () => {
    const [{ wait }] = await admin.query<{ wait: number }>('SELECT @@GLOBAL.innodb_lock_wait_timeout AS wait');
    await admin.query('SET GLOBAL innodb_lock_wait_timeout = 1');
    const errors = new ErrorLog();
    const locker = await rawDb('mariadb');
    try {
      app = await createTestApp({ backend: 'mariadb', providers: [Seen], typeormLogger: errors });
      const { id } = await app.txHost.withTransaction(() => app.outbox.publish('tz.check', {}));
      const store = app.module.get<OutboxStore>(OUTBOX_STORE);
      const { token } = await store.claim({ batchSize: 1, leaseMs: 60_000, maxAttempts: 5 });

      // Another session holds the row lock, so the acknowledgement waits and times out...
      await locker.query('START TRANSACTION');
      await locker.query(`SELECT "id" FROM "${app.table}" WHERE "id" = ? FOR UPDATE`, [id]);
      const acknowledged = store.acknowledge([id], token);
      await eventually(
        () =>
          errors.errors.some((e) => {
            const error = e as { errno?: number; driverError?: { errno?: number } };
            return (error.errno ?? error.driverError?.errno) === 1205;
          }),
        20_000,
        'a lock wait timeout',
      );
      // ...and once the lock is gone, the retried statement goes through.
      await locker.query('COMMIT');
      await expect(acknowledged).resolves.toBe(1);
      expect((await outboxRows(app)).find((r) => r.id === id)).toMatchObject({ status: 'delivered' });
    } finally {
      await locker.close();
      await admin.query('SET GLOBAL innodb_lock_wait_timeout = ?', [wait]);
    }
  });

  // RELIABILITY case 26: a publishMany larger than max_allowed_packet is split by bytes, not only by row count.
  it('commits a publishMany whose events together exceed max_allowed_packet, in several statements', async () => {
    app = await createTestApp({ backend: 'mariadb' });
    const [{ packet }] = await admin.query<{ packet: number }>('SELECT @@max_allowed_packet AS packet');
    const filler = 'x'.repeat(90_000);
    const count = Math.ceil((1.5 * Number(packet)) / filler.length);
    const published = await app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: count }, (_, i) => ({ topic: 'tz.check', payload: { i, filler } }))),
    );
    expect(published.filter((p) => p.inserted)).toHaveLength(count);
    const [{ n, bytes }] = await app.raw.query<{ n: number; bytes: number }>(
      `SELECT COUNT(*) AS n, SUM(LENGTH(\`payload\`)) AS bytes FROM \`${app.table}\``,
    );
    expect(Number(n)).toBe(count);
    expect(Number(bytes)).toBeGreaterThan(Number(packet));
  });
});
