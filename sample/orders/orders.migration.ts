import type { MigrationInterface, QueryRunner } from 'typeorm';

/** Creates the `orders` table on PostgreSQL, MariaDB/MySQL or SQLite, whichever the data source is. */
export class CreateOrders1764547200000 implements MigrationInterface {
  name = 'CreateOrders1764547200000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const type = queryRunner.connection.options.type;
    switch (type) {
      case 'postgres':
        await queryRunner.query(`
          CREATE TABLE "orders" (
            "id" uuid PRIMARY KEY,
            "customer" varchar(200) NOT NULL,
            "amount" integer NOT NULL CHECK ("amount" > 0),
            "created_at" timestamptz NOT NULL DEFAULT now()
          )`);
        break;
      case 'mariadb':
      case 'mysql':
        await queryRunner.query(`
          CREATE TABLE \`orders\` (
            \`id\` char(36) PRIMARY KEY,
            \`customer\` varchar(200) NOT NULL,
            \`amount\` integer NOT NULL CHECK (\`amount\` > 0),
            \`created_at\` datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
          ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`);
        break;
      case 'sqlite':
      case 'better-sqlite3':
        await queryRunner.query(`
          CREATE TABLE "orders" (
            "id" varchar(36) PRIMARY KEY NOT NULL,
            "customer" varchar(200) NOT NULL,
            "amount" integer NOT NULL CHECK ("amount" > 0),
            "created_at" datetime NOT NULL DEFAULT (datetime('now'))
          )`);
        break;
      default:
        throw new Error(`CreateOrders: database type "${type}" is not supported by the sample`);
    }
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE ${queryRunner.connection.driver.escape('orders')}`);
  }
}
