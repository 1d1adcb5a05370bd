import type { DataSource } from 'typeorm';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { OutboxDialect } from './shared/outbox-dialect.interface';
import { MysqlDialect } from './mysql/mysql.dialect';
import { PostgresDialect } from './postgres/postgres.dialect';
import { SqliteDialect } from './sqlite/sqlite.dialect';

const SUPPORTED = ['postgres', 'mysql', 'mariadb', 'sqlite', 'better-sqlite3'];

export function dialectForType(type: string): OutboxDialect {
  switch (type) {
    case 'postgres':
      return new PostgresDialect();
    case 'mysql':
    case 'mariadb':
      return new MysqlDialect();
    case 'sqlite':
    case 'better-sqlite3':
      return new SqliteDialect();
    default:
      throw new OutboxConfigurationError(
        'dataSource',
        `the outbox does not support TypeORM database type "${type}"; supported: ${SUPPORTED.join(', ')}`,
      );
  }
}

export function isSqlite(dataSource: DataSource): boolean {
  return dataSource.options.type === 'sqlite' || dataSource.options.type === 'better-sqlite3';
}
