import { QueryFailedError } from 'typeorm';
import { OutboxUnsupportedDatabaseError } from '../../lib';
import { MysqlDialect } from '../../lib/dialects/mysql/mysql.dialect';
import type { OutboxDialect, SqlExecutor } from '../../lib/dialects/shared/outbox-dialect.interface';
import { PostgresDialect } from '../../lib/dialects/postgres/postgres.dialect';
import { SqliteDialect } from '../../lib/dialects/sqlite/sqlite.dialect';
import { sqliteOffset } from '../../lib/dialects/sqlite/sqlite-flavor';
import { sqliteFile } from '../../lib/dialects/sqlite/sqlite-file-wake-up';

/**
 * The three dialect classes (`lib/dialects/{mysql,postgres,sqlite}/*.dialect.ts`), side by side where they
 * answer the same question, then what only one of them does.
 */

/** Answers the version query the way each server does; the dialect only reads one column. */
function serverReporting(column: string, version: string): SqlExecutor {
  return {
    run: () => Promise.resolve({ rows: [{ [column]: version }], affected: 0 }),
    transaction: () => Promise.reject(new Error('not used')),
  };
}

describe('server version checks', () => {
  const cases: Array<[string, OutboxDialect, string, string, string | null]> = [
    [
      'MariaDB 10.5',
      new MysqlDialect(),
      'version',
      '10.5.27-MariaDB-log',
      'MariaDB 10.5.27-MariaDB-log is not supported by the outbox: it needs MariaDB 10.6',
    ],
    ['MariaDB 10.6', new MysqlDialect(), 'version', '10.6.0-MariaDB', null],
    ['MariaDB 11.4', new MysqlDialect(), 'version', '11.4.2-MariaDB-ubu2404', null],
    // 8.0.17 brought utf8mb4_0900_bin, the NO PAD collation of schema version 6's keys.
    [
      'MySQL 8.0.16',
      new MysqlDialect(),
      'version',
      '8.0.16',
      'MySQL 8.0.16 is not supported by the outbox: it needs MySQL 8.0.17',
    ],
    ['MySQL 5.7', new MysqlDialect(), 'version', '5.7.44-log', 'needs MySQL 8.0.17'],
    ['MySQL 8.0.17', new MysqlDialect(), 'version', '8.0.17', null],
    ['MySQL 8.4', new MysqlDialect(), 'version', '8.4.3', null],
    ['PostgreSQL 12', new PostgresDialect(), 'server_version', '12.22 (Debian 12.22-1)', 'needs PostgreSQL 13.0'],
    ['PostgreSQL 15', new PostgresDialect(), 'server_version', '15.20 (Debian 15.20-0+deb12u1)', null],
    ['SQLite 3.34', new SqliteDialect(), 'version', '3.34.1', 'needs SQLite 3.35.0'],
    ['SQLite 3.44', new SqliteDialect(), 'version', '3.44.2', null],
  ];
  it.each(cases)('%s', async (_name, dialect, column, version, error) => {
    const check = dialect.verifyServer(serverReporting(column, version));
    if (error === null) {
      await expect(check).resolves.toBeUndefined();
    } else {
      await expect(check).rejects.toBeInstanceOf(OutboxUnsupportedDatabaseError);
      await expect(check).rejects.toThrow(error);
    }
  });
});

describe('transient errors', () => {
  const wrapped = (driverError: object) =>
    new QueryFailedError('UPDATE …', [], Object.assign(new Error('x'), driverError));

  it('MySQL/MariaDB: deadlock (1213) and lock wait timeout (1205) are retried, nothing else', () => {
    const dialect = new MysqlDialect();
    expect(dialect.isTransient(wrapped({ errno: 1213, code: 'ER_LOCK_DEADLOCK' }))).toBe(true);
    expect(dialect.isTransient(wrapped({ errno: 1205, code: 'ER_LOCK_WAIT_TIMEOUT' }))).toBe(true);
    expect(dialect.isTransient(wrapped({ errno: 1062, code: 'ER_DUP_ENTRY' }))).toBe(false);
    expect(dialect.isTransient(new Error('x'))).toBe(false);
  });

  it('PostgreSQL: deadlock, serialization failure and lock not available', () => {
    const dialect = new PostgresDialect();
    for (const code of ['40P01', '40001', '55P03']) expect(dialect.isTransient(wrapped({ code }))).toBe(true);
    expect(dialect.isTransient(wrapped({ code: '23505' }))).toBe(false);
  });

  it('SQLite: busy', () => {
    const dialect = new SqliteDialect();
    expect(dialect.isTransient(wrapped({ code: 'SQLITE_BUSY' }))).toBe(true);
    expect(dialect.isTransient(wrapped({ code: 'SQLITE_CONSTRAINT' }))).toBe(false);
  });
});

describe('SQLite', () => {
  it.each([
    [0, '+0.000 seconds'],
    [1500, '+1.500 seconds'],
    [86_400_000, '+86400.000 seconds'],
    [-250, '-0.250 seconds'],
  ])('offsets %d ms as the date modifier %p', (ms, modifier) => {
    expect(sqliteOffset(ms)).toBe(modifier);
  });

  it.each([
    ['/tmp/app.sqlite', '/tmp/app.sqlite'],
    ['app.sqlite', 'app.sqlite'],
    [':memory:', undefined],
    ['file::memory:?cache=shared', undefined],
    ['', undefined],
    [undefined, undefined],
  ])('watches the file of database %p for cross-process wake-up: %p', (database, file) => {
    expect(sqliteFile(database)).toBe(file);
  });

  it('retries every busy code, extended ones included, and nothing else', () => {
    const dialect = new SqliteDialect();
    const wrapped = (code: string) => new QueryFailedError('UPDATE …', [], Object.assign(new Error('x'), { code }));
    for (const code of ['SQLITE_BUSY', 'SQLITE_BUSY_SNAPSHOT', 'SQLITE_BUSY_RECOVERY', 'SQLITE_BUSY_TIMEOUT']) {
      expect(dialect.isTransient(wrapped(code))).toBe(true);
    }
    for (const code of ['SQLITE_LOCKED', 'SQLITE_CONSTRAINT_UNIQUE', 'XSQLITE_BUSY']) {
      expect(dialect.isTransient(wrapped(code))).toBe(false);
    }
    expect(dialect.isTransient(new Error('SQLITE_BUSY: database is locked'))).toBe(false);
  });
});
