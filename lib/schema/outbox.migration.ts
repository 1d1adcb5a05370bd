import { DEFAULT_TABLE_NAME } from '../outbox.constants';
import { outboxMigrationClass, type OutboxMigrationClass } from './migration-class';
import { validateTableName } from './table-name';

/** The migration's timestamp; TypeORM orders migrations by the 13 digits at the end of their names. */
const CREATED_AT = 1764460800000;

export type { OutboxMigrationClass } from './migration-class';

const migrations = new Map<string, OutboxMigrationClass>();

/**
 * The migration that creates an outbox table and its indexes, for the database it runs on
 * (PostgreSQL, MySQL/MariaDB or SQLite), where TypeORM places the entity: in the DataSource's `schema`
 * (PostgreSQL) and with its `entityPrefix`. Put it in your DataSource's `migrations` list.
 */
export function createOutboxMigration(tableName: string = DEFAULT_TABLE_NAME): OutboxMigrationClass {
  validateTableName(tableName);
  const existing = migrations.get(tableName);
  if (existing) return existing;

  const name =
    tableName === DEFAULT_TABLE_NAME ? `CreateOutboxEvent${CREATED_AT}` : `CreateOutbox_${tableName}${CREATED_AT}`;
  const migration = outboxMigrationClass(
    name,
    tableName,
    (dialect, table) => dialect.schema.createSchema(table),
    (dialect, table) => dialect.schema.dropSchema(table),
  );
  migrations.set(tableName, migration);
  return migration;
}

/** Creates the default `outbox_event` table. */
export const OutboxMigration = createOutboxMigration();
