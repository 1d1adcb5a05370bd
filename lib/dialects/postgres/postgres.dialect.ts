import type { DataSource } from 'typeorm';
import { postgresAudit } from './postgres-audit';
import { postgresInbox } from './postgres-inbox';
import { postgresFlavor } from './postgres-flavor';
import { postgresSchema } from './postgres-schema';
import { PostgresWakeUp } from './postgres-wake-up';
import { guardPoolClients } from './postgres-pool-guard';
import type {
  OutboxDialect,
  ClaimArgs,
  RenewalArgs,
  RetentionBatch,
  SqlExecutor,
  Statement,
} from '../shared/outbox-dialect.interface';
import {
  decodeRow,
  driverErrorCode,
  finishedStatus,
  kept,
  quoteIdent,
  quoteTable,
  requireVersion,
} from '../shared/dialect.util';
import { CLAIMED } from '../shared/outbox-columns';
import type { OutboxTable } from '../shared/outbox-table';
import { claimAssignments } from '../shared/claim-rules';
import { renewStatement } from '../shared/outcome-statements';
import { StatementBuilder } from '../shared/statement-builder';

/** Finished rows of `status` older than $1 ms by the database clock. */
const finished = (status: string, o = '') =>
  `${o}"status" = '${finishedStatus(status)}' AND ${o}"processed_at" < now() - $1::bigint * interval '1 millisecond'`;

/** The claim's locking selection of up to `limit` due rows, in due order. */
const picking = (table: OutboxTable, limit: string) =>
  `SELECT "id" FROM ${quoteTable(table)} WHERE "status" = 'pending' AND "available_at" <= now() ` +
  `ORDER BY "available_at", "id" LIMIT ${limit} FOR UPDATE SKIP LOCKED`;

/**
 * What a claim returns: times as epoch milliseconds, a number, where a timestamp is parsed from text; a
 * JSON column at its empty value (no headers, no completed handler) as NULL, which the decoder reads as
 * that value, so the driver parses no JSON for it.
 */
const RETURNED = CLAIMED.map(({ name, kind, whenNull }) => {
  const column = `o.${quoteIdent(name)}`;
  // date_part, not extract: a float8 at once, where extract computes a numeric (PostgreSQL 14+).
  if (kind === 'time') return `date_part('epoch', ${column}) * 1000 AS ${quoteIdent(name)}`;
  if (kind === 'json' && whenNull)
    return `NULLIF(${column}, '${JSON.stringify(whenNull())}'::jsonb) AS ${quoteIdent(name)}`;
  return column;
}).join(', ');

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

  /** The table's versions and the start-up checks: postgres-schema.ts. */
  readonly schema = postgresSchema;

  /** The inbox table of a receiving service: postgres-inbox.ts. */
  readonly inbox = postgresInbox;
  /** The admin page's audit trail: postgres-audit.ts. */
  readonly audit = postgresAudit;

  isTransient(error: unknown): boolean {
    // deadlock_detected, serialization_failure, lock_not_available
    return ['40P01', '40001', '55P03'].includes(String(driverErrorCode(error)));
  }

  selectByDedupeKeys(table: OutboxTable, keys: string[]) {
    return {
      sql: `SELECT * FROM ${quoteTable(table)} WHERE "dedupe_key" = ANY($1::varchar[])`,
      params: [keys],
    };
  }

  claimSelection(table: OutboxTable, batchSize: number): Statement {
    const b = new StatementBuilder(this.flavor.placeholder);
    return b.statement(picking(table, b.bind(batchSize)));
  }

  async claim(executor: SqlExecutor, table: OutboxTable, a: ClaimArgs) {
    const b = new StatementBuilder(this.flavor.placeholder);
    const p = b.named({ batchSize: a.batchSize, token: a.token, leaseMs: a.leaseMs, maxAttempts: a.maxAttempts });
    const notHeld = a.heldTokens?.length
      ? ` AND (o."claim_token" IS NULL OR o."claim_token" <> ALL(${b.bind([...a.heldTokens])}::uuid[]))`
      : '';
    const set = claimAssignments(this.flavor, {
      now: 'now()',
      leaseEnd: `now() + ${p.leaseMs}::bigint * interval '1 millisecond'`,
      token: `${p.token}::uuid`,
      maxAttempts: p.maxAttempts,
    });
    // One statement: the locking selection (eligibility inside it) feeds the update, re-checked there.
    const { rows } = await executor.run(
      b.statement(`WITH picked AS (${picking(table, p.batchSize)})
  UPDATE ${quoteTable(table)} AS o SET
    ${set}
  FROM picked
  WHERE o."id" = picked."id" AND o."status" = 'pending' AND o."available_at" <= now()${notHeld}
  RETURNING ${RETURNED}`),
    );
    return rows;
  }

  purgeSelection(table: OutboxTable, a: RetentionBatch): Statement {
    return {
      sql:
        `SELECT "id" FROM ${quoteTable(table)} AS r WHERE ${finished(a.status, 'r.')}${kept(a)} ` +
        'ORDER BY r."processed_at" LIMIT $2 FOR UPDATE OF r SKIP LOCKED',
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

  async renew(executor: SqlExecutor, table: OutboxTable, a: RenewalArgs) {
    const { rows } = await executor.run(renewStatement(this.flavor, table, a, (update) => `${update} RETURNING "id"`));
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
