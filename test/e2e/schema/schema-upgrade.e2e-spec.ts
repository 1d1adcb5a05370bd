import { Injectable } from '@nestjs/common';
import { DataSource, type DataSourceOptions } from 'typeorm';
import {
  createOutboxMigration,
  createOutboxMigrations,
  OutboxHandler,
  OutboxOperations,
  OutboxModule,
  OutboxSchemaOutdatedError,
  OutboxTableMissingError,
  OutboxValidationError,
  type OutboxMessage,
  type OutboxMigrationClass,
} from '../../../lib';
import { OutboxStore } from '../../../lib/store/outbox.store';
import { ErrorText } from '../../../lib/utils/error-text';
import { validateEvent } from '../../../lib/publishing/outbox.validation';
import { LEASE_EXPIRED } from '../../../lib/dialects/shared/claim-rules';
import { dialectForType } from '../../../lib/dialects/dialect-for-type';
import { outboxTable } from '../../../lib/dialects/shared/outbox-table';
import { OUTBOX_SCHEMA_VERSIONS } from '../../../lib/schema/outbox-migrations';
import {
  backends,
  describeOn,
  type BackendName,
  isSqlite,
  rawDb,
  type RawDb,
  removeSqliteFile,
  sql,
  sqliteFile,
  uniqueName,
} from '../../fixtures/backends';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { clsImports, createTestApp, typeOrmOptions, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Sink {
  seen: OutboxMessage[] = [];
  @OutboxHandler('upgrade')
  handle(m: OutboxMessage) {
    this.seen.push(m);
  }
}

/** Runs the given migrations on the table, as an application's DataSource at start-up does. */
async function migrate(
  backend: BackendName,
  table: string,
  sqlitePath: string | undefined,
  migrations: OutboxMigrationClass[],
) {
  const options = {
    ...typeOrmOptions(backend, table, sqlitePath),
    migrations,
    migrationsRun: true,
  } as DataSourceOptions;
  const ds = new DataSource(options);
  await ds.initialize();
  return ds;
}

const ids = {
  due: '0190a2b0-0000-7000-8000-00000000000a',
  leased: '0190a2b0-0000-7000-8000-00000000000b',
  expiredBefore: '0190a2b0-0000-7000-8000-00000000000c',
  dead: '0190a2b0-0000-7000-8000-00000000000d',
  delivered: '0190a2b0-0000-7000-8000-00000000000e',
};
const noteOfV1 = `attempt 1 of 10 ${LEASE_EXPIRED}`;
/** The version the module needs: the last one released. */
const LATEST = OUTBOX_SCHEMA_VERSIONS[OUTBOX_SCHEMA_VERSIONS.length - 1].version;

/**
 * RELIABILITY "upgrades never break a running install": a table made by the released migration, with
 * events in every state a stopped worker of the old version leaves, is upgraded by the newer
 * migrations, and the new module then finishes every event as it should.
 */
describe.each(backends())('upgrading the schema from version 1 on %s', (backend) => {
  let table: string;
  let sqlitePath: string | undefined;
  let raw: RawDb;
  let app: TestApp | undefined;

  beforeEach(async () => {
    table = uniqueName();
    sqlitePath = isSqlite(backend) ? sqliteFile() : undefined;
    raw = await rawDb(backend, sqlitePath);
  });
  afterEach(async () => {
    await app?.dispose();
    app = undefined;
    if (!isSqlite(backend))
      await raw.query(
        sql(backend, `DROP TABLE IF EXISTS "${table}", "${table}_migrations", "${table}_orders", "${table}_keys"`),
      );
    await raw.close();
    if (sqlitePath) removeSqliteFile(sqlitePath);
  });

  const past = isSqlite(backend) ? '2020-01-01T00:00:00.000Z' : '2020-01-01 00:00:00';

  async function insert(id: string, status: string, attempts: number, token: string | null, lastError: string | null) {
    await raw.query(
      sql(
        backend,
        `INSERT INTO "${table}" ("id", "topic", "payload", "headers", "status", "attempts", "available_at", "claim_token",
           "completed_handlers", "last_error", "created_at") VALUES (?, 'upgrade', '{}', '{}', ?, ?, ?, ?, '[]', ?, ?)`,
      ),
      [id, status, attempts, past, token, lastError, past],
    );
  }

  /** The table's index names, as the start-up check lists them. */
  const indexes = async () => {
    const { sql: text, params } = dialectForType(backend === 'sqlite3' ? 'sqlite' : backend).schema.indexes(
      outboxTable(table),
    );
    return (await raw.query<{ name: string }>(text, params)).map((r) => String(r.name)).sort();
  };

  /** MySQL/MariaDB: one attribute of some columns, by column name. */
  const columnAttribute = async (attribute: 'character_set_name' | 'collation_name', names: string[]) =>
    Object.fromEntries(
      (
        await raw.query<{ name: string; value: string }>(
          `SELECT column_name AS \`name\`, ${attribute} AS \`value\` FROM information_schema.columns ` +
            `WHERE table_schema = DATABASE() AND table_name = ? AND column_name IN (${names.map(() => '?').join(', ')}) ORDER BY column_name`,
          [table, ...names],
        )
      ).map((c) => [c.name, c.value]),
    );
  /** MySQL/MariaDB: the character sets of the id and the claim token. */
  const keyCharsets = () => columnAttribute('character_set_name', ['id', 'claim_token']);
  /** MySQL/MariaDB: the collations of the key and the dedupe key. */
  const keyCollations = () => columnAttribute('collation_name', ['key', 'dedupe_key']);

  const row = async (id: string) => (await raw.query(sql(backend, `SELECT * FROM "${table}" WHERE "id" = ?`), [id]))[0];

  /**
   * Starts the new module on the table as it stands, without migrating it: the start-up check's error, or
   * undefined when it started (then closed, not disposed: the table stays for the upgrade).
   */
  const startUnmigrated = (): Promise<unknown> =>
    createTestApp({ backend, table, sqlitePath, providers: [Sink], extraTypeOrm: { migrations: [] } }).then(
      async (test) => {
        await test.close();
        await test.raw.close();
      },
      (e: unknown) => e,
    );

  /** The migration to version 7 of this table: the first missing one wherever versions 5 and 6 have nothing to do. */
  const keyOrderMigration = () => `OutboxKeyOrder_${table}1796428800000`;

  /**
   * The start-up on a table of `foundVersion` whose next migration changes MySQL/MariaDB columns only:
   * refused there, naming `missingMigration`; elsewhere that migration has nothing to do, and the first
   * one missing is version 7's.
   */
  async function expectRefusedOnMariadbOnly(foundVersion: number, missingMigration: string) {
    const started = await startUnmigrated();
    if (backend === 'mariadb') {
      expect(started).toMatchObject({ foundVersion, neededVersion: LATEST, missingMigration });
    } else {
      expect(started).toMatchObject({ foundVersion: 6, neededVersion: LATEST, missingMigration: keyOrderMigration() });
    }
  }

  it('keeps every event of a version-1 table: due, leased, lease-expired, dead and delivered', async () => {
    const v1 = await migrate(backend, table, sqlitePath, [createOutboxMigration(table)]);
    await v1.destroy();
    // What the old worker left when it was stopped (its leases have run out since).
    await insert(ids.due, 'pending', 0, null, null);
    await insert(ids.leased, 'pending', 1, '11111111-1111-4111-8111-111111111111', null);
    await insert(ids.expiredBefore, 'pending', 2, '22222222-2222-4222-8222-222222222222', noteOfV1);
    await insert(ids.dead, 'dead', 10, null, 'Sink.handle: Error: upstream answered 503');
    await insert(ids.delivered, 'delivered', 1, null, null);

    // The new version refuses the old table, naming the migration to run.
    const refused = await startUnmigrated();
    expect(refused).toBeInstanceOf(OutboxSchemaOutdatedError);
    expect((refused as Error).message).toContain(`OutboxAttemptState_${table}`);

    const upgraded = await migrate(backend, table, sqlitePath, createOutboxMigrations(table));
    await upgraded.destroy();
    // The expiry the old claim wrote into last_error is data now, and last_error is free for real errors.
    expect(await row(ids.expiredBefore)).toMatchObject({ note: noteOfV1, last_error: null });
    expect(Number((await row(ids.expiredBefore)).last_expired_attempt)).toBe(1);
    expect(Number((await row(ids.expiredBefore)).expired_attempts)).toBe(1);
    expect(await row(ids.dead)).toMatchObject({ note: null, last_error: 'Sink.handle: Error: upstream answered 503' });

    app = await createTestApp({ backend, table, sqlitePath, providers: [Sink] });
    const result = await app.worker.drain();
    expect(result).toMatchObject({ delivered: 3, deadLettered: 0, failed: 0, lostLeases: 0 });
    expect(
      app.module
        .get(Sink)
        .seen.map((m) => m.id)
        .sort(),
    ).toEqual([ids.due, ids.leased, ids.expiredBefore].sort());
    expect(await row(ids.expiredBefore)).toMatchObject({ status: 'delivered', last_error: null });
    expect(Number((await row(ids.expiredBefore)).last_expired_attempt)).toBe(2);
    expect(Number((await row(ids.leased)).expired_attempts)).toBe(1);
    expect(await row(ids.dead)).toMatchObject({
      status: 'dead',
      last_error: 'Sink.handle: Error: upstream answered 503',
    });
    expect(await row(ids.delivered)).toMatchObject({ status: 'delivered' });
  });

  it('runs each migration down to what it was up from', async () => {
    const v1 = await migrate(backend, table, sqlitePath, [createOutboxMigration(table)]);
    const columnsOf = async (ds: DataSource) => {
      const runner = ds.createQueryRunner();
      try {
        return (await runner.getTable(table))?.columns.map((c) => c.name).sort();
      } finally {
        await runner.release();
      }
    };
    const v1Columns = await columnsOf(v1);
    await v1.destroy();
    await insert(ids.expiredBefore, 'pending', 2, '22222222-2222-4222-8222-222222222222', noteOfV1);

    const v1Indexes = await indexes();
    const ds = await migrate(backend, table, sqlitePath, createOutboxMigrations(table));
    const v2Columns = [...v1Columns!, 'expired_attempts', 'last_expired_attempt', 'note'].sort();
    const v4Columns = [...v2Columns, 'claimed_at', 'attempt_log', 'redrive_count'].sort();
    const v3Indexes = [...v1Indexes, `${table}_retention_idx`].sort();
    expect(await columnsOf(ds)).toEqual([...v4Columns, 'seq', 'trace_context'].sort());
    const v7Indexes = [...v3Indexes, `${table}_order_idx`].sort();
    // Version 9's index is a partial one, which MySQL/MariaDB do not have.
    expect(await indexes()).toEqual(backend === 'mariadb' ? v7Indexes : [...v7Indexes, `${table}_front_idx`].sort());
    if (backend === 'mariadb') expect(await keyCharsets()).toEqual({ claim_token: 'ascii', id: 'ascii' });
    await ds.undoLastMigration(); // version 9
    expect(await indexes()).toEqual(v7Indexes);
    await ds.undoLastMigration(); // version 8
    expect(await columnsOf(ds)).toEqual([...v4Columns, 'seq'].sort());
    await ds.undoLastMigration(); // version 7
    expect(await columnsOf(ds)).toEqual(v4Columns);
    expect(await indexes()).toEqual(v3Indexes);
    await ds.undoLastMigration(); // version 6
    if (backend === 'mariadb') expect(await keyCollations()).toEqual({ dedupe_key: 'utf8mb4_bin', key: 'utf8mb4_bin' });
    await ds.undoLastMigration();
    if (backend === 'mariadb') expect(await keyCharsets()).toEqual({ claim_token: 'utf8mb4', id: 'utf8mb4' });
    expect(await columnsOf(ds)).toEqual(v4Columns);
    await ds.undoLastMigration();
    expect(await columnsOf(ds)).toEqual(v2Columns);
    await ds.undoLastMigration();
    expect(await indexes()).toEqual(v1Indexes);
    expect(await columnsOf(ds)).toEqual(v2Columns);
    await ds.undoLastMigration();
    expect(await columnsOf(ds)).toEqual(v1Columns);
    // The old worker finds its expiry where it wrote it.
    expect(await row(ids.expiredBefore)).toMatchObject({ last_error: noteOfV1 });
    await ds.undoLastMigration();
    const runner = ds.createQueryRunner();
    expect(await runner.hasTable(table)).toBe(false);
    await runner.release();
    await ds.destroy();
  });

  it('refuses a version-2 table naming the retention index migration, which then adds the index', async () => {
    const v2 = await migrate(backend, table, sqlitePath, createOutboxMigrations(table).slice(0, 2));
    await v2.destroy();
    await insert(ids.delivered, 'delivered', 1, null, null);
    await raw.query(sql(backend, `UPDATE "${table}" SET "processed_at" = ? WHERE "id" = ?`), [past, ids.delivered]);
    expect(await indexes()).not.toContain(`${table}_retention_idx`);

    const refused = await startUnmigrated();
    expect(refused).toBeInstanceOf(OutboxSchemaOutdatedError);
    expect(refused).toMatchObject({
      foundVersion: 2,
      neededVersion: LATEST,
      missingMigration: `OutboxRetentionIndex_${table}1796083200000`,
    });

    const upgraded = await migrate(backend, table, sqlitePath, createOutboxMigrations(table));
    await upgraded.destroy();
    expect(await indexes()).toContain(`${table}_retention_idx`);
    app = await createTestApp({ backend, table, sqlitePath, providers: [Sink] });
    expect(await app.worker.purge()).toEqual({ delivered: 1, dead: 0 });
  });

  it('refuses a version-3 table naming the attempt history migration; events a version-3 worker left are then redriven and delivered', async () => {
    const v3 = await migrate(backend, table, sqlitePath, createOutboxMigrations(table).slice(0, 3));
    await v3.destroy();
    await insert(ids.dead, 'dead', 10, null, 'Sink.handle: Error: upstream answered 503');
    await insert(ids.due, 'pending', 2, null, 'Sink.handle: Error: timeout');

    const refused = await startUnmigrated();
    expect(refused).toMatchObject({
      foundVersion: 3,
      neededVersion: LATEST,
      missingMigration: `OutboxAttemptHistory_${table}1796169600000`,
    });

    const upgraded = await migrate(backend, table, sqlitePath, createOutboxMigrations(table));
    await upgraded.destroy();
    expect(await row(ids.dead)).toMatchObject({ redrive_count: 0, attempt_log: null, claimed_at: null });
    app = await createTestApp({ backend, table, sqlitePath, providers: [Sink] });
    const operations = app.module.get(OutboxOperations);
    // The old worker's attempts left no history: they are counted as omitted.
    expect(await operations.get(ids.dead)).toMatchObject({ attempts: 10, history: [], historyOmitted: 10 });
    expect(await operations.redrive({ ids: [ids.dead] })).toMatchObject({ changed: 1 });
    expect(await app.worker.drain()).toMatchObject({ delivered: 2 });
    const redriven = await operations.get(ids.dead);
    expect(redriven).toMatchObject({ state: 'delivered', attempts: 1, redriveCount: 1, historyOmitted: 0 });
    expect(redriven!.history.map((h) => [h.round, h.attempt, h.outcome])).toEqual([[1, 1, 'delivered']]);

    const down = await migrate(backend, table, sqlitePath, createOutboxMigrations(table));
    await down.undoLastMigration(); // version 9
    await down.undoLastMigration(); // version 8
    await down.undoLastMigration(); // version 7
    await down.undoLastMigration(); // version 6
    await down.undoLastMigration(); // version 5
    await down.undoLastMigration();
    await down.destroy();
    expect(Object.keys(await row(ids.dead))).not.toContain('attempt_log');
  });

  it('takes a version-4 table to ASCII keys on MySQL/MariaDB (refused until then; nothing to do elsewhere), keeping leases and dead letters', async () => {
    const v4 = await migrate(backend, table, sqlitePath, createOutboxMigrations(table).slice(0, 4));
    await v4.destroy();
    await insert(ids.leased, 'pending', 1, '11111111-1111-4111-8111-111111111111', null);
    await insert(ids.dead, 'dead', 10, null, 'Sink.handle: Error: upstream answered 503');
    await insert(ids.due, 'pending', 0, null, null);

    await expectRefusedOnMariadbOnly(4, `OutboxAsciiKeys_${table}1796256000000`);
    if (backend === 'mariadb') expect(await keyCharsets()).toEqual({ claim_token: 'utf8mb4', id: 'utf8mb4' });

    const upgraded = await migrate(backend, table, sqlitePath, createOutboxMigrations(table));
    await upgraded.destroy();
    if (backend === 'mariadb') expect(await keyCharsets()).toEqual({ claim_token: 'ascii', id: 'ascii' });
    // The lease the old worker held is still fenced by its token: the row keeps it until the lease runs out.
    expect(await row(ids.leased)).toMatchObject({ claim_token: '11111111-1111-4111-8111-111111111111' });
    app = await createTestApp({ backend, table, sqlitePath, providers: [Sink] });
    expect(await app.worker.drain()).toMatchObject({ delivered: 2, failed: 0 });
    expect(
      app.module
        .get(Sink)
        .seen.map((m) => m.id)
        .sort(),
    ).toEqual([ids.due, ids.leased].sort());
    const operations = app.module.get(OutboxOperations);
    expect(await operations.get(ids.dead)).toMatchObject({ state: 'dead', attempts: 10 });
    expect(await operations.redrive({ ids: [ids.dead] })).toMatchObject({ changed: 1 });
    expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
  });

  // RELIABILITY case 36: with no app returned (createApplicationContext) nothing could close the pool.
  it('closes the DataSource when it refuses to start, so a script that catches the error can exit', async () => {
    const module = await Test.createTestingModule({
      imports: [
        TypeOrmModule.forRoot({ ...typeOrmOptions(backend, table, sqlitePath), migrations: [] }),
        ...clsImports(),
        OutboxModule.forRoot({ tableName: table, worker: { enabled: true } }),
      ],
      providers: [Sink],
    })
      .setLogger(false as never)
      .compile();
    const dataSource = module.get<DataSource>(getDataSourceToken());
    expect(dataSource.isInitialized).toBe(true);
    await expect(module.init()).rejects.toThrow(OutboxTableMissingError);
    expect(dataSource.isInitialized).toBe(false);
  });

  it('takes a version-5 table to exact keys on MySQL/MariaDB (refused until then, and a padded key never reported stored)', async () => {
    const v5 = await migrate(backend, table, sqlitePath, createOutboxMigrations(table).slice(0, 5));
    await insert(ids.due, 'pending', 0, null, null);
    // A worker of this version on the old table (the start-up check below refuses one; this is the store's own guard).
    // It reads version 7's `seq` and writes version 8's `trace_context`: those columns alone are lent to the table
    // meanwhile, the keys' collation is version 5's.
    const alter = (change: string) => raw.query(sql(backend, `ALTER TABLE "${table}" ${change}`));
    await alter('ADD COLUMN "seq" bigint');
    await alter('ADD COLUMN "trace_context" text');
    const store = new OutboxStore(v5, table, undefined, false, new ErrorText());
    const publish = (dedupeKey: string, n: number) =>
      v5.transaction((manager) =>
        store.insert(manager, [validateEvent({ topic: 'upgrade', payload: { n }, dedupeKey }, 1024)]),
      );
    const [first] = await publish('order-1', 1);
    expect(first.inserted).toBe(true);
    const padded: unknown = await publish('order-1 ', 2).catch((e: unknown) => e);
    if (backend === 'mariadb') {
      expect(padded).toBeInstanceOf(OutboxValidationError);
      expect((padded as Error).message).toContain(`the existing key "order-1" (event ${first.id})`);
      expect(await keyCollations()).toEqual({ dedupe_key: 'utf8mb4_bin', key: 'utf8mb4_bin' });
    } else {
      expect(padded).toEqual([{ id: expect.any(String) as string, inserted: true }]);
    }
    await v5.destroy();
    await alter('DROP COLUMN "seq"');
    await alter('DROP COLUMN "trace_context"');

    await expectRefusedOnMariadbOnly(5, `OutboxExactKeys_${table}1796342400000`);

    const upgraded = await migrate(backend, table, sqlitePath, createOutboxMigrations(table));
    if (backend === 'mariadb') {
      expect(await keyCollations()).toEqual({ dedupe_key: 'utf8mb4_nopad_bin', key: 'utf8mb4_nopad_bin' });
      // Down and up again: the padded collation comes back while no two keys differ by trailing spaces only.
      await upgraded.undoLastMigration(); // version 9
      await upgraded.undoLastMigration(); // version 8
      await upgraded.undoLastMigration(); // version 7
      await upgraded.undoLastMigration();
      expect(await keyCollations()).toEqual({ dedupe_key: 'utf8mb4_bin', key: 'utf8mb4_bin' });
      await upgraded.runMigrations();
      expect(await keyCollations()).toEqual({ dedupe_key: 'utf8mb4_nopad_bin', key: 'utf8mb4_nopad_bin' });
    }
    await upgraded.destroy();

    app = await createTestApp({ backend, table, sqlitePath, providers: [Sink] });
    const stored = await app.txHost.withTransaction(() =>
      app!.outbox.publishMany([
        { topic: 'upgrade', payload: { n: 2 }, dedupeKey: 'order-1 ' },
        { topic: 'upgrade', payload: { n: 1 }, dedupeKey: 'order-1' },
      ]),
    );
    expect(stored[1]).toEqual({ id: first.id, inserted: false });
    expect(stored[0].id).not.toBe(first.id);
    expect(await app.worker.drain()).toMatchObject({ delivered: 3, failed: 0 });
  });

  it('takes a version-6 table to per-key order: refused until then, every event kept, the waiting status and the keys table there, and back', async () => {
    const v6 = await migrate(backend, table, sqlitePath, createOutboxMigrations(table).slice(0, 6));
    await v6.destroy();
    await insert(ids.leased, 'pending', 1, '11111111-1111-4111-8111-111111111111', null);
    await insert(ids.dead, 'dead', 10, null, 'Sink.handle: Error: upstream answered 503');
    await insert(ids.due, 'pending', 0, null, null);
    await insert(ids.delivered, 'delivered', 1, null, null);
    const before = await row(ids.dead);

    expect(await startUnmigrated()).toMatchObject({
      foundVersion: 6,
      neededVersion: LATEST,
      missingMigration: keyOrderMigration(),
    });

    const statusIs = (id: string, status: string) =>
      raw.query(sql(backend, `UPDATE "${table}" SET "status" = ? WHERE "id" = ?`), [status, id]);
    // By its message: a native driver's error may come from another realm than this test's Error (better-sqlite3
    // loaded by both jest projects in one process), which toThrow() does not take for an error.
    const refused = (write: Promise<unknown>) =>
      expect(write).rejects.toHaveProperty('message', expect.stringMatching(/constraint|duplicate/i));
    const upgraded = await migrate(backend, table, sqlitePath, createOutboxMigrations(table));
    // Every column of every row as it was (SQLite built the table again to change its check).
    expect(await row(ids.dead)).toEqual({ ...before, seq: null, trace_context: null });
    expect(await row(ids.leased)).toMatchObject({ claim_token: '11111111-1111-4111-8111-111111111111' });
    expect(await indexes()).toContain(`${table}_order_idx`);
    // The check still refuses what is no status, and admits the new one.
    await refused(statusIs(ids.delivered, 'lost'));
    await statusIs(ids.delivered, 'waiting');
    await statusIs(ids.delivered, 'delivered');
    await raw.query(sql(backend, `INSERT INTO "${table}_keys" ("key", "last_seq", "front_id") VALUES (?, ?, ?)`), [
      'order-1',
      2,
      ids.due,
    ]);
    // The keys' table compares keys as the events do: a trailing space makes another key.
    await raw.query(sql(backend, `INSERT INTO "${table}_keys" ("key", "last_seq") VALUES (?, ?)`), ['order-1 ', 1]);
    await refused(
      raw.query(sql(backend, `INSERT INTO "${table}_keys" ("key", "last_seq") VALUES (?, ?)`), ['order-1', 1]),
    );
    await upgraded.destroy();

    app = await createTestApp({ backend, table, sqlitePath, providers: [Sink] });
    expect(await app.worker.drain()).toMatchObject({ delivered: 2, failed: 0 });
    await app.close();
    await app.raw.close();
    app = undefined;

    // Down: an event waiting behind its key is left to the previous version as a plain pending event.
    await statusIs(ids.dead, 'waiting');
    const down = await migrate(backend, table, sqlitePath, createOutboxMigrations(table));
    await down.undoLastMigration(); // version 9
    await down.undoLastMigration(); // version 8
    await down.undoLastMigration();
    await down.destroy();
    expect(await row(ids.dead)).toEqual({ ...before, status: 'pending' });
    await refused(statusIs(ids.delivered, 'waiting'));
    expect(await indexes()).not.toContain(`${table}_order_idx`);
    expect(await startUnmigrated()).toMatchObject({ foundVersion: 6, missingMigration: keyOrderMigration() });
  });

  it("takes a version-7 table to the trace context column: refused until then, every event kept, a version-7 publisher's headers delivered as stored, and back", async () => {
    const v7 = await migrate(backend, table, sqlitePath, createOutboxMigrations(table).slice(0, 7));
    await v7.destroy();
    await insert(ids.dead, 'dead', 10, null, 'Sink.handle: Error: upstream answered 503');
    await insert(ids.due, 'pending', 0, null, null);
    // A version-7 publisher with tracing wrote the trace context into the headers.
    const v7Headers = { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', a: 'b' };
    await raw.query(sql(backend, `UPDATE "${table}" SET "headers" = ? WHERE "id" = ?`), [
      JSON.stringify(v7Headers),
      ids.due,
    ]);
    const before = await row(ids.dead);

    expect(await startUnmigrated()).toMatchObject({
      foundVersion: 7,
      neededVersion: LATEST,
      missingMigration: `OutboxTraceContext_${table}1796515200000`,
    });

    const upgraded = await migrate(backend, table, sqlitePath, createOutboxMigrations(table));
    await upgraded.destroy();
    expect(await row(ids.dead)).toEqual({ ...before, trace_context: null });

    app = await createTestApp({ backend, table, sqlitePath, providers: [Sink] });
    const traced = await app.txHost.withTransaction(() => app!.outbox.publish('upgrade', { n: 1 }));
    expect(await app.worker.drain()).toMatchObject({ delivered: 2, failed: 0 });
    const seen = app.module.get(Sink).seen;
    expect(seen.find((m) => m.id === ids.due)?.headers).toEqual(v7Headers);
    expect(seen.find((m) => m.id === traced.id)?.headers).toEqual({});
    await app.close();
    await app.raw.close();
    app = undefined;

    // Down: the column goes, every row stays as the previous version reads it.
    const down = await migrate(backend, table, sqlitePath, createOutboxMigrations(table));
    await down.undoLastMigration(); // version 9
    await down.undoLastMigration();
    await down.destroy();
    expect(await row(ids.dead)).toEqual(before);
    expect(Object.keys(await row(traced.id))).not.toContain('trace_context');
    expect(await startUnmigrated()).toMatchObject({
      foundVersion: 7,
      missingMigration: `OutboxTraceContext_${table}1796515200000`,
    });
  });

  it("takes a version-8 table to the guard of a key's one pending event (PostgreSQL, SQLite: refused until then; nothing to do on MySQL/MariaDB), a key's events kept in order, and back", async () => {
    const v8 = await migrate(backend, table, sqlitePath, createOutboxMigrations(table).slice(0, 8));
    await v8.destroy();
    // A key as version 8 leaves it: its front pending, the next event waiting behind it.
    await insert(ids.due, 'pending', 0, null, null);
    await insert(ids.leased, 'waiting', 0, null, null);
    const place = (id: string, seq: number) =>
      raw.query(sql(backend, `UPDATE "${table}" SET "key" = 'k', "seq" = ? WHERE "id" = ?`), [seq, id]);
    await place(ids.due, 1);
    await place(ids.leased, 2);
    await raw.query(sql(backend, `INSERT INTO "${table}_keys" ("key", "last_seq", "front_id") VALUES ('k', 2, ?)`), [
      ids.due,
    ]);
    const keyFrontMigration = `OutboxKeyFront_${table}1796601600000`;
    const refusedUntilUpgraded = async () => {
      const started = await startUnmigrated();
      if (backend === 'mariadb') expect(started).toBeUndefined();
      else
        expect(started).toMatchObject({ foundVersion: 8, neededVersion: LATEST, missingMigration: keyFrontMigration });
    };
    const guarded = async () => (await indexes()).includes(`${table}_front_idx`);
    await refusedUntilUpgraded();

    const upgraded = await migrate(backend, table, sqlitePath, createOutboxMigrations(table));
    expect(await guarded()).toBe(backend !== 'mariadb');
    // Down and up again.
    await upgraded.undoLastMigration();
    expect(await guarded()).toBe(false);
    await refusedUntilUpgraded();
    await upgraded.runMigrations();
    expect(await guarded()).toBe(backend !== 'mariadb');
    await upgraded.destroy();

    app = await createTestApp({
      backend,
      table,
      sqlitePath,
      providers: [Sink],
      outbox: { ordering: [{ topic: 'upgrade' }] },
    });
    // The front first; its acknowledgement makes the next one pending (under the index, where there is one).
    await app.worker.drain();
    await app.worker.drain();
    expect(app.module.get(Sink).seen.map((m) => m.id)).toEqual([ids.due, ids.leased]);
  });
});

// CREATE INDEX CONCURRENTLY is PostgreSQL's own: MySQL/MariaDB build the index online by themselves, and SQLite has
// one writer anyway. Skipped only when that server is unreachable on a developer machine (CI fails instead).
describeOn('postgres')('version 3 on a big PostgreSQL table', () => {
  it('keeps the index an operator built CONCURRENTLY beforehand under its name, as the Upgrading section says', async () => {
    const table = uniqueName();
    const raw = await rawDb('postgres');
    let app: TestApp | undefined;
    try {
      const v2 = await migrate('postgres', table, undefined, createOutboxMigrations(table).slice(0, 2));
      await v2.destroy();
      await raw.query(
        `CREATE INDEX CONCURRENTLY "${table}_retention_idx" ON "${table}" ("status", "processed_at") ` +
          `WHERE "status" = 'delivered' OR "status" = 'dead'`,
      );
      const [{ oid }] = await raw.query<{ oid: number }>(`SELECT '"${table}_retention_idx"'::regclass::oid AS "oid"`);

      const upgraded = await migrate('postgres', table, undefined, createOutboxMigrations(table));
      await upgraded.destroy();
      const [after] = await raw.query<{ oid: number }>(`SELECT '"${table}_retention_idx"'::regclass::oid AS "oid"`);
      expect(after.oid).toBe(oid);
      app = await createTestApp({ backend: 'postgres', table, providers: [Sink] });
      expect(await app.worker.purge()).toEqual({ delivered: 0, dead: 0 });
    } finally {
      await app?.dispose();
      await raw.query(`DROP TABLE IF EXISTS "${table}", "${table}_migrations"`);
      await raw.close();
    }
  });
});
