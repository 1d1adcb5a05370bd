import type { MigrationInterface, QueryRunner } from 'typeorm';
import { DEFAULT_TABLE_NAME } from '../outbox.constants';
import { validateTableName } from '../outbox.options';
import { dialectForType } from '../dialects/dialect-for-type';
import { outboxTableOn } from '../dialects/shared/outbox-table';

/** The migration's timestamp; TypeORM orders migrations by the 13 digits at the end of their names. */
const CREATED_AT = 1764460800000;

export type OutboxMigrationClass = new () => MigrationInterface;

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

  const name = tableName === DEFAULT_TABLE_NAME ? `CreateOutboxEvent${CREATED_AT}` : `CreateOutbox_${tableName}${CREATED_AT}`;
  class OutboxTableMigration implements MigrationInterface {
    name = name;

    async up(queryRunner: QueryRunner): Promise<void> {
      const table = outboxTableOn(queryRunner.connection, tableName);
      for (const sql of dialectForType(String(queryRunner.connection.options.type)).createSchema(table)) {
        await queryRunner.query(sql);
      }
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      const table = outboxTableOn(queryRunner.connection, tableName);
      for (const sql of dialectForType(String(queryRunner.connection.options.type)).dropSchema(table)) {
        await queryRunner.query(sql);
      }
    }
  }
  Object.defineProperty(OutboxTableMigration, 'name', { value: name });
  migrations.set(tableName, OutboxTableMigration);
  return OutboxTableMigration;
}

/** Creates the default `outbox_event` table. */
export const OutboxMigration = createOutboxMigration();
