import { outboxMigrationClass, type OutboxMigrationClass } from './migration-class';
import { validateTableName } from './table-name';

/** The inbox table's name unless `OutboxInboxModule` is given another. */
export const DEFAULT_INBOX_TABLE_NAME = 'outbox_inbox';

/** The first migration's timestamp; TypeORM orders migrations by the 13 digits at the end of their names. */
const CREATED_AT = 1796774400000;

const created = new Map<string, OutboxMigrationClass>();

/** The migration that creates the inbox table `tableName` as first released (inbox schema version 1). */
function createInboxMigration(tableName: string): OutboxMigrationClass {
  const existing = created.get(tableName);
  if (existing) return existing;
  const name =
    tableName === DEFAULT_INBOX_TABLE_NAME
      ? `CreateOutboxInbox${CREATED_AT}`
      : `CreateOutboxInbox_${tableName}${CREATED_AT}`;
  const migration = outboxMigrationClass(
    name,
    tableName,
    (dialect, table) => dialect.inbox.create(table),
    (dialect, table) => dialect.inbox.drop(table),
  );
  created.set(tableName, migration);
  return migration;
}

/**
 * Every migration of an inbox table, oldest first. Spread it into the DataSource's `migrations` of the
 * service that receives messages; a new version of this package may append to it, and never edits
 * what it released (the same rule as `createOutboxMigrations`).
 */
export function createOutboxInboxMigrations(tableName: string = DEFAULT_INBOX_TABLE_NAME): OutboxMigrationClass[] {
  validateTableName(tableName);
  return [createInboxMigration(tableName)];
}

/** The migrations of the default `outbox_inbox` table. */
export const OutboxInboxMigrations: readonly OutboxMigrationClass[] = createOutboxInboxMigrations();
