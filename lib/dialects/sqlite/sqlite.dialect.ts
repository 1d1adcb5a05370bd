import type { DataSource } from 'typeorm';
import { sqliteAudit } from './sqlite-audit';
import { sqliteInbox } from './sqlite-inbox';
import type {
  OutboxDialect,
  ClaimArgs,
  RenewalArgs,
  RetentionBatch,
  SqlExecutor,
  Statement,
} from '../shared/outbox-dialect.interface';
import { SqliteFileWakeUp, sqliteFile } from './sqlite-file-wake-up';
import { sqliteGateFor } from './sqlite-connection-gate';
import { NOW, sqliteFlavor } from './sqlite-flavor';
import { sqliteSchema } from './sqlite-schema';
import {
  CLAIMED_COLUMNS,
  decodeRow,
  driverErrorCode,
  finishedStatus,
  quoteIdent,
  quoteTable,
} from '../shared/dialect.util';
import { kept, requireVersion } from '../shared/dialect.util';
import type { OutboxTable } from '../shared/outbox-table';
import { claimAssignments } from '../shared/claim-rules';
import { renewStatement } from '../shared/outcome-statements';
import { StatementBuilder } from '../shared/statement-builder';

/** The claim's selection of up to `limit` due rows by the clock `now`, in due order. */
const picking = (table: OutboxTable, limit: string, now: string) =>
  `SELECT "id" FROM ${quoteTable(table)} WHERE "status" = 'pending' AND "available_at" <= ${now} ` +
  `ORDER BY "available_at", "id" LIMIT ${limit}`;

/**
 * A statement whose RETURNING rows reach the caller: it must not start with "UPDATE ", which TypeORM's
 * sqlite3 runner executes through run(), dropping them.
 */
const returningRows = (update: string) => `WITH unused AS (SELECT 1) ${update} RETURNING "id"`;

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

  /** The table's versions and the start-up checks: sqlite-schema.ts. */
  readonly schema = sqliteSchema;

  /** The inbox table of a receiving service: sqlite-inbox.ts. */
  readonly inbox = sqliteInbox;
  /** The admin page's audit trail: sqlite-audit.ts. */
  readonly audit = sqliteAudit;

  /** Processes sharing the file hear of each other's commits through the file system (see SqliteFileWakeUp). */
  wakeUpChannel(dataSource: DataSource) {
    const file = sqliteFile(dataSource.options.database);
    return file === undefined ? undefined : new SqliteFileWakeUp(file);
  }

  isTransient(error: unknown): boolean {
    return String(driverErrorCode(error)).startsWith('SQLITE_BUSY');
  }

  selectByDedupeKeys(table: OutboxTable, keys: string[]) {
    return {
      sql: `SELECT * FROM ${quoteTable(table)} WHERE "dedupe_key" IN (${keys.map(() => '?').join(', ')})`,
      params: keys,
    };
  }

  claimSelection(table: OutboxTable, batchSize: number): Statement {
    const b = new StatementBuilder(this.flavor.placeholder);
    return b.statement(picking(table, b.bind(batchSize), NOW));
  }

  async claim(executor: SqlExecutor, table: OutboxTable, a: ClaimArgs) {
    const b = new StatementBuilder(this.flavor.placeholder);
    const p = b.named({ batchSize: a.batchSize, token: a.token, maxAttempts: a.maxAttempts });
    const held = a.heldTokens?.map((token) => b.bind(token)).join(', ');
    const notHeld = held ? ` AND ("claim_token" IS NULL OR "claim_token" NOT IN (${held}))` : '';
    // The clock is read once per statement (a CTE), not once per row.
    const now = '(SELECT "now" FROM clock)';
    const set = claimAssignments(this.flavor, {
      now,
      leaseEnd: '(SELECT "lease_end" FROM clock)',
      token: p.token,
      maxAttempts: p.maxAttempts,
    });
    // One statement, so SQLite takes the write lock before it reads (like BEGIN IMMEDIATE). It starts
    // with WITH rather than UPDATE on purpose: TypeORM's sqlite3 runner executes statements that start
    // with "UPDATE " through run(), which drops the RETURNING rows.
    const { rows, affected } = await executor.run(
      b.statement(`WITH clock AS (SELECT ${NOW} AS "now", ${this.flavor.later(b.bind, a.leaseMs)} AS "lease_end"),
  picked AS (${picking(table, p.batchSize, now)})
  UPDATE ${quoteTable(table)} SET
    ${set}
  WHERE "id" IN (SELECT "id" FROM picked) AND "status" = 'pending' AND "available_at" <= ${now}${notHeld}
  RETURNING ${CLAIMED_COLUMNS.map(quoteIdent).join(', ')}`),
    );
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

  purgeSelection(table: OutboxTable, a: RetentionBatch): Statement {
    const b = new StatementBuilder(this.flavor.placeholder);
    return b.statement(
      `SELECT r.rowid FROM ${quoteTable(table)} AS r WHERE r."status" = '${finishedStatus(a.status)}' ` +
        `AND r."processed_at" < ${this.flavor.ago(b.bind, a.olderThanMs)}${kept(a)} ` +
        `ORDER BY r."processed_at" LIMIT ${b.bind(a.batchSize)}`,
    );
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

  async renew(executor: SqlExecutor, table: OutboxTable, a: RenewalArgs) {
    const { rows, affected } = await executor.run(renewStatement(this.flavor, table, a, returningRows));
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
