import type { SqlFlavor } from '../shared/outbox-dialect.interface';
import { quoteIdent, quoteTable } from '../shared/dialect.util';

/** The one stored time layout (see sqlite.dialect.ts), so that comparing text compares instants. */
const NOW = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`;

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
};
