import 'reflect-metadata';
import { Injectable, Module, type DynamicModule, type Provider } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClsPluginTransactional } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { getDataSourceToken, TypeOrmModule, type TypeOrmModuleOptions } from '@nestjs/typeorm';
import { ClsModule } from 'nestjs-cls';
import { ClientProxyFactory, Transport } from '@nestjs/microservices';
import {
  ClientProxyWakeUp,
  createOutboxMigrations,
  OutboxHandler,
  OutboxModule,
  type OutboxMessage,
  type OutboxModuleOptions,
} from '../lib';

export type Db = 'postgres' | 'mariadb' | 'sqlite';
export const DBS: Db[] = ['postgres', 'mariadb', 'sqlite'];

export const PG_URL = process.env.OUTBOX_BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const MARIADB_URL = process.env.OUTBOX_BENCH_MARIADB_URL ?? 'mysql://root@127.0.0.1:3306/test';
export const SQLITE_FILE = process.env.OUTBOX_BENCH_SQLITE ?? '/tmp/nestjs-typeorm-outbox-bench.sqlite';

/** TypeORM options of the library side: pool of `pool` connections, better-sqlite3 for SQLite. */
export function typeorm(db: Db, table: string, pool = 10, migrate = false): TypeOrmModuleOptions {
  const common = {
    migrations: migrate ? createOutboxMigrations(table) : [],
    migrationsRun: migrate,
    migrationsTableName: `${table}_migrations`,
  };
  if (db === 'postgres') return { type: 'postgres', url: PG_URL, extra: { max: pool }, ...common };
  if (db === 'mariadb') return { type: 'mariadb', url: MARIADB_URL, extra: { connectionLimit: pool }, ...common };
  return { type: 'better-sqlite3', database: SQLITE_FILE, enableWAL: true, timeout: 30_000, ...common };
}

/** How long the slow-handler latency run's 'bench.slow' handler holds its lane: a partner that hangs. */
export const SLOW_HANDLER_MS = 10_000;

/** Counts deliveries; the no-op handler of the drain and latency runs. */
@Injectable()
export class Sink {
  count = 0;
  onReceive: ((m: OutboxMessage) => void) | undefined;
  onSlow: (() => void) | undefined;
  @OutboxHandler('bench.event')
  handle(message: OutboxMessage) {
    this.count++;
    this.onReceive?.(message);
  }

  @OutboxHandler('bench.slow')
  async slow() {
    this.onSlow?.();
    await new Promise((resolve) => setTimeout(resolve, SLOW_HANDLER_MS));
  }
}

/** A Nest application context with the outbox on `table`, and `providers` (the bench's handlers). */
export function libraryApp(
  db: Db,
  table: string,
  outbox: Omit<OutboxModuleOptions, 'tableName'>,
  pool = 10,
  providers: Provider[] = [Sink],
) {
  return benchApp(db, table, [OutboxModule.forRoot({ ...outbox, tableName: table })], pool, providers);
}

/** A Nest application context on `db` with nestjs-cls's transactional plugin, `imports` and `providers`. */
export async function benchApp(db: Db, table: string, imports: DynamicModule[], pool = 10, providers: Provider[] = []) {
  return NestFactory.createApplicationContext(benchModule(db, table, imports, pool, providers), {
    logger: ['error', 'warn'],
  });
}

/**
 * The module of a bench application on `db`: TypeORM (`typeorm()`'s options, and `more` over them, e.g.
 * migrations of its own), nestjs-cls's transactional plugin, `imports` and `providers`.
 */
export function benchModule(
  db: Db,
  table: string,
  imports: DynamicModule[],
  pool = 10,
  providers: Provider[] = [],
  more: Partial<TypeOrmModuleOptions> = {},
): DynamicModule {
  @Module({})
  class BenchModule {
    static forRoot(): DynamicModule {
      return {
        module: BenchModule,
        imports: [
          TypeOrmModule.forRoot({ ...typeorm(db, table, pool), ...more } as TypeOrmModuleOptions),
          ClsModule.forRoot({
            global: true,
            plugins: [
              new ClsPluginTransactional({
                imports: [TypeOrmModule],
                adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken() }),
              }),
            ],
          }),
          ...imports,
        ],
        providers,
      };
    }
  }
  return BenchModule.forRoot();
}

export const REDIS_URL = process.env.OUTBOX_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** The `wakeUp` option of an instance: the database's own channel, or ClientProxyWakeUp over a Redis client of its own. */
export function wakeUpOption(wake: string | undefined): Pick<OutboxModuleOptions, 'wakeUp'> {
  if (wake !== 'redis') return {};
  const { hostname, port } = new URL(REDIS_URL);
  const client = ClientProxyFactory.create({
    transport: Transport.REDIS,
    options: { host: hostname, port: Number(port) },
  });
  // The client is the bench's own, not one of ClientsModule's (which Nest closes at shutdown): it goes
  // with the channel, or its connections keep the process alive.
  class OwnClientWakeUp extends ClientProxyWakeUp {
    override async close(): Promise<void> {
      await super.close();
      await client.close();
    }
  }
  return { wakeUp: new OwnClientWakeUp(client) };
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}
