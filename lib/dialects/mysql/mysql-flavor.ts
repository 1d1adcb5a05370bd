import type { SqlFlavor } from '../shared/outbox-dialect.interface';
import { ATTEMPT_LOG_SIZE } from '../shared/attempt-log';
import { indexNames } from '../shared/dialect.util';
import { COLUMNS, NOW, q, qt, utcDatetime, utcText } from './mysql-sql';

export const mysqlFlavor: SqlFlavor = {
  ident: q,
  table: qt,
  placeholder: () => '?',
  now: NOW,
  time: (bind, date) => bind(utcDatetime(date)),
  ago: (bind, ms) => `DATE_SUB(${NOW}, INTERVAL ${bind(ms * 1000)} MICROSECOND)`,
  msSince: (expression) => `FLOOR(TIMESTAMPDIFF(MICROSECOND, ${expression}, ${NOW}) / 1000)`,
  timeText: utcText,
  columns: COLUMNS,
  forUpdate: ' FOR UPDATE',
  // InnoDB's sampled estimate (within a few percent once the table is big): no scan.
  rowEstimate: (table) => ({
    sql: 'SELECT TABLE_ROWS AS `n` FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?',
    params: [table.name],
  }),
  /**
   * Left to itself the optimizer may read rows written by id through the claim index (its leading
   * `status` matches the fence), and under REPEATABLE READ — the session default these single statements
   * run in — that range scan takes next-key locks on pending rows it does not change, including
   * producers' uncommitted inserts: a deadlock with the application's own transaction (seen in the fault
   * suite's starved-pool scenario). By primary key it locks exactly the rows it changes.
   */
  byId: (table, alias) => `${qt(table)}${alias ? ` AS ${alias}` : ''} FORCE INDEX (PRIMARY)`,
  idIn: (bind, ids) => `\`id\` IN (${ids.map((id) => bind(id)).join(', ')})`,
  later: (bind, ms) => `DATE_ADD(${NOW}, INTERVAL ${bind(ms * 1000)} MICROSECOND)`,
  flag: (bind, value) => bind(value ? 1 : 0),
  integer: (place) => place,
  concat: (...parts) => `CONCAT(${parts.join(', ')})`,
  left: (expression, n) => `LEFT(${expression}, ${n})`,
  json: (place) => place,
  /** The attempt log's JSON in MySQL and MariaDB, kept in a LONGTEXT column like the payload. */
  attemptLog: {
    object: (e) =>
      `JSON_OBJECT('attempt', ${e.attempt}, 'startedAt', ${e.startedAt}, 'finishedAt', ${e.finishedAt}, ` +
      `'outcome', ${e.outcome}, 'error', ${e.error ?? 'NULL'}, 'round', ${e.round})`,
    append: (log, entry) =>
      `JSON_ARRAY_APPEND(IF(JSON_LENGTH(COALESCE(${log}, '[]')) >= ${ATTEMPT_LOG_SIZE}, JSON_REMOVE(${log}, '$[0]'), ` +
      `COALESCE(${log}, '[]')), '$', ${entry})`,
  },
  // A TEXT column takes no literal default, and version 1's created_at was released without one.
  insertDefaults: [
    ['completed_handlers', "'[]'"],
    ['created_at', NOW],
  ],
  onDedupeConflict: ' ON DUPLICATE KEY UPDATE `id` = `id`',
  // VALUES() rather than MySQL 8's row alias, which MariaDB does not know; front_id first, as assigned in order.
  keyOrder: {
    lockThenDelete: true,
    // MariaDB's planner, its statistics refreshed mid-drain, read a key's next event by scanning every
    // event: a front's move went from 0.2 ms to seconds (bench, 1,000 keys).
    byKey: (table, alias) => `${qt(table)} AS ${alias} FORCE INDEX (${q(indexNames(table.name).order)})`,
    upsert:
      ' ON DUPLICATE KEY UPDATE `front_id` = COALESCE(`front_id`, VALUES(`front_id`)), ' +
      '`last_seq` = `last_seq` + VALUES(`last_seq`)',
    // The key's new last number and whether it had no front, as the statement's insert id (a new row sets
    // none): no read-back after it, a fifth of an ordered publish's time (bench/raw, MariaDB). `last_seq`
    // is assigned first, so it reads the old front in either of MariaDB's orders of assignment.
    reportOne:
      ' ON DUPLICATE KEY UPDATE `last_seq` = LAST_INSERT_ID((`last_seq` + VALUES(`last_seq`)) * 2 + (`front_id` IS NULL)) DIV 2, ' +
      '`front_id` = COALESCE(`front_id`, VALUES(`front_id`))',
  },
};
