import { acknowledgeStatement, deliveredStatement } from '../dialects/shared/outcome-statements';
import {
  completeStatement,
  deferStatement,
  failStatement,
  releaseStatement,
} from '../dialects/shared/outcome-statements';
import { randomUUID } from 'node:crypto';
import type { OnModuleInit } from '@nestjs/common';
import type { DataSource, EntityManager } from 'typeorm';
import { dialectForType } from '../dialects/dialect-for-type';
import type {
  OutboxDialect,
  RetentionBatch,
  SqlExecutor,
  Statement,
  WakeUpChannel,
} from '../dialects/shared/outbox-dialect.interface';
import { OutboxEvents } from '../events/outbox-events';
import { WakeUpReporter } from './wake-up-reporter';
import type { OutboxWakeUpChannel } from '../interfaces/outbox-wake-up.interface';
import type { FailureUpdate } from '../interfaces/claimed-event.interface';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import { outboxTableOn, type OutboxTable } from '../dialects/shared/outbox-table';
import type { OutboxCounts, PublishResult } from '../interfaces/outbox-message.interface';
import type { ValidatedEvent } from '../interfaces/validated-event.interface';
import { CommitWatcher } from './commit-watcher';
import { createSqlExecutor, queryOn } from './sql-executor';
import { verifyOutboxTable } from './table-check';
import type { ResolvedKeyOrder } from '../interfaces/outbox-ordering.interface';
import { KeyOrder } from '../ordering/key-order';
import { OrderedKeys } from '../ordering/ordered-keys';
import { EventInserter } from './event-inserter';
import { decodeRun } from '../dialects/shared/dialect.util';
import { decodedClaim, type ClaimRequest, type ClaimResult } from './claim-result';

/**
 * The outbox table's operations, bound to one DataSource and table. Publishing runs on the caller's
 * transactional manager; the worker's operations are each one short statement of their own.
 */
export class OutboxStore implements OnModuleInit {
  readonly dialect: OutboxDialect;
  private readonly wakeUpReports: WakeUpReporter;
  /** Cross-instance wake-up, where the database offers one. */
  readonly wakeUp: WakeUpChannel | undefined;
  private readonly commits: CommitWatcher;
  private readonly inserter: EventInserter;
  /** The worker's way to the database: each statement or transaction outside any application transaction. */
  readonly executor: SqlExecutor;

  /** Where the table lives: TypeORM's `entityPrefix` and PostgreSQL `schema` of the DataSource apply. */
  readonly table: OutboxTable;
  /** Per-key order on this table: the `ordering` option, the keys' table and its writes. */
  readonly keys: OrderedKeys;

  constructor(
    readonly dataSource: DataSource,
    private readonly tableName: string,
    events: OutboxEvents = new OutboxEvents(),
    /** The `wakeUp` option: undefined for the database's own channel, where it has one. */
    wakeUp: OutboxWakeUpChannel | false | undefined,
    private readonly errorText: OutboxErrorText,
    /** The `ordering` option: none by default. */
    ordering: ResolvedKeyOrder = new KeyOrder([]),
  ) {
    this.table = outboxTableOn(dataSource, tableName);
    this.dialect = dialectForType(String(dataSource.options.type));
    this.dialect.guardConnections?.(dataSource);
    this.wakeUpReports = new WakeUpReporter(events, errorText);
    // The application's channel or the database's own: one contract, started the same way.
    this.wakeUp = wakeUp === false ? undefined : (wakeUp ?? this.dialect.wakeUpChannel?.(dataSource, this.table));
    this.wakeUp?.start(this.wakeUpReports);
    this.executor = createSqlExecutor(dataSource, this.dialect, this.dialect.connectionGate?.(dataSource));
    this.commits = new CommitWatcher(this.table.path, events, this.wakeUp);
    this.keys = new OrderedKeys(this.dialect, this.table, this.executor, ordering);
    this.inserter = new EventInserter(this.dialect, this.table, this.keys, this.commits, events);
    dataSource.subscribers.push(this.commits.subscriber());
  }

  /**
   * For the worker: calls `wake` after this instance's commits that published, and on every
   * notification of another instance (the channel listens from now on); `onError` hears of every error
   * of the channel, either side.
   */
  async listenForWakeUps(wake: () => void, onError: (error: unknown) => void): Promise<void> {
    this.commits.onCommitted(wake);
    this.wakeUpReports.onError(onError);
    await this.wakeUp?.listen(wake);
  }

  /** Closes the wake-up channel: at shutdown, before the application's own connections close. */
  async closeWakeUp(): Promise<void> {
    await this.wakeUp?.close();
  }

  /** Calls `listener` after every commit of a transaction that published events. */
  onCommitted(listener: () => void): void {
    this.commits.onCommitted(listener);
  }

  /** Wakes the workers, here and (where the database can) elsewhere: events became due. */
  eventsMadeDue(): void {
    this.commits.madeDue();
  }

  /**
   * Checks the server and the table once the application initialises, before the worker starts: too
   * old a server, a missing table or one a migration has not reached yet stop the start-up, and what
   * the start-up opened is closed (the DataSource's pool with it).
   */
  async onModuleInit(): Promise<void> {
    try {
      await this.dialect.verifyServer(this.executor);
      await verifyOutboxTable(this.executor, this.dialect, this.table, this.tableName);
    } catch (error) {
      await this.closeRefused();
      throw error;
    }
  }

  /**
   * After a refused start-up Nest runs no shutdown hook, and `createApplicationContext()` returns no
   * application to close: the pool (and a wake-up channel's connection) would keep the process alive
   * — for ever on MySQL/MariaDB. Nothing can use them any more, so they are closed here, and by
   * `StartRefusal` when another start-up step refuses.
   */
  async closeRefused(): Promise<void> {
    await this.wakeUp?.close().catch(() => undefined);
    if (this.dataSource.isInitialized) await this.dataSource.destroy().catch(() => undefined);
  }

  /**
   * Inserts events in the caller's transaction. Dedupe keys are checked before anything is written,
   * so a conflict leaves the table as it was.
   */
  insert(manager: EntityManager, events: ValidatedEvent[]): Promise<PublishResult[]> {
    return this.inserter.insert(manager, events);
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    const { lanes, ...args } = request;
    const token = randomUUID();
    const started = performance.now();
    const rows = await this.dialect.claim(this.executor, this.table, { ...args, token });
    // The claim has committed: one row that cannot be read must not take its batch-mates down with it.
    const claim = decodedClaim(token, rows, this.errorText);
    const fronts = claim.events.filter((e) => e.seq !== null).map((e) => ({ id: e.id, key: e.key!, seq: e.seq! }));
    const runs = await this.keys.runs.take({ ...args, token }, fronts, args.batchSize - rows.length, lanes);
    for (const [front, followers] of runs) claim.runs.set(front, decodeRun(followers));
    claim.durationMs = performance.now() - started;
    return claim;
  }

  /**
   * Acknowledges a batch in one statement — with the move of their keys' fronts, in one transaction,
   * when some are events of ordered `keys`; returns how many `token` still held (the rest lost their lease).
   */
  async acknowledge(ids: string[], token: string, keys: string[] = []): Promise<number> {
    if (ids.length === 0) return 0;
    return this.finish(acknowledgeStatement(this.dialect.flavor, this.table, ids, token), ids, keys);
  }

  /** Which of `events` an acknowledgement wrote: delivered at the attempt their claim counted (a later claim counts one more). */
  async deliveredAt<T extends { id: string; attempts: number }>(events: T[]): Promise<T[]> {
    const ids = events.map((e) => e.id);
    const { rows } = await this.executor.run(deliveredStatement(this.dialect.flavor, this.table, ids));
    const attempts = new Map(rows.map((row) => [String(row.id), Number(row.attempts)]));
    return events.filter((e) => attempts.get(e.id) === e.attempts);
  }

  /**
   * Each returns false when the token no longer owns a live lease: nothing was changed. `frontOf`: the
   * key whose front moves on when this failure finishes the event (dead, and its topic skips dead heads).
   */
  async fail(id: string, token: string, update: FailureUpdate, frontOf?: string): Promise<boolean> {
    const statement = failStatement(this.dialect.flavor, this.table, id, token, update);
    return (await this.finish(statement, [id], frontOf === undefined ? [] : [frontOf])) === 1;
  }

  /** Moves the fronts of ordered `keys` that are among `finished` and no longer pending or waiting. */
  async moveFronts(keys: string[], finished: string[]): Promise<void> {
    if ((await this.keys.moveOn(keys, finished)).due) this.eventsMadeDue();
  }

  /**
   * Moves on the ordered keys whose front finished without them (a crash between the two, a dead head
   * whose topic now skips dead heads); returns how many.
   */
  async sweepFronts(): Promise<number> {
    const moved = await this.keys.sweep();
    if (moved > 0) this.eventsMadeDue();
    return moved;
  }

  /** Deletes up to `batchSize` rows of ordered keys with nothing unfinished; returns how many. */
  purgeIdleKeys(batchSize: number): Promise<number> {
    return this.keys.purgeIdle(batchSize);
  }

  /**
   * Runs an outcome; with `keys`, in one transaction with the move of their fronts (see
   * `OrderedKeys.finish`), waking the workers when it made an event due (not the next of a run, which
   * the claim that moved its key on holds).
   */
  private async finish(outcome: Statement, ids: string[], keys: string[]): Promise<number> {
    if (keys.length === 0) return (await this.executor.run(outcome)).affected;
    const { affected, due } = await this.keys.finish(keys, outcome, ids);
    if (due) this.eventsMadeDue();
    return affected;
  }

  async release(id: string, token: string, uncount: boolean): Promise<boolean> {
    return (await this.releaseMany([id], token, uncount)) === 1;
  }

  /** Gives claimed events back in one statement; returns how many `token` still held. */
  async releaseMany(ids: string[], token: string, uncount: boolean): Promise<number> {
    if (ids.length === 0) return 0;
    return (await this.executor.run(releaseStatement(this.dialect.flavor, this.table, ids, token, uncount))).affected;
  }

  /**
   * Gives an event back uncounted, due in `delayMs`, with the targets it has done (see `deferStatement`);
   * false when the token no longer holds it.
   */
  async defer(id: string, token: string, completedHandlers: string[], delayMs: number): Promise<boolean> {
    const statement = deferStatement(this.dialect.flavor, this.table, id, token, completedHandlers, delayMs);
    return (await this.executor.run(statement)).affected === 1;
  }

  /**
   * Records, inside the transaction of `manager`, that `handler` is done with the event `token` still
   * holds; false when the token no longer holds it (the transaction must then roll back).
   */
  async complete(manager: EntityManager, id: string, token: string, handler: string): Promise<boolean> {
    const statement = completeStatement(this.dialect.flavor, this.table, id, token, handler);
    return (await queryOn(manager.queryRunner!, statement)).affected === 1;
  }

  /** Extends, by `leaseMs`, the lease of those of `ids` that `token` still holds; returns their ids. */
  renew(ids: string[], token: string, leaseMs: number): Promise<string[]> {
    return this.dialect.renew(this.executor, this.table, { ids, token, leaseMs });
  }

  /** Deletes one retention batch (see `RetentionStatements.purge`); returns how many rows it deleted. */
  purge(args: RetentionBatch): Promise<number> {
    return this.dialect.purge(this.executor, this.table, this.keeping(args));
  }

  /** The selection of one retention batch, as `purge` makes it (for EXPLAIN in tests and operations). */
  purgeSelection(args: RetentionBatch): Statement {
    return this.dialect.purgeSelection(this.table, this.keeping(args));
  }

  /** A retention batch that keeps the dead heads blocking their key, whatever their age. */
  private keeping(args: RetentionBatch): RetentionBatch {
    const keep = this.keys.statements.keptHeads(args.status);
    return keep ? { ...args, keep } : args;
  }

  async counts(): Promise<OutboxCounts> {
    const counts: OutboxCounts = { pending: 0, due: 0, scheduled: 0, inFlight: 0, delivered: 0, dead: 0 };
    const { rows } = await this.executor.run(this.dialect.counts(this.table));
    for (const row of rows) {
      const n = Number(row.n);
      if (row.status === 'delivered') counts.delivered += n;
      else if (row.status === 'dead') counts.dead += n;
      // Behind an earlier event of its key: not due before that one is finished.
      else if (row.status === 'waiting') counts.scheduled += n;
      else if (row.state === 'in_flight') counts.inFlight += n;
      else counts[row.state === 'due' ? 'due' : 'scheduled'] += n;
    }
    counts.pending = counts.due + counts.scheduled;
    return counts;
  }
}
