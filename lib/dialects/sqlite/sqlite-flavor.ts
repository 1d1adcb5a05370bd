import type { SqlFlavor } from '../shared/outbox-dialect.interface';
import { quoteIdent, quoteTable } from '../shared/dialect.util';
import { ATTEMPT_LOG_SIZE } from '../shared/attempt-log';

/** The one timestamp layout stored in SQLite: `YYYY-MM-DDTHH:MM:SS.mmmZ`, the same as `Date#toISOString()`. */
export const NOW = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`;

/** An SQLite date modifier for `ms` milliseconds, e.g. `+1.500 seconds`. */
export function sqliteOffset(ms: number): string {
  return `${ms < 0 ? '-' : '+'}${(Math.abs(ms) / 1000).toFixed(3)} seconds`;
}

/** The clock `ms` from now, in the stored layout (SQLite's 'now' is the same throughout one statement). */
const nowPlus = (place: string) => `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ${place})`;

export const sqliteFlavor: SqlFlavor = {
  ident: quoteIdent,
  table: quoteTable,
  placeholder: () => '?',
  now: NOW,
  time: (bind, date) => bind(date.toISOString()),
  ago: (bind, ms) => nowPlus(bind(sqliteOffset(-ms))),
  msSince: (expression) => `CAST(round((julianday('now') - julianday(${expression})) * 86400000) AS INTEGER)`,
  timeText: (expression) => expression,
  columns: '*',
  // One writer at a time: a transaction's rows cannot change under it.
  forUpdate: '',
  // SQLite keeps no row estimate; counting reads its smallest index (about 35 ms per million rows).
  rowEstimate: (table) => ({ sql: `SELECT COUNT(*) AS "n" FROM ${quoteTable(table)}`, params: [] }),
  inTableOrder: ' NOT INDEXED',
  byId: (table, alias) => `${quoteTable(table)}${alias ? ` AS ${alias}` : ''}`,
  idIn: (bind, ids) => `"id" IN (${ids.map((id) => bind(id)).join(', ')})`,
  later: (bind, ms) => nowPlus(bind(sqliteOffset(ms))),
  flag: (bind, value) => bind(value ? 1 : 0),
  integer: (place) => `CAST(${place} AS INTEGER)`,
  concat: (...parts) => parts.join(' || '),
  left: (expression, n) => `substr(${expression}, 1, ${n})`,
  json: (place) => place,
  jsonAppend: (column, place) => `json_insert(${column}, '$[#]', ${place})`,
  attemptLog: {
    object: (e) =>
      `json_object('attempt', ${e.attempt}, 'startedAt', ${e.startedAt}, 'finishedAt', ${e.finishedAt}, ` +
      `'outcome', ${e.outcome}, 'error', ${e.error ?? 'NULL'}, 'round', ${e.round})`,
    append: (log, entry) =>
      `json_insert(CASE WHEN json_array_length(COALESCE(${log}, '[]')) >= ${ATTEMPT_LOG_SIZE} THEN json_remove(${log}, '$[0]') ` +
      `ELSE COALESCE(${log}, '[]') END, '$[#]', ${entry})`,
  },
  insertDefaults: [],
  onDedupeConflict: ' ON CONFLICT ("dedupe_key") WHERE "dedupe_key" IS NOT NULL DO NOTHING',
  keyOrder: {
    upsert:
      ' ON CONFLICT ("key") DO UPDATE SET "last_seq" = "last_seq" + excluded."last_seq", ' +
      '"front_id" = COALESCE("front_id", excluded."front_id")',
    // Not "INSERT …" or "UPDATE …" first: TypeORM's sqlite3 runner runs a statement that starts so through
    // run(), which drops the RETURNING rows.
    returning: (write, columns) => `WITH unused AS (SELECT 1) ${write} RETURNING ${columns}`,
  },
};
