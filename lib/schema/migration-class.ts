import type { MigrationInterface, QueryRunner } from 'typeorm';
import { dialectForType } from '../dialects/dialect-for-type';
import type { OutboxDialect } from '../dialects/shared/outbox-dialect.interface';
import { outboxTableOn, type OutboxTable } from '../dialects/shared/outbox-table';

export type OutboxMigrationClass = new () => MigrationInterface;

type Statements = (dialect: OutboxDialect, table: OutboxTable) => string[];

/**
 * A TypeORM migration class named `name` (its class name too, which TypeORM records) that runs the
 * statements `up` or `down` give for the database it runs on, on the table where TypeORM places
 * `tableName` (the DataSource's PostgreSQL `schema` and `entityPrefix` applied).
 */
export function outboxMigrationClass(
  name: string,
  tableName: string,
  up: Statements,
  down: Statements,
): OutboxMigrationClass {
  const run = async (queryRunner: QueryRunner, statements: Statements): Promise<void> => {
    const table = outboxTableOn(queryRunner.connection, tableName);
    for (const sql of statements(dialectForType(String(queryRunner.connection.options.type)), table)) {
      await queryRunner.query(sql);
    }
  };
  class OutboxTableMigration implements MigrationInterface {
    name = name;

    up(queryRunner: QueryRunner): Promise<void> {
      return run(queryRunner, up);
    }

    down(queryRunner: QueryRunner): Promise<void> {
      return run(queryRunner, down);
    }
  }
  Object.defineProperty(OutboxTableMigration, 'name', { value: name });
  return OutboxTableMigration;
}
