import type { SqlFlavor } from '../shared/outbox-dialect.interface';
import { quoteIdent, quoteTable } from '../shared/dialect.util';
import { ATTEMPT_LOG_SIZE } from '../shared/attempt-log';

// now() is the transaction's start: a statement after a lock wait would read the time before it.
const NOW = 'statement_timestamp()';

export const postgresFlavor: SqlFlavor = {
  ident: quoteIdent,
  table: quoteTable,
  placeholder: (n) => `$${n}`,
  now: NOW,
  time: (bind, date) => `${bind(date.toISOString())}::timestamptz`,
  ago: (bind, ms) => `${NOW} - ${bind(ms)}::bigint * interval '1 millisecond'`,
  msSince: (expression) => `floor(extract(epoch FROM ${NOW} - ${expression}) * 1000)`,
  timeText: (expression) => expression,
  columns: '*',
  forUpdate: ' FOR UPDATE',
  // The statistics collector's live-row count: kept current by every insert and delete, read without a scan.
  rowEstimate: (table) => ({
    sql: 'SELECT n_live_tup AS "n" FROM pg_stat_user_tables WHERE relid = to_regclass($1)',
    params: [quoteTable(table)],
  }),
  byId: (table, alias) => `${quoteTable(table)}${alias ? ` AS ${alias}` : ''}`,
  idIn: (bind, ids) => `"id" = ANY(${bind(ids)}::uuid[])`,
  later: (bind, ms) => `${NOW} + ${bind(ms)}::bigint * interval '1 millisecond'`,
  flag: (bind, value) => `${bind(value)}::boolean`,
  integer: (place) => `${place}::int`,
  concat: (...parts) => parts.join(' || '),
  left: (expression, n) => `left(${expression}, ${n})`,
  json: (place) => `${place}::jsonb`,
  jsonAppend: (column, place) => `${column} || jsonb_build_array(${place}::text)`,
  attemptLog: {
    object: (e) =>
      `jsonb_build_object('attempt', ${e.attempt}, 'startedAt', ${e.startedAt}, 'finishedAt', ${e.finishedAt}, ` +
      `'outcome', ${e.outcome}, 'error', ${e.error ?? 'NULL::text'}, 'round', ${e.round})`,
    append: (log, entry) =>
      `(CASE WHEN jsonb_array_length(COALESCE(${log}, '[]'::jsonb)) >= ${ATTEMPT_LOG_SIZE} THEN ${log} - 0 ` +
      `ELSE COALESCE(${log}, '[]'::jsonb) END) || jsonb_build_array(${entry})`,
  },
  insertDefaults: [],
  onDedupeConflict: ' ON CONFLICT ("dedupe_key") WHERE "dedupe_key" IS NOT NULL DO NOTHING',
  keyOrder: {
    into: (table) => `${table} AS k`,
    byteOrder: '"key" COLLATE "C"',
    upsert:
      ' ON CONFLICT ("key") DO UPDATE SET "last_seq" = k."last_seq" + EXCLUDED."last_seq", ' +
      '"front_id" = COALESCE(k."front_id", EXCLUDED."front_id")',
    returning: (write, columns) => `${write} RETURNING ${columns}`,
    writesInWith: true,
  },
};
