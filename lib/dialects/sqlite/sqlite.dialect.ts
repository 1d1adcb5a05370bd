import type { FailureUpdate, OutboxDialect, RetentionBatch, SqlExecutor, Statement } from '../shared/outbox-dialect.interface';
import { sqliteFlavor } from './sqlite-flavor';
import { driverErrorCode, requireVersion } from '../shared/dialect.util';
import { decodeRow, finishedStatus, INSERT_COLUMNS, partialRetentionIndex, insertParams, onDedupeConflict, LEASE_EXPIRED, NO_OUTCOME, moveNoOutcomeNotes, partialIndexes, quoteIdent, quoteTable, requireSchemaVersion, restoreV1Notes, V1_CLAIM_NOTES } from '../shared/dialect.util';
import type { ValidatedEvent } from '../../interfaces/validated-event.interface';
import type { OutboxTable } from '../shared/outbox-table';
import { appendAttempt, ATTEMPT_LOG_SIZE, LOGGED_ERROR_LENGTH, type AttemptLogSql } from '../shared/attempt-log';

/** The one timestamp layout stored in SQLite: `YYYY-MM-DDTHH:MM:SS.mmmZ`, the same as `Date#toISOString()`. */
const NOW = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`;
const NOW_PLUS = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)`;
const LIVE_LEASE = `"status" = 'pending' AND "claim_token" = ? AND "available_at" > ${NOW}`;

const json: AttemptLogSql = {
  object: (e) =>
    `json_object('attempt', ${e.attempt}, 'startedAt', ${e.startedAt}, 'finishedAt', ${e.finishedAt}, ` +
    `'outcome', ${e.outcome}, 'error', ${e.error}, 'round', ${e.round})`,
  append: (log, entry) =>
    `json_insert(CASE WHEN json_array_length(COALESCE(${log}, '[]')) >= ${ATTEMPT_LOG_SIZE} THEN json_remove(${log}, '$[0]') ` +
    `ELSE COALESCE(${log}, '[]') END, '$[#]', ${entry})`,
};

/** An SQLite date modifier for `ms` milliseconds, e.g. `+1.500 seconds`. */
export function sqliteOffset(ms: number): string {
  return `${ms < 0 ? '-' : '+'}${(Math.abs(ms) / 1000).toFixed(3)} seconds`;
}

/**
 * SQLite (3.35+, for RETURNING): timestamps are TEXT in exactly one layout, so comparing strings
 * compares instants; JSON is TEXT. Writes are serialised by SQLite itself; within the process the
 * worker's statements pass through the connection gate (see sqlite-connection-gate.ts).
 */
export class SqliteDialect implements OutboxDialect {
  readonly name = 'sqlite';
  readonly flavor = sqliteFlavor;
  readonly maxParameters = 32_766;

  async verifyServer(executor: SqlExecutor): Promise<void> {
    const { rows } = await executor.run({ sql: 'SELECT sqlite_version() AS "version"', params: [] });
    requireVersion('SQLite', String(rows[0]?.version ?? ''), '3.35.0');
  }

  tableExists(table: OutboxTable): Statement {
    return { sql: `SELECT count(*) AS "found" FROM sqlite_master WHERE "type" = 'table' AND "name" = ?`, params: [table.name] };
  }

  relocate(from: OutboxTable, to: OutboxTable): string[] {
    return [`ALTER TABLE ${quoteTable(from)} RENAME TO ${quoteIdent(to.name)}`];
  }

  isTransient(error: unknown): boolean {
    return String(driverErrorCode(error)).startsWith('SQLITE_BUSY');
  }

  createSchema(table: OutboxTable): string[] {
    const t = quoteTable(table);
    return [
      `CREATE TABLE ${t} (
        "id" varchar(36) NOT NULL PRIMARY KEY,
        "topic" varchar(128) NOT NULL,
        "key" varchar(255),
        "dedupe_key" varchar(255),
        "payload" text NOT NULL,
        "headers" text NOT NULL DEFAULT '{}',
        "status" varchar(16) NOT NULL DEFAULT 'pending' CHECK ("status" IN ('pending', 'delivered', 'dead')),
        "attempts" integer NOT NULL DEFAULT 0,
        "available_at" varchar(24) NOT NULL DEFAULT (${NOW}),
        "claim_token" varchar(36),
        "completed_handlers" text NOT NULL DEFAULT '[]',
        "last_error" text,
        "created_at" varchar(24) NOT NULL DEFAULT (${NOW}),
        "processed_at" varchar(24)
      )`,
      ...partialIndexes(t, table),
    ];
  }

  dropSchema(table: OutboxTable): string[] {
    return [`DROP TABLE ${quoteTable(table)}`];
  }

  upgrade(version: number, table: OutboxTable): string[] {
    if (version === 3) return partialRetentionIndex(table).up;
    const t = quoteTable(table);
    if (version === 4) {
      return [
        `ALTER TABLE ${t} ADD COLUMN "claimed_at" varchar(24)`,
        `ALTER TABLE ${t} ADD COLUMN "attempt_log" text`,
        `ALTER TABLE ${t} ADD COLUMN "redrive_count" integer NOT NULL DEFAULT 0`,
      ];
    }
    requireSchemaVersion(version);
    const [expired] = V1_CLAIM_NOTES;
    return [
      `ALTER TABLE ${t} ADD COLUMN "expired_attempts" integer NOT NULL DEFAULT 0`,
      `ALTER TABLE ${t} ADD COLUMN "last_expired_attempt" integer`,
      `ALTER TABLE ${t} ADD COLUMN "note" text`,
      // The claim's remarks move out of last_error, and an expiry noted there becomes data.
      `UPDATE ${t} SET "note" = "last_error", "last_error" = NULL, "expired_attempts" = 1, ` +
        `"last_expired_attempt" = CAST(substr("last_error", 9, instr(substr("last_error", 9), ' ') - 1) AS INTEGER) ` +
        `WHERE "last_error" LIKE '${expired}'`,
      moveNoOutcomeNotes(t, quoteIdent),
    ];
  }

  downgrade(version: number, table: OutboxTable): string[] {
    if (version === 3) return partialRetentionIndex(table).down;
    const t = quoteTable(table);
    if (version === 4) {
      return ['redrive_count', 'attempt_log', 'claimed_at'].map((c) => `ALTER TABLE ${t} DROP COLUMN ${quoteIdent(c)}`);
    }
    requireSchemaVersion(version);
    return [
      restoreV1Notes(t, quoteIdent),
      `ALTER TABLE ${t} DROP COLUMN "note"`,
      `ALTER TABLE ${t} DROP COLUMN "last_expired_attempt"`,
      `ALTER TABLE ${t} DROP COLUMN "expired_attempts"`,
    ];
  }

  columns(table: OutboxTable): Statement {
    return { sql: 'SELECT "name" FROM pragma_table_info(?)', params: [table.name] };
  }

  indexes(table: OutboxTable): Statement {
    return { sql: 'SELECT "name" FROM pragma_index_list(?)', params: [table.name] };
  }

  insert(table: OutboxTable, rows: Array<{ id: string; event: ValidatedEvent }>) {
    const params: unknown[] = [];
    const values = rows.map(({ id, event }) => {
      params.push(...insertParams(id, event, (d) => d.toISOString(), sqliteOffset));
      return `(?, ?, ?, ?, ?, ?, COALESCE(?, ${NOW_PLUS}))`;
    });
    return {
      sql:
        `INSERT INTO ${quoteTable(table)} (${INSERT_COLUMNS.map(quoteIdent).join(', ')}) ` +
        `VALUES ${values.join(', ')}${onDedupeConflict(rows, ' ON CONFLICT ("dedupe_key") WHERE "dedupe_key" IS NOT NULL DO NOTHING')}`,
      params,
    };
  }

  selectByDedupeKeys(table: OutboxTable, keys: string[]) {
    return {
      sql: `SELECT * FROM ${quoteTable(table)} WHERE "dedupe_key" IN (${keys.map(() => '?').join(', ')})`,
      params: keys,
    };
  }

  claimSelection(table: OutboxTable, batchSize: number, now: string = NOW): Statement {
    return {
      sql:
        `SELECT "id" FROM ${quoteTable(table)} WHERE "status" = 'pending' AND "available_at" <= ${now} ` +
        `ORDER BY "available_at", "id" LIMIT ?`,
      params: [batchSize],
    };
  }

  async claim(
    executor: SqlExecutor,
    table: OutboxTable,
    a: { batchSize: number; token: string; leaseMs: number; maxAttempts: number },
  ) {
    const t = quoteTable(table);
    const spent = `"attempts" >= ?`;
    // One statement, so SQLite takes the write lock before it reads (like BEGIN IMMEDIATE). It starts
    // with WITH rather than UPDATE on purpose: TypeORM's sqlite3 runner executes statements that start
    // with "UPDATE " through run(), which drops the RETURNING rows.
    // The clock is read once per statement (a CTE), not once per row.
    const now = '(SELECT "now" FROM clock)';
    // The attempt whose lease expired enters the history, ended when its lease did.
    const expiredAttempt = appendAttempt(json, '"attempt_log"', {
      attempt: '"attempts"',
      startedAt: '"claimed_at"',
      finishedAt: '"available_at"',
      outcome: "'expired'",
      error: 'NULL',
      round: '"redrive_count"',
    });
    const { rows, affected } = await executor.run({
      sql: `WITH clock AS (SELECT ${NOW} AS "now", ${NOW_PLUS} AS "lease_end"),
        picked AS (${this.claimSelection(table, a.batchSize, now).sql})
        UPDATE ${t} SET
          "attempts" = CASE WHEN ${spent} THEN "attempts" ELSE "attempts" + 1 END,
          "claim_token" = CASE WHEN ${spent} THEN NULL ELSE ? END,
          "available_at" = CASE WHEN ${spent} THEN "available_at" ELSE (SELECT "lease_end" FROM clock) END,
          "status" = CASE WHEN ${spent} THEN 'dead' ELSE 'pending' END,
          "processed_at" = CASE WHEN ${spent} THEN ${now} ELSE NULL END,
          "claimed_at" = CASE WHEN ${spent} THEN "claimed_at" ELSE ${now} END,
          "attempt_log" = CASE WHEN "claim_token" IS NOT NULL THEN ${expiredAttempt} ELSE "attempt_log" END,
          "expired_attempts" = "expired_attempts" + CASE WHEN "claim_token" IS NOT NULL THEN 1 ELSE 0 END,
          "last_expired_attempt" = CASE WHEN "claim_token" IS NOT NULL THEN "attempts" ELSE "last_expired_attempt" END,
          "note" = CASE
            WHEN "claim_token" IS NOT NULL THEN 'attempt ' || "attempts" || ' of ' || CAST(? AS INTEGER) || ' ${LEASE_EXPIRED}'
            WHEN ${spent} AND "last_error" IS NULL THEN 'attempt ' || "attempts" || ' of ' || CAST(? AS INTEGER) || ' ${NO_OUTCOME}'
            ELSE "note" END
        WHERE "id" IN (SELECT "id" FROM picked) AND "status" = 'pending' AND "available_at" <= ${now}
        RETURNING *`,
      params: [
        sqliteOffset(a.leaseMs),
        a.batchSize,
        a.maxAttempts,
        a.maxAttempts,
        a.token,
        a.maxAttempts,
        a.maxAttempts,
        a.maxAttempts,
        a.maxAttempts,
        a.maxAttempts,
        a.maxAttempts,
        a.maxAttempts,
      ],
    });
    if (affected > rows.length) {
      // The driver ran the claim without returning its rows: those events would sit leased until
      // expiry with an attempt spent. Fail loudly instead.
      throw new Error(
        `The outbox claim updated ${affected} rows but the driver returned ${rows.length}; ` +
          'this SQLite driver drops UPDATE … RETURNING rows and is not supported',
      );
    }
    return rows;
  }

  acknowledge(table: OutboxTable, ids: string[], token: string) {
    return {
      sql:
        `UPDATE ${quoteTable(table)} SET "status" = 'delivered', "claim_token" = NULL, "processed_at" = ${NOW} ` +
        `WHERE "id" IN (${ids.map(() => '?').join(', ')}) AND ${LIVE_LEASE}`,
      params: [...ids, token],
    };
  }

  fail(table: OutboxTable, id: string, token: string, u: FailureUpdate) {
    const dead = u.deadLetter ? 1 : 0;
    const failedAttempt = appendAttempt(json, '"attempt_log"', {
      attempt: '"attempts"',
      startedAt: '"claimed_at"',
      finishedAt: NOW,
      outcome: `CASE WHEN ? THEN 'dead' ELSE 'failed' END`,
      error: `substr(?, 1, ${LOGGED_ERROR_LENGTH})`,
      round: '"redrive_count"',
    });
    return {
      sql:
        `UPDATE ${quoteTable(table)} SET ` +
        `"status" = CASE WHEN ? THEN 'dead' ELSE 'pending' END, "claim_token" = NULL, ` +
        `"available_at" = CASE WHEN ? THEN "available_at" ELSE ${NOW_PLUS} END, ` +
        `"processed_at" = CASE WHEN ? THEN ${NOW} ELSE NULL END, ` +
        `"last_error" = ?, "completed_handlers" = ?, "attempt_log" = ${failedAttempt} WHERE "id" = ? AND ${LIVE_LEASE}`,
      params: [
        dead,
        dead,
        sqliteOffset(u.retryDelayMs),
        dead,
        u.error,
        JSON.stringify(u.completedHandlers),
        dead,
        u.error,
        id,
        token,
      ],
    };
  }

  release(table: OutboxTable, ids: string[], token: string, uncount: boolean) {
    return {
      sql:
        `UPDATE ${quoteTable(table)} SET "claim_token" = NULL, "available_at" = ${NOW}, ` +
        // An attempt given back counted (its handler ran, shutdown stopped waiting) enters the history.
        `"attempt_log" = CASE WHEN ? = 0 THEN ${appendAttempt(json, '"attempt_log"', {
          attempt: '"attempts"',
          startedAt: '"claimed_at"',
          finishedAt: NOW,
          outcome: "'released'",
          error: 'NULL',
          round: '"redrive_count"',
        })} ELSE "attempt_log" END, ` +
        `"attempts" = "attempts" - ? WHERE "id" IN (${ids.map(() => '?').join(', ')}) AND ${LIVE_LEASE}`,
      params: [uncount ? 1 : 0, uncount ? 1 : 0, ...ids, token],
    };
  }

  purgeSelection(table: OutboxTable, a: RetentionBatch): Statement {
    return {
      sql:
        `SELECT rowid FROM ${quoteTable(table)} WHERE "status" = '${finishedStatus(a.status)}' ` +
        `AND "processed_at" < ${NOW_PLUS} ORDER BY "processed_at" LIMIT ?`,
      params: [sqliteOffset(-a.olderThanMs), a.batchSize],
    };
  }

  async purge(executor: SqlExecutor, table: OutboxTable, a: RetentionBatch) {
    // One writer at a time: the statement deletes what it selects, and no other purge can interleave.
    const { sql, params } = this.purgeSelection(table, a);
    const { affected } = await executor.run({ sql: `DELETE FROM ${quoteTable(table)} WHERE rowid IN (${sql})`, params });
    return affected;
  }

  counts(table: OutboxTable): Statement {
    return {
      sql:
        `SELECT "status", CASE WHEN "available_at" <= ${NOW} THEN 'due' WHEN "claim_token" IS NOT NULL THEN 'in_flight' ` +
        `ELSE 'scheduled' END AS "state", COUNT(*) AS "n" FROM ${quoteTable(table)} GROUP BY "status", "state"`,
      params: [],
    };
  }

  decode = decodeRow;
}
