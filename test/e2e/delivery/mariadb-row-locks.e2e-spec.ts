import type { Logger as TypeOrmLogger } from 'typeorm';
import { rawDb } from '../../fixtures/backends';
import { eventually } from '../../fixtures/eventually';
import { createTestApp, onMariadb, outboxRows, type TestApp } from '../../fixtures/test-app';

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

// MariaDB only: the locks InnoDB takes on the index a write reads through, and its lock wait timeout
// (1205), are MySQL/MariaDB behaviour; SQLite has one writer. Skipped when no MariaDB server is up.
onMariadb('the worker’s writes under InnoDB row locks on MariaDB', ({ admin, disposeAfter }) => {
  let app: TestApp;

  it('fenced writes by id lock no row they do not change: a producer holding an uncommitted delayed event blocks none of them (REPEATABLE READ)', async () => {
    app = disposeAfter(await createTestApp({ backend: 'mariadb' }));
    const store = app.store;
    const ids = (
      await app.txHost.withTransaction(() =>
        app.outbox.publishMany(Array.from({ length: 12 }, (_, n) => ({ topic: 'plain', payload: { n } }))),
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
         VALUES (UUID(), 'plain', '{}', '{}', UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE, '[]', UTC_TIMESTAMP(6))`,
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
      expect(
        (await outboxRows(app))
          .filter((r) => ids.includes(String(r.id)))
          .map((r) => r.status)
          .sort(),
      ).toEqual([...Array<string>(10).fill('delivered'), 'pending', 'pending']);
    } finally {
      await producer.query('ROLLBACK');
      await producer.close();
    }
  });

  it('retries an acknowledgement that hit a lock wait timeout (1205) instead of failing it', async () => {
    const [{ wait }] = await admin().query<{ wait: number }>('SELECT @@GLOBAL.innodb_lock_wait_timeout AS wait');
    await admin().query('SET GLOBAL innodb_lock_wait_timeout = 1');
    const errors = new ErrorLog();
    const locker = await rawDb('mariadb');
    try {
      app = disposeAfter(await createTestApp({ backend: 'mariadb', typeormLogger: errors }));
      const { id } = await app.txHost.withTransaction(() => app.outbox.publish('plain', {}));
      const store = app.store;
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
      await admin().query('SET GLOBAL innodb_lock_wait_timeout = ?', [wait]);
    }
  });
  it('two claims at once take every due row between them, also on a small table emptied again and again', async () => {
    // A small, churned table is where the optimizer would rather sort than read the claim index: a sort
    // locks every row it reads, and the other claim, skipping them, took nothing (3 + 0 of 5 rows).
    app = disposeAfter(await createTestApp({ backend: 'mariadb' }));
    const shortfalls: string[] = [];
    for (let round = 0; round < 150; round++) {
      await app.raw.query(`DELETE FROM "${app.table}"`);
      for (const ns of [
        [1, 2, 3],
        [4, 5],
      ])
        await app.txHost.withTransaction(() => app.outbox.publishMany(ns.map((n) => ({ topic: 't', payload: { n } }))));
      const claim = (batchSize: number) => app.store.claim({ batchSize, leaseMs: 60_000, maxAttempts: 5 });
      const [a, b] = await Promise.all([claim(3), claim(2)]);
      const taken = a.events.length + b.events.length;
      if (taken !== 5) shortfalls.push(`round ${round}: ${a.events.length} + ${b.events.length}`);
    }
    expect(shortfalls).toEqual([]);
  });

  describe('per-key order', () => {
    const ordered = { ordering: [{ topic: 'ordered.*' }] };
    /** Settles `write` while another transaction holds what it must not wait for. */
    async function settlesWhileHeld<T>(write: () => Promise<T>, what: string): Promise<T> {
      let settled = false;
      const done = write().finally(() => (settled = true));
      await eventually(() => settled, 10_000, what);
      return done;
    }

    it('an acknowledgement locks only its own keys: a publisher holding another key of a small keys table blocks none of it', async () => {
      // 200 keys, two events each; a claim of 100 fronts. On a keys table this small the promotion of the
      // new fronts, one UPDATE joining keys to events, read the keys' table whole and waited for every row
      // another transaction held: acknowledgements and publishers deadlocked (stop 32's CI).
      app = disposeAfter(await createTestApp({ backend: 'mariadb', outbox: ordered }));
      const key = (n: number) => `k-${n % 200}`;
      await app.txHost.withTransaction(() =>
        app.outbox.publishMany(
          Array.from({ length: 400 }, (_, n) => ({ topic: 'ordered.placed', payload: { n }, key: key(n) })),
        ),
      );
      const claim = await app.store.claim({ batchSize: 100, leaseMs: 60_000, maxAttempts: 5 });
      const claimedKeys = new Set(claim.events.map((e) => e.key!));
      expect(claimedKeys.size).toBe(100);
      const other = Array.from({ length: 200 }, (_, n) => key(n)).find((k) => !claimedKeys.has(k))!;

      const publisher = await rawDb('mariadb');
      try {
        await publisher.query('START TRANSACTION');
        await publisher.query(`SELECT "key" FROM "${app.table}_keys" WHERE "key" = ? FOR UPDATE`, [other]);
        const acknowledged = await settlesWhileHeld(
          () =>
            app.store.acknowledge(
              claim.events.map((e) => e.id),
              claim.token,
              [...claimedKeys],
            ),
          'the acknowledgement to finish while the publisher holds another key',
        );
        expect(acknowledged).toBe(100);
      } finally {
        await publisher.query('ROLLBACK');
        await publisher.close();
      }
      // Each claimed key moved on to its second event, now claimable; the other keys kept their fronts.
      const rows = await outboxRows(app);
      const byStatus = (status: string) => rows.filter((r) => r.status === status).length;
      expect([byStatus('delivered'), byStatus('pending'), byStatus('waiting')]).toEqual([100, 200, 100]);
    });
  });
});
