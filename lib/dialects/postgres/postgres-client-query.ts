import { QueryFailedError, type QueryRunner } from 'typeorm';
import type { Statement, StatementResult } from '../shared/outbox-dialect.interface';

/** node-postgres's client, as far as a statement needs it. */
export interface PgClient {
  query(sql: string, params?: unknown[]): Promise<{ rows?: Record<string, unknown>[]; rowCount?: number | null }>;
}

/** TypeORM's query runner beyond its public type: the client it holds once connected. */
interface ConnectedRunner {
  databaseConnection?: PgClient;
}

/** Whether a subscriber of the DataSource listens to its queries (`beforeQuery`, `afterQuery`). */
function listensToQueries(runner: QueryRunner): boolean {
  return runner.connection.subscribers.some(
    (subscriber) => typeof subscriber.beforeQuery === 'function' || typeof subscriber.afterQuery === 'function',
  );
}

/**
 * `statement` sent by a connected PostgreSQL query runner's client itself: what TypeORM's
 * `runner.query` does — the query logged (and logged as slow past `maxQueryExecutionTime`), a failure
 * logged and thrown as its `QueryFailedError` — without the per-statement work of its broadcasts, whose
 * only listeners are `beforeQuery`/`afterQuery` subscribers. Undefined, for `runner.query` to do it,
 * when the shortcut does not apply: another database, a runner not connected or released, or a
 * subscriber of queries.
 */
export function postgresClientQuery(runner: QueryRunner, statement: Statement): Promise<StatementResult> | undefined {
  const client = connectedPgClient(runner);
  return client && send(runner, client, statement);
}

/** The client of a connected PostgreSQL query runner, where the outbox may send through it (see `postgresClientQuery`). */
export function connectedPgClient(runner: QueryRunner): PgClient | undefined {
  const client = (runner as unknown as ConnectedRunner).databaseConnection;
  if (runner.connection.options.type !== 'postgres' || !client || runner.isReleased || listensToQueries(runner)) {
    return undefined;
  }
  return client;
}

async function send(runner: QueryRunner, client: PgClient, { sql, params }: Statement): Promise<StatementResult> {
  const result = await logged(runner, sql, params, () => client.query(sql, params));
  return { rows: result.rows ?? [], affected: result.rowCount ?? 0 };
}

/**
 * Runs `call`, which sends `sql` with `params`, framed as TypeORM's `runner.query` frames a query: logged
 * before, logged as slow past `maxQueryExecutionTime`, and on failure logged and thrown as its
 * `QueryFailedError` once `onError` (a clean-up that must not throw) has run.
 */
export async function logged<T>(
  runner: QueryRunner,
  sql: string,
  params: unknown[],
  call: () => Promise<T>,
  onError?: () => Promise<unknown>,
): Promise<T> {
  const { logger } = runner.connection;
  const slowMs = runner.connection.options.maxQueryExecutionTime;
  logger.logQuery(sql, params, runner);
  const started = slowMs ? Date.now() : 0;
  let result: T;
  try {
    result = await call();
  } catch (error) {
    logger.logQueryError(error as Error, sql, params, runner);
    await onError?.();
    throw new QueryFailedError(sql, params, error as Error);
  }
  if (slowMs && Date.now() - started > slowMs) logger.logQuerySlow(Date.now() - started, sql, params, runner);
  return result;
}
