import type { SqlFlavor } from '../shared/outbox-dialect.interface';
import { quoteIdent, quoteTable } from '../shared/dialect.util';

/** The one timestamp layout stored in SQLite: `YYYY-MM-DDTHH:MM:SS.mmmZ`, the same as `Date#toISOString()`. */
export const NOW = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`;

export const sqliteFlavor: SqlFlavor = {
  ident: quoteIdent,
  table: quoteTable,
  placeholder: () => '?',
  now: NOW,
  time: (bind, date) => bind(date.toISOString()),
  ago: (bind, ms) => `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ${bind(`-${(ms / 1000).toFixed(3)} seconds`)})`,
  msSince: (expression) => `CAST(round((julianday('now') - julianday(${expression})) * 86400000) AS INTEGER)`,
  timeText: (expression) => expression,
  columns: '*',
  // One writer at a time: a transaction's rows cannot change under it.
  forUpdate: '',
  // SQLite keeps no row estimate; counting reads its smallest index (about 35 ms per million rows).
  rowEstimate: (table) => ({ sql: `SELECT COUNT(*) AS "n" FROM ${quoteTable(table)}`, params: [] }),
  inTableOrder: ' NOT INDEXED',
};
