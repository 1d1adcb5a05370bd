import type { DataSource, QueryRunner } from 'typeorm';
import type {
  OutboxDialect,
  SqlExecutor,
  Statement,
  StatementResult,
} from '../dialects/shared/outbox-dialect.interface';
import type { ConnectionGate } from '../dialects/shared/outbox-dialect.interface';
import { postgresClientQuery } from '../dialects/postgres/postgres-client-query';
import { postgresScript } from '../dialects/postgres/postgres-script';

const TRANSIENT_RETRIES = 5;

/** One statement on `runner`, its rows and affected count in the shape every dialect reads. */
export async function queryOn(runner: QueryRunner, statement: Statement): Promise<StatementResult> {
  const direct = postgresClientQuery(runner, statement);
  if (direct) return direct;
  // TypeORM's QueryResult: the driver's rows (or nothing, for a statement without them) and the affected count.
  const result = (await runner.query(statement.sql, statement.params, true)) as {
    records?: unknown;
    affected?: number;
    raw?: { insertId?: unknown };
  };
  const insertId = result.raw?.insertId;
  return {
    rows: Array.isArray(result.records) ? (result.records as Record<string, unknown>[]) : [],
    affected: result.affected ?? 0,
    ...(typeof insertId === 'number' ? { insertId } : {}),
  };
}

/**
 * The worker's way to the database: each statement or transaction on a connection of its own, outside
 * any application transaction, retried when the database reports a deadlock or lock wait, and taken
 * in turn through the database's connection gate where it has one (SQLite).
 */
export function createSqlExecutor(
  dataSource: DataSource,
  dialect: OutboxDialect,
  gate: ConnectionGate | undefined,
): SqlExecutor {
  const exclusive = <T>(work: () => Promise<T>): Promise<T> => (gate ? gate.exclusive(work) : work());

  /** Deadlocks and lock waits are the database asking to try again, not failures of the outbox. */
  const withRetry = async <T>(work: () => Promise<T>): Promise<T> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await work();
      } catch (error) {
        if (attempt >= TRANSIENT_RETRIES || !dialect.isTransient(error)) throw error;
        await new Promise((resolve) => setTimeout(resolve, Math.floor(Math.random() * 20 * attempt)));
      }
    }
  };

  const execute = async (statement: Statement): Promise<StatementResult> => {
    const runner = dataSource.createQueryRunner();
    try {
      return await queryOn(runner, statement);
    } finally {
      await runner.release();
    }
  };

  const transaction = <T>(work: (run: (statement: Statement) => Promise<StatementResult>) => Promise<T>) =>
    exclusive(() =>
      withRetry(async () => {
        const runner = dataSource.createQueryRunner();
        try {
          await runner.startTransaction(dialect.transactionIsolation);
          try {
            const result = await work((statement) => queryOn(runner, statement));
            await runner.commitTransaction();
            return result;
          } catch (error) {
            await runner.rollbackTransaction().catch(() => undefined);
            throw error;
          }
        } finally {
          await runner.release();
        }
      }),
    );

  const oneByOne = (statements: Statement[]) =>
    transaction(async (run) => {
      const results: StatementResult[] = [];
      for (const statement of statements) results.push(await run(statement));
      return results;
    });

  // One message where the runner's client may be used directly (see `postgresScript`); else one by one, in a transaction.
  const script = async (statements: Statement[]): Promise<StatementResult[]> => {
    const sent = await withRetry(async () => {
      const runner = dataSource.createQueryRunner();
      try {
        await runner.connect();
        return await postgresScript(runner, statements, dialect.transactionIsolation ?? 'READ COMMITTED');
      } finally {
        await runner.release();
      }
    });
    return sent ?? oneByOne(statements);
  };

  return {
    run: (statement) => exclusive(() => withRetry(() => execute(statement))),
    transaction,
    ...(dialect.name === 'postgres' ? { script } : {}),
  };
}
