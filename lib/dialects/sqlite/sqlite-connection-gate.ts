import { AsyncLocalStorage } from 'node:async_hooks';
import type { DataSource, QueryRunner } from 'typeorm';

type Release = () => void;

/**
 * TypeORM's SQLite drivers run every query runner of a DataSource on one connection. Two things go
 * wrong on it without coordination:
 *  - a statement of the outbox worker issued while an application transaction is open runs *inside*
 *    that transaction: it could claim an event that is later rolled back, or be rolled back itself;
 *  - two application transactions started concurrently collide ("cannot start a transaction within a
 *    transaction", or a savepoint released by the wrong caller).
 * The gate is a FIFO mutex over the connection. Root transactions (`dataSource.transaction`,
 * `manager.transaction`, `queryRunner.startTransaction`) hold it from BEGIN to COMMIT/ROLLBACK; the
 * worker holds it for each of its single statements. Nested transactions of the holder re-enter it.
 * Root transactions begin IMMEDIATE, so processes sharing the file wait for each other instead of
 * failing with SQLITE_BUSY.
 */
export class SqliteConnectionGate {
  private tail: Promise<void> = Promise.resolve();
  private readonly context = new AsyncLocalStorage<object>();
  /** Identity of the async context that holds the gate through `exclusive()`, if any. */
  private holder: object | undefined;
  /** Release function of a transaction started directly on the query runner (no async context). */
  private runnerRelease: Release | undefined;

  private acquire(): Promise<Release> {
    let release!: Release;
    const next = new Promise<void>((resolve) => (release = resolve));
    const previous = this.tail;
    this.tail = previous.then(() => next);
    return previous.then(() => {
      let released = false;
      return () => {
        if (!released) {
          released = true;
          release();
        }
      };
    });
  }

  /** True when the current async context already holds the gate. */
  private heldHere(): boolean {
    const store = this.context.getStore();
    return store !== undefined && store === this.holder;
  }

  /** Runs `fn` holding the gate; re-entrant for the holder's own async context. */
  async exclusive<T>(fn: () => Promise<T>): Promise<T> {
    if (this.heldHere()) return fn();
    const release = await this.acquire();
    const identity = {};
    this.holder = identity;
    try {
      return await this.context.run(identity, fn);
    } finally {
      this.holder = undefined;
      release();
    }
  }

  /** Wraps the DataSource's root manager and its shared query runner. Idempotent. */
  install(dataSource: DataSource): void {
    const marker = dataSource as unknown as { [GATE]?: SqliteConnectionGate };
    if (marker[GATE]) return;
    marker[GATE] = this;

    const manager = dataSource.manager;
    const transaction = manager.transaction.bind(manager) as (...args: unknown[]) => Promise<unknown>;
    (manager as unknown as { transaction: unknown }).transaction = (...args: unknown[]) =>
      this.exclusive(() => transaction(...args));

    this.wrapRunner(dataSource.createQueryRunner());
  }

  private wrapRunner(runner: QueryRunner): void {
    const start = runner.startTransaction.bind(runner);
    const commit = runner.commitTransaction.bind(runner);
    const rollback = runner.rollbackTransaction.bind(runner);
    const depth = () => (runner as unknown as { transactionDepth: number }).transactionDepth ?? 0;

    runner.startTransaction = async (isolation?: Parameters<QueryRunner['startTransaction']>[0]) => {
      // A root transaction begun outside exclusive() (Repository.save, a hand-made query runner):
      // take the gate for its lifetime. Anything else is nested in the current holder.
      let release: Release | undefined;
      if (depth() === 0 && !this.heldHere()) {
        release = await this.acquire();
        this.runnerRelease = release;
      }
      try {
        await start(isolation);
      } catch (error) {
        if (release) {
          this.runnerRelease = undefined;
          release();
        }
        throw error;
      }
    };
    const finish = (end: () => Promise<void>) => async () => {
      try {
        await end();
      } finally {
        if (!runner.isTransactionActive && this.runnerRelease) {
          const release = this.runnerRelease;
          this.runnerRelease = undefined;
          release();
        }
      }
    };
    runner.commitTransaction = finish(commit);
    runner.rollbackTransaction = finish(rollback);

    // TypeORM opens transactions DEFERRED. One that reads, then writes after another process has
    // committed, fails with SQLITE_BUSY at once, busy timeout or not. IMMEDIATE takes the write lock at
    // BEGIN, waiting out the busy timeout, so transactions of several processes on one file queue up.
    const query = runner.query.bind(runner);
    runner.query = ((sql: string, ...rest: unknown[]) =>
      (query as (...args: unknown[]) => Promise<unknown>)(
        sql === 'BEGIN TRANSACTION' ? 'BEGIN IMMEDIATE TRANSACTION' : sql,
        ...rest,
      )) as QueryRunner['query'];
  }
}

const GATE = Symbol.for('nestjs-typeorm-outbox:sqlite-gate');

/** The gate of a SQLite DataSource, installed on first use. */
export function sqliteGateFor(dataSource: DataSource): SqliteConnectionGate {
  const existing = (dataSource as unknown as { [GATE]?: SqliteConnectionGate })[GATE];
  if (existing) return existing;
  const gate = new SqliteConnectionGate();
  gate.install(dataSource);
  return gate;
}
