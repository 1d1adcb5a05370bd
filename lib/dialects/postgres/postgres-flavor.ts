import type { SqlFlavor } from '../shared/outbox-dialect.interface';
import { quoteIdent, quoteTable } from '../shared/dialect.util';

export const postgresFlavor: SqlFlavor = {
  ident: quoteIdent,
  table: quoteTable,
  placeholder: (n) => `$${n}`,
  // now() is the transaction's start: a statement after a lock wait would read the time before it.
  now: 'statement_timestamp()',
  time: (bind, date) => `${bind(date.toISOString())}::timestamptz`,
  ago: (bind, ms) => `statement_timestamp() - ${bind(ms)}::bigint * interval '1 millisecond'`,
  msSince: (expression) => `floor(extract(epoch FROM statement_timestamp() - ${expression}) * 1000)`,
  timeText: (expression) => expression,
  columns: '*',
  forUpdate: ' FOR UPDATE',
  // The statistics collector's live-row count: kept current by every insert and delete, read without a scan.
  rowEstimate: (table) => ({
    sql: 'SELECT n_live_tup AS "n" FROM pg_stat_user_tables WHERE relid = to_regclass($1)',
    params: [quoteTable(table)],
  }),
};
