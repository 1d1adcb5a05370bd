import type { SqlFlavor } from '../shared/outbox-dialect.interface';
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
};
