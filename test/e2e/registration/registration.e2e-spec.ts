import { Controller, Injectable, Module, Scope } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, getRepositoryToken, TypeOrmModule } from '@nestjs/typeorm';
import type { DataSource, Repository } from 'typeorm';
import {
  createOutboxEntity,
  createOutboxMigration,
  createOutboxMigrations,
  OutboxConfigurationError,
  OutboxEventEntity,
  OutboxHandler,
  OutboxMigrations,
  OutboxModule,
  OutboxService,
  OutboxWorker,
  type OutboxEventRecord,
  type OutboxMessage,
} from '../../../lib';
import {
  backends,
  type BackendName,
  isSqlite,
  rawDb,
  removeSqliteFile,
  sqliteBackends,
  sql,
  sqliteFile,
  uniqueName,
} from '../../fixtures/backends';
import { mariadbUrl, postgresUrl } from '../../fixtures/env';
import { clsImports, createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';
import { TransactionHost } from '@nestjs-cls/transactional';

@Injectable()
class Sink {
  seen: OutboxMessage[] = [];
  @OutboxHandler('thing.happened')
  handle(m: OutboxMessage) {
    this.seen.push(m);
  }
}

@Injectable()
class Settings {
  readonly batchSize = 25;
}
@Module({ providers: [Settings], exports: [Settings] })
class SettingsModule {}

/**
 * Each test gets its own database (a PostgreSQL schema, a MariaDB database, a SQLite file), so the
 * default table name `outbox_event` is free.
 */
async function isolatedDatabase(backend: BackendName) {
  if (isSqlite(backend)) {
    const file = sqliteFile();
    return {
      options: sqliteOptions(backend, file),
      drop: () => {
        removeSqliteFile(file);
        return Promise.resolve();
      },
    };
  }
  const name = uniqueName('iso');
  const raw = await rawDb(backend);
  if (backend === 'postgres') {
    await raw.query(`CREATE SCHEMA "${name}"`);
    return {
      options: {
        type: 'postgres' as const,
        url: postgresUrl(),
        schema: name,
        extra: { options: `-c search_path=${name}` },
      },
      drop: async () => {
        await raw.query(`DROP SCHEMA "${name}" CASCADE`);
        await raw.close();
      },
    };
  }
  await raw.query(`CREATE DATABASE "${name}"`);
  const url = new URL(mariadbUrl());
  return {
    options: {
      type: 'mariadb' as const,
      host: url.hostname,
      port: Number(url.port || 3306),
      username: decodeURIComponent(url.username),
      password: decodeURIComponent(url.password),
      database: name,
    },
    drop: async () => {
      await raw.query(`DROP DATABASE "${name}"`);
      await raw.close();
    },
  };
}

function sqliteOptions(backend: BackendName, file: string) {
  return backend === 'sqlite3'
    ? { type: 'sqlite' as const, database: file }
    : { type: 'better-sqlite3' as const, database: file };
}

describe.each(backends())('registering the entity and the migration on %s', (backend) => {
  let drop: () => Promise<void>;
  afterEach(() => drop?.());

  async function boot(typeorm: object, outbox: Parameters<typeof OutboxModule.forRoot>[0] = {}) {
    const db = await isolatedDatabase(backend);
    drop = db.drop;
    // The migration lands in a database that already has the application's tables.
    const { DataSource } = await import('typeorm');
    const existing = await new DataSource(db.options).initialize();
    await existing.query(sql(backend, `CREATE TABLE "customers" ("id" varchar(36) PRIMARY KEY, "name" varchar(100))`));
    await existing.destroy();
    const module = await Test.createTestingModule({
      imports: [
        TypeOrmModule.forRoot({ ...db.options, migrationsRun: true, ...typeorm }),
        ...clsImports(),
        OutboxModule.forRoot({ worker: { enabled: false }, ...outbox }),
      ],
      providers: [Sink],
    })
      .setLogger(false as never)
      .compile();
    await module.init();
    return module;
  }

  async function roundTrip(module: Awaited<ReturnType<typeof boot>>) {
    const { id } = await module
      .get(TransactionHost)
      .withTransaction(() => module.get(OutboxService).publish('thing.happened', { ok: true }, { key: 'k1' }));
    await module.get(OutboxWorker).drain();
    expect(module.get(Sink).seen.map((m) => m.id)).toEqual([id]);
    return id;
  }

  it('works with the entity listed by hand and OutboxMigrations in the app migrations', async () => {
    const module = await boot({ entities: [OutboxEventEntity], migrations: [...OutboxMigrations] });
    const id = await roundTrip(module);
    expect(
      await module.get<DataSource>(getDataSourceToken()).query(sql(backend, 'SELECT count(*) AS n FROM "customers"')),
    ).toHaveLength(1);
    const repo = module.get(getDataSourceToken()).getRepository<OutboxEventRecord>(OutboxEventEntity);
    const row = await repo.findOneByOrFail({ id });
    expect(row).toMatchObject({
      topic: 'thing.happened',
      key: 'k1',
      status: 'delivered',
      attempts: 1,
      payload: { ok: true },
    });
    expect(row.createdAt).toBeInstanceOf(Date);
    expect(row.processedAt).toBeInstanceOf(Date);
    await module.close();
  });

  it('works with autoLoadEntities: the repository of the entity is injectable', async () => {
    const module = await boot({ autoLoadEntities: true, migrations: [...OutboxMigrations] });
    const id = await roundTrip(module);
    const repo = module.get<Repository<OutboxEventRecord>>(getRepositoryToken(OutboxEventEntity));
    expect((await repo.findOneByOrFail({ id })).headers).toEqual({});
    // The table belongs to the migration: synchronize never touches it.
    const ds = module.get<DataSource>(getDataSourceToken());
    expect(ds.getMetadata(OutboxEventEntity).synchronize).toBe(false);
    await module.close();
  });

  it('supports a custom table through the factories, and the migration runs down', async () => {
    expect(createOutboxEntity('audit_events')).toBe(createOutboxEntity('audit_events'));
    expect(createOutboxMigration('audit_events')).toBe(createOutboxMigration('audit_events'));
    const module = await boot(
      { autoLoadEntities: true, migrations: createOutboxMigrations('audit_events') },
      { tableName: 'audit_events' },
    );
    const id = await roundTrip(module);
    const repo = module.get<Repository<OutboxEventRecord>>(getRepositoryToken(createOutboxEntity('audit_events')));
    expect(await repo.countBy({ id })).toBe(1);
    const ds = module.get<DataSource>(getDataSourceToken());
    const runner = ds.createQueryRunner();
    // Version 9 (an index only, not on MySQL/MariaDB), version 8 (the trace context column), version 7 (per-key
    // order: the seq column and the keys table), versions 6 and 5 (MySQL's exact and ASCII keys; no column
    // changes), version 4 (the attempt history), version 3 (an index only), then version 2, then the table.
    await ds.undoLastMigration();
    expect(await runner.hasColumn('audit_events', 'trace_context')).toBe(true);
    await ds.undoLastMigration();
    expect(await runner.hasColumn('audit_events', 'trace_context')).toBe(false);
    expect(await runner.hasTable('audit_events_keys')).toBe(true);
    await ds.undoLastMigration();
    expect(await runner.hasColumn('audit_events', 'seq')).toBe(false);
    expect(await runner.hasTable('audit_events_keys')).toBe(false);
    await ds.undoLastMigration();
    await ds.undoLastMigration();
    expect(await runner.hasColumn('audit_events', 'attempt_log')).toBe(true);
    await ds.undoLastMigration();
    expect(await runner.hasColumn('audit_events', 'attempt_log')).toBe(false);
    expect(await runner.hasColumn('audit_events', 'expired_attempts')).toBe(true);
    await ds.undoLastMigration();
    expect(await runner.hasColumn('audit_events', 'expired_attempts')).toBe(true);
    await ds.undoLastMigration();
    expect(await runner.hasColumn('audit_events', 'expired_attempts')).toBe(false);
    expect(await runner.hasTable('audit_events')).toBe(true);
    await ds.undoLastMigration();
    expect(await runner.hasTable('audit_events')).toBe(false);
    await runner.release();
    await module.close();
  });

  it('forRootAsync takes the table beside useFactory and the rest from the factory', async () => {
    const db = await isolatedDatabase(backend);
    drop = db.drop;
    const module = await Test.createTestingModule({
      imports: [
        TypeOrmModule.forRoot({
          ...db.options,
          migrationsRun: true,
          autoLoadEntities: true,
          migrations: createOutboxMigrations('async_events'),
        }),
        ...clsImports(),
        OutboxModule.forRootAsync({
          tableName: 'async_events',
          imports: [SettingsModule],
          inject: [Settings],
          useFactory: (settings: Settings) => ({ worker: { enabled: false, batchSize: settings.batchSize } }),
        }),
      ],
      providers: [Sink],
    })
      .setLogger(false as never)
      .compile();
    await module.init();
    await roundTrip(module);
    await module.close();
  });
});

describe('start-up errors', () => {
  const file = sqliteFile();
  afterAll(() => removeSqliteFile(file));
  // With the table in place, so that each test meets the error it is about rather than the missing table.
  const typeorm = () =>
    TypeOrmModule.forRoot({
      ...sqliteOptions(sqliteBackends()[0], file),
      migrations: [...OutboxMigrations],
      migrationsRun: true,
    });

  async function bootError(imports: unknown[], providers: unknown[] = []) {
    const error = await Test.createTestingModule({ imports: imports as never, providers: providers as never })
      .setLogger(false as never)
      .compile()
      .then((m) => m.init())
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(OutboxConfigurationError);
    return error as OutboxConfigurationError;
  }

  it('names the bad option of forRoot, thrown by forRoot itself before anything connects', () => {
    let error: unknown;
    try {
      OutboxModule.forRoot({ worker: { batchSize: 0 } });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(OutboxConfigurationError);
    expect((error as OutboxConfigurationError).option).toBe('worker.batchSize');
  });

  it('names the bad option of a forRootAsync factory (a string from the environment)', async () => {
    const error = await bootError([
      typeorm(),
      ...clsImports(),
      OutboxModule.forRootAsync({ useFactory: () => ({ worker: { pollIntervalMs: '500' as never } }) }),
    ]);
    expect(error.option).toBe('worker.pollIntervalMs');
    expect(error.message).toMatch(/the string "500"/);
  });

  it('refuses a table name returned by the factory instead of declared beside it', async () => {
    const error = await bootError([
      typeorm(),
      ...clsImports(),
      OutboxModule.forRootAsync({ useFactory: () => ({ tableName: 'elsewhere' }) }),
    ]);
    expect(error.option).toBe('tableName');
    expect(error.message).toMatch(/declare tableName beside useFactory/);
  });

  it('refuses a handler timeout that does not fit in the lease, without lease renewal', async () => {
    @Injectable()
    class TooSlow {
      @OutboxHandler('x', { timeoutMs: 59_500 })
      async handle() {}
    }
    const error = await bootError(
      [typeorm(), ...clsImports(), OutboxModule.forRoot({ worker: { renewLease: false } })],
      [TooSlow],
    );
    expect(error.option).toBe("@OutboxHandler('x') on TooSlow.handle: timeoutMs");
    expect(error.message).toMatch(/shorter than worker.leaseMs \(60000 ms\)/);
  });

  it('refuses two handlers with the same name on one topic', async () => {
    @Injectable()
    class Twice {
      @OutboxHandler('x', { name: 'same' })
      async a() {}
      @OutboxHandler('x', { name: 'same' })
      async b() {}
    }
    const error = await bootError([typeorm(), ...clsImports(), OutboxModule.forRoot({})], [Twice]);
    expect(error.message).toMatch(/a handler named "same" is already registered/);
  });

  it.each([
    [{ isolation: 'SNAPSHOT' }, 'transactional.isolation', /expected one of READ UNCOMMITTED, READ COMMITTED/],
    [{ isolation: 'READ COMMITTED' }, 'transactional.isolation', /SQLite transactions are serializable/],
    [{ isolaton: 'SERIALIZABLE' }, 'transactional.isolaton', /isolaton/],
    ['yes', 'transactional', /expected true, false or \{ isolation \}/],
  ])('refuses a transactional option of %j', async (transactional, option, message) => {
    @Injectable()
    class Chosen {
      @OutboxHandler('x', { transactional: transactional as never })
      async handle() {}
    }
    const error = await bootError([typeorm(), ...clsImports(), OutboxModule.forRoot({})], [Chosen]);
    expect(error.option).toContain(`@OutboxHandler('x') on Chosen.handle: ${option.split('.')[0]}`);
    expect(`${error.option} ${error.message}`).toContain(option);
    expect(error.message).toMatch(message);
  });

  it('refuses two global OutboxModules in one application, saying how to register the others', async () => {
    const own = sqliteFile();
    const error = await bootError([
      // Both tables exist: the refusal is about the modules, not about a missing migration.
      TypeOrmModule.forRoot({
        ...sqliteOptions(sqliteBackends()[0], own),
        migrations: [...OutboxMigrations, ...createOutboxMigrations('second_outbox')],
        migrationsRun: true,
      }),
      ...clsImports(),
      OutboxModule.forRoot({ worker: { enabled: false } }),
      OutboxModule.forRoot({ tableName: 'second_outbox', worker: { enabled: false } }),
    ]);
    expect(error.option).toBe('isGlobal');
    expect(error.message).toMatch(
      /2 OutboxModules are global in this application \(tables outbox_event, second_outbox\)/,
    );
    expect(error.message).toMatch(/isGlobal: false in the module that uses it/);
    removeSqliteFile(own);
  });

  it('refuses an invalid handler topic', async () => {
    @Injectable()
    class BadTopic {
      @OutboxHandler('has space')
      async a() {}
    }
    const error = await bootError([typeorm(), ...clsImports(), OutboxModule.forRoot({})], [BadTopic]);
    expect(error.message).toMatch(/letters, digits and/);
  });
});

@Controller()
class OrdersController {
  seen: OutboxMessage[] = [];
  @OutboxHandler('thing.happened')
  onThing(m: OutboxMessage) {
    this.seen.push(m);
  }
}

@Controller({ scope: Scope.REQUEST })
class PerRequestController {
  @OutboxHandler('thing.happened')
  async onThing() {}
}

@Module({ controllers: [OrdersController, PerRequestController] })
class OrdersModule {}

describe.each(backends())('handlers on controllers on %s', (backend) => {
  let app: TestApp;
  afterEach(() => app.dispose());

  it('delivers to an @OutboxHandler on a controller; a request-scoped one is skipped with a warning', async () => {
    app = await createTestApp({ backend, imports: [OrdersModule] });
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish('thing.happened', { ok: true }));
    expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
    expect(app.module.get(OrdersController).seen.map((m) => m.id)).toEqual([id]);
    expect(
      app.logger.matching(
        /@OutboxHandler on PerRequestController.onThing is ignored: its controller is request-scoped/,
      ),
    ).toHaveLength(1);
  });
});

describe.each(backends())('several outboxes in one application on %s', (backend) => {
  const second = uniqueName('second');
  let app: TestApp;
  afterEach(async () => {
    await app.close();
    if (!isSqlite(backend)) await app.raw.query(`DROP TABLE IF EXISTS "${second}"`);
    await app.dispose();
  });

  it('one global and one with isGlobal: false: each is injected where it is registered and delivers its own table', async () => {
    @Injectable()
    class SecondOutboxUser {
      constructor(
        readonly outbox: OutboxService,
        readonly worker: OutboxWorker,
      ) {}
    }
    @Injectable()
    class GlobalOutboxUser {
      constructor(
        readonly outbox: OutboxService,
        readonly worker: OutboxWorker,
      ) {}
    }
    @Module({
      imports: [OutboxModule.forRoot({ isGlobal: false, tableName: second, worker: { enabled: false } })],
      providers: [SecondOutboxUser],
      exports: [SecondOutboxUser],
    })
    class SecondOutboxModule {}

    const table = uniqueName();
    app = await createTestApp({
      backend,
      table,
      providers: [Sink, GlobalOutboxUser],
      imports: [SecondOutboxModule],
      extraTypeOrm: { migrations: [...createOutboxMigrations(table), ...createOutboxMigrations(second)] },
    });
    // Injected, as an application gets them (TestingModule.get would take whichever it finds first).
    const main = app.module.get(GlobalOutboxUser);
    const other = app.module.get(SecondOutboxUser);
    expect(other.outbox).not.toBe(main.outbox);

    const [first, last] = await app.txHost.withTransaction(async () => [
      await main.outbox.publish('thing.happened', { via: 'global' }),
      await other.outbox.publish('thing.happened', { via: 'second' }),
    ]);
    expect((await outboxRows(app)).map((r) => r.id)).toEqual([first.id]);
    expect((await app.raw.query(`SELECT "id" FROM "${second}"`)).map((r) => r.id)).toEqual([last.id]);

    const sink = app.module.get(Sink);
    await main.worker.drain();
    expect(sink.seen.map((m) => m.id)).toEqual([first.id]);
    await other.worker.drain();
    expect(sink.seen.map((m) => m.id)).toEqual([first.id, last.id]);
  });
});
