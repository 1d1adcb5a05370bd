import type { SqlFlavor } from '../shared/outbox-dialect.interface';
import { ATTEMPT_LOG_SIZE } from '../shared/attempt-log';
import { COLUMNS, NOW, q, qt, utcDatetime, utcText } from './mysql-sql';
import { mysqlKeyOrder } from './mysql-key-order';

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
  jsonAppend: (column, place) => `JSON_ARRAY_APPEND(${column}, '$', ${place})`,
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
  keyOrder: mysqlKeyOrder,
};
