import type { OutboxDialect, SqlExecutor, Statement } from '../dialects/shared/outbox-dialect.interface';
import { indexNames } from '../dialects/shared/dialect.util';
import { outboxTable, type OutboxTable } from '../dialects/shared/outbox-table';
import { OutboxSchemaOutdatedError, OutboxTableMissingError } from '../errors/outbox.errors';
import { DEFAULT_TABLE_NAME } from '../outbox.constants';
import { migrationName, OUTBOX_SCHEMA_VERSIONS, type OutboxSchemaVersion } from '../schema/outbox-migrations';

/**
 * Refuses to start on a table that is not where the entity and the worker look, naming the fix. A
 * table under the bare name elsewhere was made by a version that ignored the DataSource's `schema`
 * and `entityPrefix`: it still holds that install's events, so it is moved, never recreated.
 */
export async function verifyOutboxTable(
  executor: SqlExecutor,
  dialect: OutboxDialect,
  table: OutboxTable,
  tableName: string,
): Promise<void> {
  if (await exists(executor, dialect, table)) return verifySchemaVersion(executor, dialect, table, tableName);
  const bare = outboxTable(tableName);
  const migration = `the migrations ${tableName === DEFAULT_TABLE_NAME ? '...OutboxMigrations' : `...createOutboxMigrations('${tableName}')`}`;
  if (bare.path !== table.path && (await exists(executor, dialect, bare))) {
    throw new OutboxTableMissingError(
      table.path,
      `A table "${tableName}" exists where the connection resolves unqualified names: an earlier version put it ` +
        `there, ignoring the DataSource's schema/entityPrefix. Move it (with its events) before starting: ` +
        dialect.schema.relocate(bare, table).join('; '),
    );
  }
  throw new OutboxTableMissingError(
    table.path,
    `Add ${migration} to the DataSource's migrations and run them (migrationsRun: true, or the TypeORM CLI).`,
  );
}

/** Refuses a table that a migration of `OutboxMigrations` has not reached yet, naming the first missing one. */
async function verifySchemaVersion(
  executor: SqlExecutor,
  dialect: OutboxDialect,
  table: OutboxTable,
  tableName: string,
): Promise<void> {
  const rows = async (statement: Statement) => (await executor.run(statement)).rows;
  // Column name → its character set (null where the database keeps none per column), and whether its
  // comparisons keep trailing spaces (undefined where the database never pads).
  const columns = new Map(
    (await rows(dialect.schema.columns(table))).map((row) => [
      String(row.name),
      {
        charset: row.charset == null ? null : (row.charset as string),
        noPad: row.no_pad == null ? undefined : Number(row.no_pad) === 1,
      },
    ]),
  );
  const indexes = new Set((await rows(dialect.schema.indexes(table))).map((row) => String(row.name)));
  const index = indexNames(table.name);
  const reached = ({ version, marker }: OutboxSchemaVersion) => {
    // Nothing to find where the version changes nothing (versions 5 and 6 on PostgreSQL and SQLite, 9 on MySQL/MariaDB).
    if (dialect.schema.upgrade(version, table).length === 0) return true;
    if (!('column' in marker)) return indexes.has(index[marker.index]);
    const column = columns.get(marker.column);
    if (!column) return false;
    if (marker.noPad && column.noPad === false) return false;
    return marker.charset === undefined || column.charset === null || column.charset.toLowerCase() === marker.charset;
  };
  const missing = OUTBOX_SCHEMA_VERSIONS.find((step) => !reached(step));
  if (!missing) return;
  const latest = OUTBOX_SCHEMA_VERSIONS[OUTBOX_SCHEMA_VERSIONS.length - 1].version;
  throw new OutboxSchemaOutdatedError(
    table.path,
    missing.version - 1,
    latest,
    migrationName(tableName, missing.version),
  );
}

async function exists(executor: SqlExecutor, dialect: OutboxDialect, table: OutboxTable): Promise<boolean> {
  const { rows } = await executor.run(dialect.schema.tableExists(table));
  const found = rows[0]?.found;
  return found === true || Number(found) > 0;
}
