// A Nest application as a user of the published package builds it, in plain ESM: NestJS 12, the CLS
// transaction plugin, @nestjs/schedule, TypeORM, and the outbox from the packed tarball.
import 'reflect-metadata';
import { ClsPluginTransactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { Injectable } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { ClsModule } from 'nestjs-cls';
import * as outboxPackage from 'nestjs-typeorm-outbox';
import { dialectSql, openRaw, removeSqliteFile, sqliteFile, typeOrmOptions, uniqueName } from './databases.mjs';

const { OutboxHandler, OutboxModule, OutboxService, OutboxWorker } = outboxPackage;

/** Nest's log lines stay out of the test report (expected failures log warnings); OUTBOX_COMPAT_LOG=1 prints them. */
class QuietLogger {
  #print = process.env.OUTBOX_COMPAT_LOG === '1';
  #write(level, message) {
    if (this.#print) console.error(`[${level}] ${message}`);
  }
  log(message) { this.#write('log', message); }
  error(message) { this.#write('error', message); }
  warn(message) { this.#write('warn', message); }
  fatal(message) { this.#write('fatal', message); }
  debug() {}
  verbose() {}
}

/**
 * The outbox table's migrations. The package is moving from one migration to an ordered list
 * (`createOutboxMigrations`); the job takes the list where the packed build has it.
 */
function outboxMigrations(table) {
  return outboxPackage.createOutboxMigrations
    ? outboxPackage.createOutboxMigrations(table)
    : [outboxPackage.createOutboxMigration(table)];
}

/**
 * Starts an application on `backend` with its own outbox table (and SQLite file), plus a
 * `<table>_orders` table for business writes, with `imports` beside the outbox's. `outbox` is passed to `OutboxModule.forRoot`;
 * `outboxModule(table)` replaces that module (for `forRootAsync`). With `http: true` it is an HTTP application
 * (`@nestjs/platform-express`) listening on a free port, serving `controllers` (with `rawBody: true`, each request's
 * body kept as received). With `inbox` (OutboxInboxModule's options), an inbox table `<table>_inbox` beside the outbox.
 * With `admin` (OutboxAdminModule's options), the admin page at `/admin/outbox` (unless `admin.path` says otherwise)
 * and its audit table `<table>_audit` beside the outbox.
 */
export async function startApp(
  backend,
  {
    providers = [],
    controllers = [],
    imports = [],
    outbox = {},
    outboxModule,
    http = false,
    rawBody = false,
    inbox,
    admin,
  } = {},
) {
  const table = uniqueName('compat');
  const sqlitePath = backend === 'better-sqlite3' ? sqliteFile() : undefined;
  class CompatAppModule {}
  const root = {
    module: CompatAppModule,
    imports: [
      TypeOrmModule.forRoot({
        ...typeOrmOptions(backend, sqlitePath),
        migrations: [
          ...outboxMigrations(table),
          ...(inbox ? outboxPackage.createOutboxInboxMigrations(`${table}_inbox`) : []),
          ...(admin ? outboxPackage.createOutboxAdminMigrations(`${table}_audit`) : []),
        ],
        migrationsRun: true,
        migrationsTableName: `${table}_migrations`,
        autoLoadEntities: true,
      }),
      ClsModule.forRoot({
        global: true,
        plugins: [
          new ClsPluginTransactional({
            imports: [TypeOrmModule],
            adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken() }),
          }),
        ],
      }),
      ScheduleModule.forRoot(),
      outboxModule ? outboxModule(table) : OutboxModule.forRoot({ ...outbox, tableName: table }),
      ...(inbox ? [outboxPackage.OutboxInboxModule.forRoot({ ...inbox, tableName: `${table}_inbox` })] : []),
      ...(admin
        ? [outboxPackage.OutboxAdminModule.forRoot({ path: 'admin/outbox', auditTableName: `${table}_audit`, ...admin })]
        : []),
      ...imports,
    ],
    providers,
    controllers,
  };
  // abortOnError: false makes a failed start-up throw here instead of ending the test process.
  const nestOptions = { logger: new QuietLogger(), abortOnError: false, ...(rawBody ? { rawBody } : {}) };
  const context = http
    ? await NestFactory.create(root, nestOptions)
    : await NestFactory.createApplicationContext(root, nestOptions);
  if (http) await context.listen(0, '127.0.0.1');
  const raw = await openRaw(backend, sqlitePath);
  const ordersTable = `${table}_orders`;
  await raw.query(`CREATE TABLE "${ordersTable}" ("id" varchar(64) PRIMARY KEY, "note" varchar(255))`);

  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await context.close();
  };
  return {
    backend,
    table,
    ordersTable,
    context,
    /** With `http: true`: the address the application listens on (Express, on a free port). */
    url: http ? await context.getUrl() : undefined,
    raw,
    outbox: context.get(OutboxService),
    worker: context.get(OutboxWorker),
    txHost: context.get(TransactionHost),
    /** Test SQL in this backend's dialect, for `txHost.tx.query`. */
    sql: (text) => dialectSql(backend, text),
    close,
    /** The outbox row of `id`, read on the test's own connection. */
    row: async (id) => (await raw.query(`SELECT * FROM "${table}" WHERE "id" = ?`, [id]))[0],
    rows: () => raw.query(`SELECT * FROM "${table}"`),
    /** Closes the application and removes what it created. */
    dispose: async () => {
      await close();
      if (sqlitePath) {
        await raw.close();
        removeSqliteFile(sqlitePath);
        return;
      }
      for (const name of [table, `${table}_migrations`, `${table}_inbox`, `${table}_audit`, ordersTable]) {
        await raw.query(`DROP TABLE IF EXISTS "${name}"`);
      }
      await raw.close();
    },
  };
}

/**
 * Marks `Class` injectable and its `method` a handler of `topic`: what `@Injectable()` and
 * `@OutboxHandler(topic)` do in TypeScript (plain JavaScript has no decorators yet).
 */
export function handlerClass(Class, method, topic, options) {
  const prototype = Class.prototype;
  OutboxHandler(topic, options)(prototype, method, Object.getOwnPropertyDescriptor(prototype, method));
  Injectable()(Class);
  return Class;
}
