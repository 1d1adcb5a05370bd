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
};
