import { acknowledgeStatement, deliveredStatement } from '../dialects/shared/outcome-statements';
import { failStatement, releaseStatement } from '../dialects/shared/outcome-statements';
import { randomUUID } from 'node:crypto';
import type { OnModuleInit } from '@nestjs/common';
import type { DataSource, EntityManager } from 'typeorm';
import { decodeClaimed, decodeRun } from '../dialects/shared/dialect.util';
import type { ClaimedEvent } from '../interfaces/claimed-event.interface';
import { dialectForType } from '../dialects/dialect-for-type';
import type {
  ClaimArgs,
  FailureUpdate,
  OutboxDialect,
  RetentionBatch,
  SqlExecutor,
  Statement,
  WakeUpChannel,
} from '../dialects/shared/outbox-dialect.interface';
import { OutboxEvents } from '../events/outbox-events';
import { WakeUpReporter } from './wake-up-reporter';
import type { OutboxWakeUpChannel } from '../interfaces/outbox-wake-up.interface';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import { outboxTableOn, type OutboxTable } from '../dialects/shared/outbox-table';
import type { OutboxCounts, PublishResult } from '../interfaces/outbox-message.interface';
import type { ValidatedEvent } from '../interfaces/validated-event.interface';
import { CommitWatcher } from './commit-watcher';
import { createSqlExecutor } from './sql-executor';
import { verifyOutboxTable } from './table-check';
import type { ResolvedKeyOrder } from '../interfaces/outbox-ordering.interface';
import { finishInOrder, lockKeys, moveFronts, purgeIdleKeys, sortKeys } from './key-order-writes';
import { sweepFinishedFronts, takeFollowers } from './key-order-writes';
import { EventInserter } from './event-inserter';

export interface ClaimResult {
  token: string;
  /** Claimed events to deliver now. */
  events: ClaimedEvent[];
  /** Events whose final attempt's lease had expired: dead-lettered by the claim. */
  deadLettered: ClaimedEvent[];
  /**
   * Claimed rows that cannot be decoded (say, JSON cut short by MySQL's non-strict `sql_mode`), with
   * the reason. `deadLettered`: the claim already dead-lettered it, its attempts spent; else it is
   * leased to this claim like the events.
   */
  undecodable: Array<{ id: string; topic: string; attempts: number; error: string; deadLettered: boolean }>;
  /**
   * Per-key order's runs: by the id of a claimed event of an ordered key, the events of its key leased
   * with it, to be delivered after it, one after another, in order.
   */
  runs: Map<string, ClaimedEvent[]>;
  /** From the claim's first statement to its last (its runs' included), in ms. */
  durationMs: number;
}

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

  constructor(
    readonly dataSource: DataSource,
    private readonly tableName: string,
    events: OutboxEvents = new OutboxEvents(),
    /** The `wakeUp` option: undefined for the database's own channel, where it has one. */
    wakeUp: OutboxWakeUpChannel | false | undefined,
    private readonly errorText: OutboxErrorText,
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
    this.inserter = new EventInserter(this.dialect, this.table, this.commits, events);
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
  insert(manager: EntityManager, events: ValidatedEvent[], order?: ResolvedKeyOrder): Promise<PublishResult[]> {
    return this.inserter.insert(manager, events, order);
  }

  async claim(args: Omit<ClaimArgs, 'token'>): Promise<ClaimResult> {
    const token = randomUUID();
    const started = performance.now();
    const rows = await this.dialect.claim(this.executor, this.table, { ...args, token });
    const claim: ClaimResult = { token, events: [], deadLettered: [], undecodable: [], runs: new Map(), durationMs: 0 };
    // The claim has committed: one row that cannot be read must not take its batch-mates down with it.
    for (const row of rows) {
      let event: ClaimedEvent;
      try {
        event = decodeClaimed(row);
      } catch (error) {
        claim.undecodable.push({
          id: String(row.id),
          topic: String(row.topic),
          attempts: Number(row.attempts),
          error: this.errorText.describe(error),
          deadLettered: row.status === 'dead',
        });
        continue;
      }
      if (event.status === 'pending') claim.events.push(event);
      else if (event.status === 'dead') claim.deadLettered.push(event);
    }
    claim.events.sort(byDueTime);
    const fronts = claim.events.filter((e) => e.seq !== null).map((e) => ({ id: e.id, key: e.key!, seq: e.seq! }));
    const budget = args.batchSize - rows.length;
    if (fronts.length > 0 && budget > 0 && fronts.length < (args.lanes ?? Infinity)) {
      const f = this.dialect.flavor;
      const runs = await takeFollowers(this.executor, f, this.table, { ...args, token }, fronts, budget);
      for (const [front, followers] of runs) claim.runs.set(front, decodeRun(followers));
    }
    claim.durationMs = performance.now() - started;
    return claim;
  }

  /**
   * Acknowledges a batch in one statement — with the move of their keys' fronts, in one transaction,
   * when some are events of ordered `keys`; returns how many `token` still held (the rest lost their lease).
   * `heldNext`: how many of those keys move onto an event this claim holds (the next of a run), which
   * becomes the front but not due, so it wakes no worker.
   */
  async acknowledge(ids: string[], token: string, keys: string[] = [], heldNext = 0): Promise<number> {
    if (ids.length === 0) return 0;
    return this.finish(acknowledgeStatement(this.dialect.flavor, this.table, ids, token), ids, keys, heldNext);
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
    const sorted = sortKeys(keys);
    const promoted = await this.executor.transaction(async (run) => {
      await lockKeys(run, this.dialect.flavor, this.table, sorted);
      return moveFronts(run, this.dialect.flavor, this.table, sorted, finished);
    });
    if (promoted > 0) this.eventsMadeDue();
  }

  /**
   * Moves on the ordered keys whose front finished without them (a crash between the two, a dead head
   * whose topic now skips dead heads); returns how many.
   */
  async sweepFronts(skips: (topic: string) => boolean): Promise<number> {
    const moved = await sweepFinishedFronts(this.executor, this.dialect.flavor, this.table, skips);
    if (moved > 0) this.eventsMadeDue();
    return moved;
  }

  /** Deletes up to `batchSize` rows of ordered keys with nothing unfinished; returns how many. */
  async purgeIdleKeys(batchSize: number): Promise<number> {
    return purgeIdleKeys(this.executor, this.dialect.flavor, this.table, batchSize);
  }

  /** Runs an outcome; with `keys`, in one transaction with the move of their fronts (see `finishInOrder`). */
  private async finish(outcome: Statement, ids: string[], keys: string[], heldNext = 0): Promise<number> {
    if (keys.length === 0) return (await this.executor.run(outcome)).affected;
    const f = this.dialect.flavor;
    const { affected, promoted } = await finishInOrder(this.executor, f, this.table, sortKeys(keys), outcome, ids);
    if (promoted > heldNext) this.eventsMadeDue();
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

  /** Extends, by `leaseMs`, the lease of those of `ids` that `token` still holds; returns their ids. */
  renew(ids: string[], token: string, leaseMs: number): Promise<string[]> {
    return this.dialect.renew(this.executor, this.table, { ids, token, leaseMs });
  }

  /** Deletes one retention batch (see `RetentionStatements.purge`); returns how many rows it deleted. */
  purge(args: RetentionBatch): Promise<number> {
    return this.dialect.purge(this.executor, this.table, args);
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

function byDueTime(a: ClaimedEvent, b: ClaimedEvent): number {
  return a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}
