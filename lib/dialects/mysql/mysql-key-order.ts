import type { KeyOrderSql } from '../shared/key-order-sql';
import { indexNames } from '../shared/dialect.util';
import { NOW, q, qt } from './mysql-sql';

/**
 * Per-key order's statements on MySQL and MariaDB. No write returns rows here: where another database
 * returns what a write did, the statement reports it as its insert id (`LAST_INSERT_ID(expr)`: the
 * value of `expr` for the OK packet, 0 when the statement never evaluated it), read back beside it.
 */
export const mysqlKeyOrder: KeyOrderSql = {
  lockThenDelete: true,
  // MariaDB's planner, its statistics refreshed mid-drain, read a key's next event by scanning every
  // event: a front's move went from 0.2 ms to seconds (bench, 1,000 keys).
  byKey: (table, alias) => `${qt(table)} AS ${alias} FORCE INDEX (${q(indexNames(table.name).order)})`,
  // VALUES() rather than MySQL 8's row alias, which MariaDB does not know; front_id first, as assigned in order.
  upsert:
    ' ON DUPLICATE KEY UPDATE `front_id` = COALESCE(`front_id`, VALUES(`front_id`)), ' +
    '`last_seq` = `last_seq` + VALUES(`last_seq`)',
  // The key's new last number and whether it had no front, as the statement's insert id (a new row sets
  // none): no read-back after it, a fifth of an ordered publish's time (bench/raw, MariaDB). `last_seq`
  // is assigned first, so it reads the old front in either of MariaDB's orders of assignment.
  reserveOne: {
    upsert:
      ' ON DUPLICATE KEY UPDATE `last_seq` = LAST_INSERT_ID((`last_seq` + VALUES(`last_seq`)) * 2 + (`front_id` IS NULL)) DIV 2, ' +
      '`front_id` = COALESCE(`front_id`, VALUES(`front_id`))',
    read: ({ key, count, firstId }, insertId) =>
      insertId === 0
        ? { key, last_seq: count, front_id: firstId }
        : { key, last_seq: Math.floor(insertId / 2), front_id: insertId % 2 === 1 ? firstId : null },
  },
  // A promoted event that is due reports its number (never 0: a key numbers from 1); one held by a run's
  // lease, delayed or backing off reports nothing.
  promotedDue: {
    set: `, \`seq\` = IF(\`available_at\` <= ${NOW}, LAST_INSERT_ID(\`seq\`), \`seq\`)`,
    read: (insertId) => insertId > 0,
  },
};
