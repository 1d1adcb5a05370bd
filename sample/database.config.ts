import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { TypeOrmModuleOptions } from '@nestjs/typeorm';
import { OutboxMigrations } from '../lib';
import { CreateOrders1764547200000 } from './orders/orders.migration';

/** The embedded database used when DATABASE_URL is not set (relative to the working directory). */
export const SQLITE_FILE = resolve('sample/.data/orders.sqlite');

/**
 * TypeORM options of the sample: PostgreSQL for a postgres:// or postgresql:// URL, MariaDB or MySQL
 * for mariadb:// or mysql://, else the embedded SQLite file. Throws on any other URL, before Nest starts.
 */
export function databaseOptions(databaseUrl: string | undefined): TypeOrmModuleOptions {
  const common = {
    migrations: [...OutboxMigrations, CreateOrders1764547200000],
    migrationsRun: true,
    autoLoadEntities: true,
  };
  if (!databaseUrl) {
    mkdirSync(dirname(SQLITE_FILE), { recursive: true });
    return { type: 'sqlite', database: SQLITE_FILE, enableWAL: true, busyTimeout: 5000, ...common };
  }
  if (/^postgres(ql)?:\/\//i.test(databaseUrl)) {
    return { type: 'postgres', url: databaseUrl, ...common };
  }
  const mysql = /^(mariadb|mysql):\/\//i.exec(databaseUrl);
  if (mysql) {
    // mysql2 reads URLs with the mysql: scheme; `timezone: 'Z'` makes TypeORM read DATETIME as UTC.
    const url = databaseUrl.replace(/^mariadb:/i, 'mysql:');
    return { type: mysql[1].toLowerCase() as 'mariadb' | 'mysql', url, timezone: 'Z', ...common };
  }
  // Name only the scheme: the rest of a URL may hold a password.
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(databaseUrl)?.[1];
  throw new Error(
    `DATABASE_URL ${scheme ? `uses the unsupported scheme "${scheme}:"` : 'is not a URL'}; ` +
      'set it to postgres://, mysql:// or mariadb://user:password@host:port/database, ' +
      'or unset it to use the embedded SQLite file',
  );
}
