import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import {
  createOutboxEntity,
  createOutboxMigrations,
  OutboxHandler,
  OutboxTableMissingError,
  type OutboxMessage,
  type OutboxMigrationClass,
} from '../../../lib';
import { dialectForType } from '../../../lib/dialects/dialect-for-type';
import { outboxTable } from '../../../lib/dialects/shared/outbox-table';
import { backends, describeOn, rawDb, type RawDb, uniqueName } from '../../fixtures/backends';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Sink {
  seen: OutboxMessage[] = [];
  @OutboxHandler('placed')
  handle(m: OutboxMessage) {
    this.seen.push(m);
  }
}

const publishOne = (app: TestApp, payload: unknown) =>
  app.txHost.withTransaction(() => app.outbox.publish('placed', payload));

/** Reads the outbox through TypeORM's entity, which places the table by the DataSource's schema and prefix. */
async function readThroughEntity(app: TestApp) {
  const ds = app.module.get<DataSource>(getDataSourceToken());
  return ds.getRepository(createOutboxEntity(app.table)).find();
}

// The schema option is PostgreSQL's: skipped only when that server is unreachable on a developer machine
// (global-setup fails CI instead).
// RELIABILITY case 23: the migration, the worker and the entity all use the table TypeORM places.
describeOn('postgres')('PostgreSQL DataSource schema', () => {
  let raw: RawDb;
  const schemas: string[] = [];
  const apps: TestApp[] = [];

  beforeAll(async () => {
    raw = await rawDb('postgres');
  });
  afterEach(async () => {
    for (const app of apps.splice(0)) await app.dispose();
    for (const schema of schemas.splice(0)) await raw.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });
  afterAll(() => raw.close());

  async function schema(): Promise<string> {
    const name = uniqueName('app');
    await raw.query(`CREATE SCHEMA "${name}"`);
    schemas.push(name);
    return name;
  }

  async function appIn(schemaName: string, table?: string, migrations?: OutboxMigrationClass[]): Promise<TestApp> {
    const extraTypeOrm = { schema: schemaName, ...(migrations ? { migrations } : {}) };
    const app = await createTestApp({ backend: 'postgres', table, providers: [Sink], extraTypeOrm });
    apps.push(app);
    return app;
  }

  it('creates, fills and reads the table in that schema, and nothing in public', async () => {
    const app = await appIn(await schema());
    const { id } = await publishOne(app, { n: 1 });
    expect(await app.worker.drain()).toMatchObject({ delivered: 1 });

    expect(app.module.get(Sink).seen.map((m) => m.id)).toEqual([id]);
    const rows = await readThroughEntity(app);
    expect(rows.map((r) => [r.id, r.status])).toEqual([[id, 'delivered']]);
    const [{ found }] = await raw.query(`SELECT to_regclass('public."${app.table}"') IS NOT NULL AS "found"`);
    expect(found).toBe(false);
  });

  it('keeps two outboxes of the same table name in two schemas apart', async () => {
    const table = uniqueName();
    const a = await appIn(await schema(), table);
    const b = await appIn(await schema(), table);
    const { id } = await publishOne(a, { in: 'a' });

    expect(await b.worker.drain()).toMatchObject({ delivered: 0 });
    expect(await a.worker.drain()).toMatchObject({ delivered: 1 });
    expect(a.module.get(Sink).seen.map((m) => m.id)).toEqual([id]);
    expect(b.module.get(Sink).seen).toEqual([]);
  });

  it('refuses to start on a table an earlier version left in the search_path, naming the move; after it the events flow', async () => {
    const target = await schema();
    const table = uniqueName();
    // What the released migration did with a schema option: the table under the bare name, in public.
    for (const ddl of dialectForType('postgres').schema.createSchema(outboxTable(table))) await raw.query(ddl);
    const eventId = '0190a2b0-0000-7000-8000-000000000001';
    await raw.query(`INSERT INTO "${table}" ("id", "topic", "payload") VALUES ($1, 'placed', '{"old":true}')`, [
      eventId,
    ]);
    try {
      // Its migration ran already (the install is old): this start-up runs none.
      const error: unknown = await appIn(target, table, []).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxTableMissingError);
      expect((error as Error).message).toContain(`ALTER TABLE "${table}" SET SCHEMA "${target}"`);

      await raw.query(`ALTER TABLE "${table}" SET SCHEMA "${target}"`);
      // Moved, the version-1 table takes the later migrations where it now is.
      const app = await appIn(target, table, createOutboxMigrations(table).slice(1));
      expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
      expect(app.module.get(Sink).seen.map((m) => m.id)).toEqual([eventId]);
    } finally {
      await raw.query(`DROP TABLE IF EXISTS public."${table}"`);
    }
  });
});

describe.each(backends())('TypeORM entityPrefix on %s', (backend) => {
  let app: TestApp | undefined;
  let raw: RawDb | undefined;
  const prefix = 'pfx_';
  afterEach(async () => {
    if (app && backend !== 'better-sqlite3' && backend !== 'sqlite3') {
      await app.raw.query(`DROP TABLE IF EXISTS "${prefix}${app.table}"`);
      await app.raw.query(`DROP TABLE IF EXISTS "${prefix}${app.table}_migrations"`);
    }
    await app?.dispose();
    await raw?.close();
    app = undefined;
    raw = undefined;
  });

  it('puts the prefix on the table the migration creates, the worker uses and the entity reads', async () => {
    app = await createTestApp({ backend, providers: [Sink], extraTypeOrm: { entityPrefix: prefix } });
    const { id } = await publishOne(app, { n: 1 });
    expect(await app.worker.drain()).toMatchObject({ delivered: 1 });

    expect(app.module.get(Sink).seen.map((m) => m.id)).toEqual([id]);
    expect((await readThroughEntity(app)).map((r) => [r.id, r.status])).toEqual([[id, 'delivered']]);
    const stored = await app.raw.query(app.sql(`SELECT "status" FROM "${prefix}${app.table}" WHERE "id" = ?`), [id]);
    expect(stored).toEqual([{ status: 'delivered' }]);
  });

  it('refuses to start on the unprefixed table of an earlier version, naming the rename', async () => {
    const table = uniqueName();
    const first = await createTestApp({ backend, table, providers: [Sink] });
    const sqlitePath = first.sqlitePath;
    await first.close();
    const error: unknown = await createTestApp({
      backend,
      table,
      sqlitePath,
      providers: [Sink],
      extraTypeOrm: { entityPrefix: prefix, migrations: [] },
    }).catch((e: unknown) => e);
    await first.dispose();
    expect(error).toBeInstanceOf(OutboxTableMissingError);
    expect((error as Error).message).toMatch(new RegExp(`RENAME (TABLE|TO)`));
    expect((error as Error).message).toContain(`${prefix}${table}`);
  });
});
