import { acknowledgeStatement, failStatement, releaseStatement } from '../dialects/shared/outcome-statements';
import { randomUUID } from 'node:crypto';
import type { OnModuleInit } from '@nestjs/common';
import type { DataSource, EntityManager } from 'typeorm';
import { describeError } from '../utils/describe-error';
import { decodeClaimed } from '../dialects/shared/dialect.util';
import { dialectForType } from '../dialects/dialect-for-type';
import type {
  ClaimArgs,
  ClaimedEvent,
  FailureUpdate,
  OutboxDialect,
  RetentionBatch,
  SqlExecutor,
  Statement,
  StatementResult,
  StoredEvent,
  WakeUpChannel,
} from '../dialects/shared/outbox-dialect.interface';
import { OutboxEvents } from '../events/outbox-events';
import { WakeUpReporter } from './wake-up-reporter';
import type { OutboxWakeUpChannel } from '../interfaces/outbox-wake-up.interface';
import { outboxTableOn, type OutboxTable } from '../dialects/shared/outbox-table';
import { OutboxDedupeConflictError } from '../errors/outbox.errors';
import type { OutboxCounts, PublishResult } from '../interfaces/outbox-message.interface';
import type { ValidatedEvent } from '../interfaces/validated-event.interface';
import { uuidv7 } from '../utils/uuidv7';
import { CommitWatcher, transactionDepth } from './commit-watcher';
import { createSqlExecutor, queryOn } from './sql-executor';
import { verifyOutboxTable } from './table-check';
import { insertStatements } from './insert-chunks';
import { keyNotStored, sameContent, sameStored } from './dedupe-keys';

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
  /** The worker's way to the database: each statement or transaction outside any application transaction. */
  readonly executor: SqlExecutor;

  /** Where the table lives: TypeORM's `entityPrefix` and PostgreSQL `schema` of the DataSource apply. */
  readonly table: OutboxTable;

  constructor(
    readonly dataSource: DataSource,
    private readonly tableName: string,
    private readonly events: OutboxEvents = new OutboxEvents(),
    /** The `wakeUp` option: undefined for the database's own channel, where it has one. */
    wakeUp?: OutboxWakeUpChannel | false,
  ) {
    this.table = outboxTableOn(dataSource, tableName);
    this.dialect = dialectForType(String(dataSource.options.type));
    this.dialect.guardConnections?.(dataSource);
    this.wakeUpReports = new WakeUpReporter(events);
    // The application's channel or the database's own: one contract, started the same way.
    this.wakeUp = wakeUp === false ? undefined : (wakeUp ?? this.dialect.wakeUpChannel?.(dataSource, this.table));
    this.wakeUp?.start(this.wakeUpReports);
    this.executor = createSqlExecutor(dataSource, this.dialect, this.dialect.connectionGate?.(dataSource));
    this.commits = new CommitWatcher(this.table.path, events, this.wakeUp);
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
   * — for ever on MySQL/MariaDB. Nothing can use them any more, so they are closed here.
   */
  private async closeRefused(): Promise<void> {
    await this.wakeUp?.close().catch(() => undefined);
    if (this.dataSource.isInitialized) await this.dataSource.destroy().catch(() => undefined);
  }

  private runIn(manager: EntityManager, statement: Statement): Promise<StatementResult> {
    return queryOn(manager.queryRunner!, statement);
  }

  /**
   * Inserts events in the caller's transaction. Dedupe keys are checked before anything is written,
   * so a conflict leaves the table as it was.
   */
  async insert(manager: EntityManager, events: ValidatedEvent[]): Promise<PublishResult[]> {
    // Within one call, a repeated dedupe key stands for its first occurrence.
    const firstIndex = new Map<string, number>();
    events.forEach((event, index) => {
      if (event.dedupeKey === null) return;
      const first = firstIndex.get(event.dedupeKey);
      if (first === undefined) firstIndex.set(event.dedupeKey, index);
      else if (!sameContent(events[first], event)) {
        throw new OutboxDedupeConflictError(event.dedupeKey, '(earlier in the same publishMany call)');
      }
    });
    const rows = events.flatMap((event, index) =>
      event.dedupeKey !== null && firstIndex.get(event.dedupeKey) !== index ? [] : [{ index, id: uuidv7(), event }],
    );

    const results = new Array<PublishResult>(events.length);
    const existing = await this.findByDedupeKeys(manager, [...firstIndex.keys()]);
    const fresh = rows.filter((row) => {
      const found = row.event.dedupeKey === null ? undefined : existing.get(row.event.dedupeKey);
      if (found) results[row.index] = this.resolveDuplicate(found, row.event);
      return !found;
    });

    const runner = manager.queryRunner!;
    const published = this.commits.published(runner);
    for (const statement of insertStatements(fresh, this.dialect, this.table)) await this.runIn(manager, statement);

    // A concurrent transaction may have committed the same dedupe key between the check and the
    // insert; ON CONFLICT DO NOTHING then skipped our row, so resolve it against the winner.
    const keyed = fresh.filter((row) => row.event.dedupeKey !== null);
    const winners = keyed.length
      ? await this.findByDedupeKeys(
          manager,
          keyed.map((r) => r.event.dedupeKey!),
          true,
        )
      : new Map<string, StoredEvent>();
    for (const row of fresh) {
      const key = row.event.dedupeKey;
      if (key === null) {
        results[row.index] = { id: row.id, inserted: true };
        continue;
      }
      // Our row or the one that won the key: neither found means the unique index took the key for
      // another, which the read-back by this exact key cannot see. Never report a row not written.
      const winner = winners.get(key);
      if (!winner) throw keyNotStored(key, [...winners.values()]);
      results[row.index] =
        winner.id === row.id ? { id: row.id, inserted: true } : this.resolveDuplicate(winner, row.event);
    }
    events.forEach((event, index) => {
      if (!results[index]) results[index] = { id: results[firstIndex.get(event.dedupeKey!)!].id, inserted: false };
    });
    // Collected only while someone listens: the `published` event is built from it at the commit.
    if (this.events.observed) {
      const depth = transactionDepth(runner);
      for (const row of fresh) {
        if (results[row.index].id === row.id) published.push({ id: row.id, topic: row.event.topic, depth });
      }
    }
    return results;
  }

  private resolveDuplicate(stored: StoredEvent, event: ValidatedEvent): PublishResult {
    if (!sameStored(stored, event)) throw new OutboxDedupeConflictError(event.dedupeKey!, stored.id);
    return { id: stored.id, inserted: false };
  }

  private async findByDedupeKeys(
    manager: EntityManager,
    keys: string[],
    latest = false,
  ): Promise<Map<string, StoredEvent>> {
    const found = new Map<string, StoredEvent>();
    if (keys.length === 0) return found;
    const perStatement = this.dialect.maxParameters - 1;
    for (let i = 0; i < keys.length; i += perStatement) {
      const { rows } = await this.runIn(
        manager,
        this.dialect.selectByDedupeKeys(this.table, keys.slice(i, i + perStatement), latest),
      );
      for (const row of rows) {
        const event = this.dialect.decode(row);
        found.set(event.dedupeKey!, event);
      }
    }
    return found;
  }

  async claim(args: Omit<ClaimArgs, 'token'>): Promise<ClaimResult> {
    const token = randomUUID();
    const rows = await this.dialect.claim(this.executor, this.table, { ...args, token });
    const claim: ClaimResult = { token, events: [], deadLettered: [], undecodable: [] };
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
          error: describeError(error),
          deadLettered: row.status === 'dead',
        });
        continue;
      }
      if (event.status === 'pending') claim.events.push(event);
      else if (event.status === 'dead') claim.deadLettered.push(event);
    }
    claim.events.sort(byDueTime);
    return claim;
  }

  /** Acknowledges a batch in one statement; returns how many `token` still held (the rest lost their lease). */
  async acknowledge(ids: string[], token: string): Promise<number> {
    if (ids.length === 0) return 0;
    return (await this.executor.run(acknowledgeStatement(this.dialect.flavor, this.table, ids, token))).affected;
  }

  /** Each returns false when the token no longer owns a live lease: nothing was changed. */
  async fail(id: string, token: string, update: FailureUpdate): Promise<boolean> {
    return (await this.executor.run(failStatement(this.dialect.flavor, this.table, id, token, update))).affected === 1;
  }

  async release(id: string, token: string, uncount: boolean): Promise<boolean> {
    return (await this.releaseMany([id], token, uncount)) === 1;
  }

  /** Gives claimed events back in one statement; returns how many `token` still held. */
  async releaseMany(ids: string[], token: string, uncount: boolean): Promise<number> {
    if (ids.length === 0) return 0;
    return (await this.executor.run(releaseStatement(this.dialect.flavor, this.table, ids, token, uncount))).affected;
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
