import { outboxMigrationClass, type OutboxMigrationClass } from './migration-class';
import { validateTableName } from './table-name';

/** The admin page's audit table unless `OutboxAdminModule` is given another name. */
export const DEFAULT_AUDIT_TABLE_NAME = 'outbox_admin_audit';

/** The first migration's timestamp; TypeORM orders migrations by the 13 digits at the end of their names. */
const CREATED_AT = 1796947200000;

const created = new Map<string, OutboxMigrationClass>();

/** The migration that creates the audit table `tableName` as first released (audit schema version 1). */
function createAuditMigration(tableName: string): OutboxMigrationClass {
  const existing = created.get(tableName);
  if (existing) return existing;
  const name =
    tableName === DEFAULT_AUDIT_TABLE_NAME
      ? `CreateOutboxAdminAudit${CREATED_AT}`
      : `CreateOutboxAdminAudit_${tableName}${CREATED_AT}`;
  const migration = outboxMigrationClass(
    name,
    tableName,
    (dialect, table) => dialect.audit.create(table),
    (dialect, table) => dialect.audit.drop(table),
  );
  created.set(tableName, migration);
  return migration;
}

/**
 * Every migration of the admin page's audit table, oldest first. Spread it into the DataSource's
 * `migrations` beside the outbox's; a new version of this package may append to it, and never edits what
 * it released (the same rule as `createOutboxMigrations`).
 */
export function createOutboxAdminMigrations(tableName: string = DEFAULT_AUDIT_TABLE_NAME): OutboxMigrationClass[] {
  validateTableName(tableName);
  return [createAuditMigration(tableName)];
}

/** The migrations of the default `outbox_admin_audit` table. */
export const OutboxAdminMigrations: readonly OutboxMigrationClass[] = createOutboxAdminMigrations();
