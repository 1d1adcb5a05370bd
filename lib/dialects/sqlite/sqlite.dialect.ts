import type { DataSource } from 'typeorm';
import type {
  FailureUpdate,
  OutboxDialect,
  RetentionBatch,
  SqlExecutor,
  Statement,
} from '../shared/outbox-dialect.interface';
import { SqliteFileWakeUp, sqliteFile } from './sqlite-file-wake-up';
import { sqliteGateFor } from './sqlite-connection-gate';
import { NOW, sqliteFlavor } from './sqlite-flavor';
import { sqliteSchema } from './sqlite-schema';
import { driverErrorCode, requireVersion } from '../shared/dialect.util';
import {
  CLAIMED_COLUMNS,
  decodeRow,
  finishedStatus,
  INSERT_COLUMNS,
  insertParams,
  onDedupeConflict,
  LEASE_EXPIRED,
  NO_OUTCOME,
  quoteIdent,
  quoteTable,
} from '../shared/dialect.util';
import type { ValidatedEvent } from '../../interfaces/validated-event.interface';
import type { OutboxTable } from '../shared/outbox-table';
import { appendAttempt, ATTEMPT_LOG_SIZE, LOGGED_ERROR_LENGTH, type AttemptLogSql } from '../shared/attempt-log';

const NOW_PLUS = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)`;
/**
 * The claim still holds the event: pending, with its token. Only another claim replaces the token, so
 * a lease that ran out while nobody claimed the event (the worker waited for a connection, or stalled)
 * does not void the outcome: the attempt ran once, and recording it is what keeps it from running again.
 */
const HELD = `"status" = 'pending' AND "claim_token" = ?`;

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
  readonly transactionIsolation = undefined;
  /** TypeORM's SQLite driver has one connection: the worker and the application take turns on it. */
  readonly connectionGate = sqliteGateFor;

  async verifyServer(executor: SqlExecutor): Promise<void> {
    const { rows } = await executor.run({ sql: 'SELECT sqlite_version() AS "version"', params: [] });
    requireVersion('SQLite', (rows[0]?.version as string | undefined) ?? '', '3.35.0');
  }

  // The table's versions and the start-up checks: sqlite-schema.ts.
  readonly tableExists = sqliteSchema.tableExists;
  readonly relocate = sqliteSchema.relocate;
  readonly createSchema = sqliteSchema.createSchema;
  readonly dropSchema = sqliteSchema.dropSchema;
  readonly upgrade = sqliteSchema.upgrade;
  readonly downgrade = sqliteSchema.downgrade;
  readonly columns = sqliteSchema.columns;
  readonly indexes = sqliteSchema.indexes;

  /** Processes sharing the file hear of each other's commits through the file system (see SqliteFileWakeUp). */
  wakeUpChannel(dataSource: DataSource) {
    const file = sqliteFile(dataSource.options.database);
    return file === undefined ? undefined : new SqliteFileWakeUp(file);
  }

  isTransient(error: unknown): boolean {
    return String(driverErrorCode(error)).startsWith('SQLITE_BUSY');
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
        RETURNING ${[...CLAIMED_COLUMNS, 'created_at'].map(quoteIdent).join(', ')}`,
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
        `WHERE "id" IN (${ids.map(() => '?').join(', ')}) AND ${HELD}`,
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
        `"last_error" = ?, "completed_handlers" = ?, "attempt_log" = ${failedAttempt} WHERE "id" = ? AND ${HELD}`,
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
        `"attempts" = "attempts" - ? WHERE "id" IN (${ids.map(() => '?').join(', ')}) AND ${HELD}`,
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
    const { affected } = await executor.run({
      sql: `DELETE FROM ${quoteTable(table)} WHERE rowid IN (${sql})`,
      params,
    });
    return affected;
  }

  async renew(executor: SqlExecutor, table: OutboxTable, a: { ids: string[]; token: string; leaseMs: number }) {
    // Starts with WITH, not UPDATE, for its RETURNING rows (see claim).
    const { rows, affected } = await executor.run({
      sql: `WITH clock AS (SELECT ${NOW_PLUS} AS "lease_end")
        UPDATE ${quoteTable(table)} SET "available_at" = (SELECT "lease_end" FROM clock)
        WHERE "id" IN (${a.ids.map(() => '?').join(', ')}) AND ${HELD}
        RETURNING "id"`,
      params: [sqliteOffset(a.leaseMs), ...a.ids, a.token],
    });
    // Rows renewed but not returned would be taken for lost leases, and their handlers aborted.
    if (affected > rows.length) {
      throw new Error(`the lease renewal updated ${affected} rows but the driver returned ${rows.length}`);
    }
    return rows.map((row) => String(row.id));
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
