import type { DataSource } from 'typeorm';
import { postgresFlavor } from './postgres-flavor';
import { postgresSchema } from './postgres-schema';
import { PostgresWakeUp } from './postgres-wake-up';
import { guardPoolClients } from './postgres-pool-guard';
import type {
  FailureUpdate,
  OutboxDialect,
  RetentionBatch,
  SqlExecutor,
  Statement,
} from '../shared/outbox-dialect.interface';
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

/** Finished rows of `status` older than $1 ms by the database clock. */
const finished = (status: string, o = '') =>
  `${o}"status" = '${finishedStatus(status)}' AND ${o}"processed_at" < now() - $1::bigint * interval '1 millisecond'`;

/**
 * The claim still holds the event: pending, with its token. Only another claim replaces the token, so
 * a lease that ran out while nobody claimed the event (the worker waited for a connection, or stalled)
 * does not void the outcome: the attempt ran once, and recording it is what keeps it from running again.
 */
const HELD = `"status" = 'pending' AND "claim_token" = $2`;

const json: AttemptLogSql = {
  object: (e) =>
    `jsonb_build_object('attempt', ${e.attempt}, 'startedAt', ${e.startedAt}, 'finishedAt', ${e.finishedAt}, ` +
    `'outcome', ${e.outcome}, 'error', ${e.error}, 'round', ${e.round})`,
  append: (log, entry) =>
    `(CASE WHEN jsonb_array_length(COALESCE(${log}, '[]'::jsonb)) >= ${ATTEMPT_LOG_SIZE} THEN ${log} - 0 ` +
    `ELSE COALESCE(${log}, '[]'::jsonb) END) || jsonb_build_array(${entry})`,
};

/**
 * PostgreSQL 13+: `timestamptz` and `jsonb`, a partial index on claimable rows, and a claim that is one
 * statement — a `FOR UPDATE SKIP LOCKED` selection feeding `UPDATE … RETURNING` — so concurrent workers
 * never wait for each other and never take the same row.
 */
export class PostgresDialect implements OutboxDialect {
  readonly name = 'postgres';
  readonly flavor = postgresFlavor;
  readonly transactionIsolation = 'READ COMMITTED';
  readonly maxParameters = 65_535;

  async verifyServer(executor: SqlExecutor): Promise<void> {
    const { rows } = await executor.run({ sql: 'SHOW server_version', params: [] });
    requireVersion('PostgreSQL', (rows[0]?.server_version as string | undefined) ?? '', '13.0');
  }

  readonly guardConnections = guardPoolClients;

  wakeUpChannel(dataSource: DataSource, table: OutboxTable) {
    return new PostgresWakeUp(dataSource, table.path);
  }

  // The table's versions and the start-up checks: postgres-schema.ts.
  readonly tableExists = postgresSchema.tableExists;
  readonly relocate = postgresSchema.relocate;
  readonly createSchema = postgresSchema.createSchema;
  readonly dropSchema = postgresSchema.dropSchema;
  readonly upgrade = postgresSchema.upgrade;
  readonly downgrade = postgresSchema.downgrade;
  readonly columns = postgresSchema.columns;
  readonly indexes = postgresSchema.indexes;

  isTransient(error: unknown): boolean {
    // deadlock_detected, serialization_failure, lock_not_available
    return ['40P01', '40001', '55P03'].includes(String(driverErrorCode(error)));
  }

  insert(table: OutboxTable, rows: Array<{ id: string; event: ValidatedEvent }>) {
    const params: unknown[] = [];
    const values = rows.map(({ id, event }) => {
      const n = params.length;
      params.push(
        ...insertParams(
          id,
          event,
          (d) => d.toISOString(),
          (ms) => ms,
        ),
      );
      return (
        `($${n + 1}, $${n + 2}, $${n + 3}, $${n + 4}, $${n + 5}::jsonb, $${n + 6}::jsonb, ` +
        `COALESCE($${n + 7}::timestamptz, clock_timestamp() + $${n + 8}::bigint * interval '1 millisecond'))`
      );
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
      sql: `SELECT * FROM ${quoteTable(table)} WHERE "dedupe_key" = ANY($1::varchar[])`,
      params: [keys],
    };
  }

  claimSelection(table: OutboxTable, batchSize: number): Statement {
    return {
      sql:
        `SELECT "id" FROM ${quoteTable(table)} WHERE "status" = 'pending' AND "available_at" <= now() ` +
        `ORDER BY "available_at", "id" LIMIT $1 FOR UPDATE SKIP LOCKED`,
      params: [batchSize],
    };
  }

  async claim(
    executor: SqlExecutor,
    table: OutboxTable,
    a: { batchSize: number; token: string; leaseMs: number; maxAttempts: number },
  ) {
    const t = quoteTable(table);
    const spent = `o."attempts" >= $4::int`;
    // The attempt whose lease expired enters the history, ended when its lease did.
    const expiredAttempt = appendAttempt(json, 'o."attempt_log"', {
      attempt: 'o."attempts"',
      startedAt: 'o."claimed_at"',
      finishedAt: 'o."available_at"',
      outcome: "'expired'",
      error: 'NULL::text',
      round: 'o."redrive_count"',
    });
    const { rows } = await executor.run({
      // One statement: the locking selection (eligibility inside it) feeds the update, re-checked there.
      // The creation time comes back as epoch milliseconds: a number, where a timestamp is parsed from text.
      sql: `WITH picked AS (${this.claimSelection(table, a.batchSize).sql})
        UPDATE ${t} AS o SET
          "attempts" = CASE WHEN ${spent} THEN o."attempts" ELSE o."attempts" + 1 END,
          "claim_token" = CASE WHEN ${spent} THEN NULL ELSE $2::uuid END,
          "available_at" = CASE WHEN ${spent} THEN o."available_at" ELSE now() + $3::bigint * interval '1 millisecond' END,
          "status" = CASE WHEN ${spent} THEN 'dead' ELSE 'pending' END,
          "processed_at" = CASE WHEN ${spent} THEN now() ELSE NULL END,
          "claimed_at" = CASE WHEN ${spent} THEN o."claimed_at" ELSE now() END,
          "attempt_log" = CASE WHEN o."claim_token" IS NOT NULL THEN ${expiredAttempt} ELSE o."attempt_log" END,
          "expired_attempts" = o."expired_attempts" + CASE WHEN o."claim_token" IS NOT NULL THEN 1 ELSE 0 END,
          "last_expired_attempt" = CASE WHEN o."claim_token" IS NOT NULL THEN o."attempts" ELSE o."last_expired_attempt" END,
          "note" = CASE
            WHEN o."claim_token" IS NOT NULL THEN 'attempt ' || o."attempts" || ' of ' || $4::int || ' ${LEASE_EXPIRED}'
            WHEN ${spent} AND o."last_error" IS NULL THEN 'attempt ' || o."attempts" || ' of ' || $4::int || ' ${NO_OUTCOME}'
            ELSE o."note" END
        FROM picked
        WHERE o."id" = picked."id" AND o."status" = 'pending' AND o."available_at" <= now()
        RETURNING ${CLAIMED_COLUMNS.map((c) => `o.${quoteIdent(c)}`).join(', ')},
          (extract(epoch FROM o."created_at") * 1000)::float8 AS "created_at"`,
      params: [a.batchSize, a.token, a.leaseMs, a.maxAttempts],
    });
    return rows;
  }

  acknowledge(table: OutboxTable, ids: string[], token: string) {
    return {
      sql:
        `UPDATE ${quoteTable(table)} SET "status" = 'delivered', "claim_token" = NULL, "processed_at" = now() ` +
        `WHERE "id" = ANY($1::uuid[]) AND ${HELD}`,
      params: [ids, token],
    };
  }

  fail(table: OutboxTable, id: string, token: string, u: FailureUpdate) {
    const failedAttempt = appendAttempt(json, '"attempt_log"', {
      attempt: '"attempts"',
      startedAt: '"claimed_at"',
      finishedAt: 'now()',
      outcome: `CASE WHEN $3::boolean THEN 'dead' ELSE 'failed' END`,
      error: `left($5, ${LOGGED_ERROR_LENGTH})`,
      round: '"redrive_count"',
    });
    return {
      sql:
        `UPDATE ${quoteTable(table)} SET ` +
        `"status" = CASE WHEN $3::boolean THEN 'dead' ELSE 'pending' END, "claim_token" = NULL, ` +
        `"available_at" = CASE WHEN $3::boolean THEN "available_at" ELSE now() + $4::bigint * interval '1 millisecond' END, ` +
        `"processed_at" = CASE WHEN $3::boolean THEN now() ELSE NULL END, ` +
        `"last_error" = $5, "completed_handlers" = $6::jsonb, "attempt_log" = ${failedAttempt} WHERE "id" = $1 AND ${HELD}`,
      params: [id, token, u.deadLetter, u.retryDelayMs, u.error, JSON.stringify(u.completedHandlers)],
    };
  }

  release(table: OutboxTable, ids: string[], token: string, uncount: boolean) {
    // An attempt given back counted (its handler ran, shutdown stopped waiting) enters the history.
    const released = appendAttempt(json, '"attempt_log"', {
      attempt: '"attempts"',
      startedAt: '"claimed_at"',
      finishedAt: 'now()',
      outcome: "'released'",
      error: 'NULL::text',
      round: '"redrive_count"',
    });
    return {
      sql:
        `UPDATE ${quoteTable(table)} SET "claim_token" = NULL, "available_at" = now(), ` +
        `"attempt_log" = CASE WHEN $3::int = 0 THEN ${released} ELSE "attempt_log" END, ` +
        `"attempts" = "attempts" - $3::int WHERE "id" = ANY($1::uuid[]) AND ${HELD}`,
      params: [ids, token, uncount ? 1 : 0],
    };
  }

  purgeSelection(table: OutboxTable, a: RetentionBatch): Statement {
    return {
      sql:
        `SELECT "id" FROM ${quoteTable(table)} WHERE ${finished(a.status)} ` +
        'ORDER BY "processed_at" LIMIT $2 FOR UPDATE SKIP LOCKED',
      params: [a.olderThanMs, a.batchSize],
    };
  }

  async purge(executor: SqlExecutor, table: OutboxTable, a: RetentionBatch) {
    // One statement: rows another purge (or anyone) has locked are skipped, not waited for.
    const { affected } = await executor.run({
      sql: `WITH picked AS (${this.purgeSelection(table, a).sql})
        DELETE FROM ${quoteTable(table)} AS o USING picked WHERE o."id" = picked."id" AND ${finished(a.status, 'o.')}`,
      params: [a.olderThanMs, a.batchSize],
    });
    return affected;
  }

  async renew(executor: SqlExecutor, table: OutboxTable, a: { ids: string[]; token: string; leaseMs: number }) {
    const { rows } = await executor.run({
      sql:
        `UPDATE ${quoteTable(table)} SET "available_at" = now() + $3::bigint * interval '1 millisecond' ` +
        `WHERE "id" = ANY($1::uuid[]) AND ${HELD} RETURNING "id"`,
      params: [a.ids, a.token, a.leaseMs],
    });
    return rows.map((row) => String(row.id));
  }

  counts(table: OutboxTable): Statement {
    return {
      sql:
        `SELECT "status", CASE WHEN "available_at" <= now() THEN 'due' WHEN "claim_token" IS NOT NULL THEN 'in_flight' ` +
        `ELSE 'scheduled' END AS "state", COUNT(*) AS "n" FROM ${quoteTable(table)} GROUP BY "status", "state"`,
      params: [],
    };
  }

  decode = decodeRow;
}
