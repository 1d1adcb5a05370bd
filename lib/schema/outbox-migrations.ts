import { DEFAULT_TABLE_NAME } from '../outbox.constants';
import { outboxMigrationClass, type OutboxMigrationClass } from './migration-class';
import { createOutboxMigration } from './outbox.migration';
import { validateTableName } from './table-name';

export interface OutboxSchemaVersion {
  version: number;
  name: string;
  timestamp: number;
  /**
   * What the version adds, by which start-up recognises it: a column (with `charset`, its character
   * set where the database keeps one per column: MySQL/MariaDB; with `noPad`, a collation that keeps
   * trailing spaces significant where the database pads by default), or an index (its role in `indexNames`).
   * A version that changes nothing on a database (no statement in its upgrade there) has nothing to find:
   * start-up takes it as reached with the one before.
   */
  marker: { column: string; charset?: string; noPad?: true } | { index: 'retention' | 'front' };
}

/**
 * The schema versions after the first, in order. Each is released once and never edited: a later
 * change is a new entry.
 */
export const OUTBOX_SCHEMA_VERSIONS: readonly OutboxSchemaVersion[] = [
  // Attempt state as data: lease expiries counted in columns, the outbox's remarks in `note`, so
  // `last_error` keeps the handler's own error.
  { version: 2, name: 'OutboxAttemptState', timestamp: 1795996800000, marker: { column: 'expired_attempts' } },
  // Retention reads finished rows by status and age through an index instead of scanning the table.
  { version: 3, name: 'OutboxRetentionIndex', timestamp: 1796083200000, marker: { index: 'retention' } },
  // Operations: when the current attempt started, the last attempts' history, how often it was redriven.
  { version: 4, name: 'OutboxAttemptHistory', timestamp: 1796169600000, marker: { column: 'redrive_count' } },
  // MySQL/MariaDB: the id and the claim token in ASCII, so every key lookup of a claim or an
  // acknowledgement compares bytes instead of utf8mb4 text. Nothing on PostgreSQL and SQLite.
  { version: 5, name: 'OutboxAsciiKeys', timestamp: 1796256000000, marker: { column: 'id', charset: 'ascii' } },
  // MySQL/MariaDB: `key` and `dedupe_key` in a NO PAD collation, so keys that differ only by trailing
  // spaces are two keys (a PAD SPACE collation made the unique index take them for one, and publish()
  // lost the second event). PostgreSQL and SQLite compare them exactly already.
  { version: 6, name: 'OutboxExactKeys', timestamp: 1796342400000, marker: { column: 'key', noPad: true } },
  // Per-key order: an event's place in its key, the `waiting` status, and the keys' table.
  { version: 7, name: 'OutboxKeyOrder', timestamp: 1796428800000, marker: { column: 'seq' } },
  // The publisher's trace context in a column of its own, beside the headers: it is not part of what
  // the event is (dedupe, the headers' limits and what handlers see are the same with tracing on or off).
  { version: 8, name: 'OutboxTraceContext', timestamp: 1796515200000, marker: { column: 'trace_context' } },
  // Per-key order's rule "of an ordered key, only its front is pending", kept by the database where it
  // has partial unique indexes (PostgreSQL, SQLite). Nothing on MySQL/MariaDB, which have none.
  { version: 9, name: 'OutboxKeyFront', timestamp: 1796601600000, marker: { index: 'front' } },
];

const upgrades = new Map<string, OutboxMigrationClass>();

function upgradeMigration(step: OutboxSchemaVersion, tableName: string): OutboxMigrationClass {
  const name =
    tableName === DEFAULT_TABLE_NAME ? `${step.name}${step.timestamp}` : `${step.name}_${tableName}${step.timestamp}`;
  const existing = upgrades.get(name);
  if (existing) return existing;
  const migration = outboxMigrationClass(
    name,
    tableName,
    (dialect, table) => dialect.schema.upgrade(step.version, table),
    (dialect, table) => dialect.schema.downgrade(step.version, table),
  );
  upgrades.set(name, migration);
  return migration;
}

/**
 * Every migration of an outbox table, oldest first: the table as first released, then each schema
 * change. Spread it into your DataSource's `migrations`; a new version of this package may append to it.
 */
export function createOutboxMigrations(tableName: string = DEFAULT_TABLE_NAME): OutboxMigrationClass[] {
  validateTableName(tableName);
  return [createOutboxMigration(tableName), ...OUTBOX_SCHEMA_VERSIONS.map((step) => upgradeMigration(step, tableName))];
}

/** The migrations of the default `outbox_event` table. */
export const OutboxMigrations: readonly OutboxMigrationClass[] = createOutboxMigrations();

/** The name of the migration that brings `tableName` to `version`, for messages. */
export function migrationName(tableName: string, version: number): string {
  const index = OUTBOX_SCHEMA_VERSIONS.findIndex((step) => step.version === version);
  return createOutboxMigrations(tableName)[index + 1].name;
}
