import { mysqlFlavor } from '../../lib/dialects/mysql/mysql-flavor';
import { postgresFlavor } from '../../lib/dialects/postgres/postgres-flavor';
import { sqliteFlavor } from '../../lib/dialects/sqlite/sqlite-flavor';
import { outboxTable } from '../../lib/dialects/shared/outbox-table';
import { KeyOrderStatements, PARAMETERS_PER_KEY } from '../../lib/ordering/key-order-statements';

const table = outboxTable('ev', 'app');
const statements = {
  postgres: new KeyOrderStatements(postgresFlavor, table),
  mysql: new KeyOrderStatements(mysqlFlavor, outboxTable('ev')),
  sqlite: new KeyOrderStatements(sqliteFlavor, outboxTable('ev')),
};
const reservations = [
  { key: 'a', count: 2, firstId: 'i1' },
  { key: 'b', count: 1, firstId: 'i2' },
];

describe('KeyOrderStatements', () => {
  it('reserves numbers for every key in one upsert of the keys’ table beside the outbox table, binding each key’s three values', () => {
    for (const sql of Object.values(statements)) {
      const reserve = sql.reserve(reservations);
      expect(reserve.params).toEqual(['a', 2, 'i1', 'b', 1, 'i2']);
      expect(reserve.params).toHaveLength(reservations.length * PARAMETERS_PER_KEY);
    }
    expect(statements.postgres.reserve(reservations).sql).toMatch(/^INSERT INTO "app"."ev_keys" AS k /);
    expect(statements.mysql.reserve(reservations).sql).toMatch(/^INSERT INTO `ev_keys` /);
  });

  it('reads the keys’ rows back from the reservation where the database returns rows; MySQL reports one key’s as its insert id when asked', () => {
    expect(statements.postgres.reserve(reservations).sql).toMatch(/RETURNING "key", "last_seq", "front_id"$/);
    // A statement that starts with INSERT loses its RETURNING rows in TypeORM's sqlite3 runner.
    expect(statements.sqlite.reserve(reservations).sql).toMatch(/^WITH unused AS \(SELECT 1\) INSERT INTO "ev_keys"/);
    expect(statements.mysql.reserve(reservations).sql).not.toContain('LAST_INSERT_ID');
    expect(statements.mysql.reserve(reservations.slice(0, 1), true).sql).toContain('LAST_INSERT_ID(');
    expect(statements.mysql.reserve(reservations.slice(0, 1), true).sql).not.toContain('RETURNING');
  });

  it('promotes waiting events by id, reporting whether each is due: as rows, or as MySQL’s insert id', () => {
    const promote = statements.postgres.promote(['x', 'y']);
    expect(promote.params).toEqual([['x', 'y']]);
    expect(promote.sql).toContain(`SET "status" = 'pending' WHERE "id" = ANY($1::uuid[]) AND "status" = 'waiting'`);
    expect(promote.sql).toMatch(
      /RETURNING CASE WHEN "available_at" <= statement_timestamp\(\) THEN 1 ELSE 0 END AS "due"$/,
    );
    expect(statements.sqlite.promote(['x']).sql).toMatch(
      /^WITH unused AS \(SELECT 1\) UPDATE "ev" SET "status" = 'pending'/,
    );
    const mysql = statements.mysql.promote(['x', 'y']);
    expect(mysql.sql).toContain('LAST_INSERT_ID(`seq`)');
    expect(mysql.sql).not.toContain('RETURNING');
    expect(mysql.params).toEqual(['x', 'y']);
  });

  it('locks the keys’ rows in the byte order of their UTF-8 (by primary key, forced on MySQL); nothing where one writer holds the database', () => {
    expect(statements.postgres.lockKeys(['b', 'a'])!.sql).toMatch(/ORDER BY "key" COLLATE "C" FOR UPDATE$/);
    expect(statements.mysql.lockKeys(['b', 'a'])!.sql).toMatch(/FROM `ev_keys` FORCE INDEX \(PRIMARY\) .* FOR UPDATE$/);
    expect(statements.sqlite.lockKeys(['b', 'a'])).toBeUndefined();
  });

  it('keeps from retention only the dead events that are their key’s front', () => {
    expect(statements.postgres.keptHeads('dead')).toBe(
      'EXISTS (SELECT 1 FROM "app"."ev_keys" AS k WHERE k."key" = r."key" AND k."front_id" = r."id")',
    );
    for (const sql of Object.values(statements)) expect(sql.keptHeads('delivered')).toBeUndefined();
  });

  it('deletes idle keys in one statement, or, where a DELETE cannot select from its own table, locks them to delete by key', () => {
    expect(statements.postgres.purgeIdleKeys(100).sql).toMatch(
      /^DELETE FROM "app"."ev_keys" WHERE "front_id" IS NULL AND "key" IN \(SELECT .* FOR UPDATE SKIP LOCKED\)$/,
    );
    expect(statements.sqlite.purgeIdleKeys(100).sql).not.toContain('FOR UPDATE');
    expect(statements.mysql.purgeIdleKeys(100).sql).toMatch(
      /^SELECT `key` FROM `ev_keys` WHERE `front_id` IS NULL LIMIT \? FOR UPDATE SKIP LOCKED$/,
    );
    expect(statements.mysql.deleteKeys(['a']).sql).toContain('`front_id` IS NULL');
  });
});
