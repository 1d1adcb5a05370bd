import type { SqlFlavor } from '../shared/outbox-dialect.interface';
import { quoteIdent, quoteTable } from '../shared/dialect.util';

export const postgresFlavor: SqlFlavor = {
  ident: quoteIdent,
  table: quoteTable,
  placeholder: (n) => `$${n}`,
  now: 'now()',
  time: (bind, date) => `${bind(date.toISOString())}::timestamptz`,
  ago: (bind, ms) => `now() - ${bind(ms)}::bigint * interval '1 millisecond'`,
  msSince: (expression) => `floor(extract(epoch FROM now() - ${expression}) * 1000)`,
  timeText: (expression) => expression,
  columns: '*',
  forUpdate: ' FOR UPDATE',
};
