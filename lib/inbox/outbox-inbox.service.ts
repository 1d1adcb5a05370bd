import { AsyncLocalStorage } from 'node:async_hooks';
import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getTransactionHostToken, type TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import { dialectForType } from '../dialects/dialect-for-type';
import type { OutboxDialect, SqlExecutor } from '../dialects/shared/outbox-dialect.interface';
import { outboxTableOn, type OutboxTable } from '../dialects/shared/outbox-table';
import { OutboxInboxMessageError, OutboxTableMissingError } from '../errors/outbox.errors';
import type { OutboxIsolationLevel } from '../interfaces/outbox-message.interface';
import { isolationFor } from '../publishing/isolation';
import { TransactionOpener } from '../publishing/transaction-opener';
import { DEFAULT_INBOX_TABLE_NAME } from '../schema/inbox-migrations';
import { createSqlExecutor, queryOn } from '../store/sql-executor';
import { describeValue } from '../utils/describe-value';
import { CONSUMER_NAME, MESSAGE_ID, OUTBOX_INBOX_DATA_SOURCE, OUTBOX_INBOX_OPTIONS } from './inbox-constants';
import type { ResolvedInboxOptions } from './inbox-options';

/** What `process()` did: ran the work (its result beside), or found the message already processed. */
export type OutboxInboxOutcome<T> = { duplicate: false; result: T } | { duplicate: true };

/**
 * The inbox of a service that receives the outbox's messages: each message id a consumer processed is
 * recorded in the inbox table in the same transaction as the consumer's own writes, so a copy of the
 * message — a broker's redelivery, a webhook's retry — is recognised and skipped.
 */
@Injectable()
export class OutboxInboxService implements OnModuleInit {
  readonly dialect: OutboxDialect;
  readonly table: OutboxTable;
  /** Statements of the inbox's own (start-up check, retention), outside any transaction of the application. */
  readonly executor: SqlExecutor;
  private opener!: TransactionOpener;
  private readonly current = new AsyncLocalStorage<EntityManager>();
  private isolation: OutboxIsolationLevel | undefined;

  constructor(
    @Inject(OUTBOX_INBOX_OPTIONS) private readonly options: ResolvedInboxOptions,
    @Inject(OUTBOX_INBOX_DATA_SOURCE) private readonly dataSource: DataSource,
    private readonly moduleRef: ModuleRef,
  ) {
    this.dialect = dialectForType(String(dataSource.options.type));
    this.table = outboxTableOn(dataSource, options.tableName);
    // SQLite: the application's transactions and these statements take turns on its one connection.
    this.executor = createSqlExecutor(dataSource, this.dialect, this.dialect.connectionGate?.(dataSource));
  }

  /** nestjs-cls's host of transactions of this application, if its transactional plugin is registered. */
  private transactionHost(): TransactionHost<TransactionalAdapterTypeOrm> | undefined {
    try {
      return this.moduleRef.get(getTransactionHostToken(this.options.transactionConnectionName), { strict: false });
    } catch {
      return undefined;
    }
  }

  async onModuleInit(): Promise<void> {
    // The application's own host, not the process's last: two applications may run in one process.
    this.opener = new TransactionOpener(
      { transactionResolver: undefined, transactionConnectionName: this.options.transactionConnectionName },
      this.dataSource,
      { host: this.transactionHost() },
    );
    try {
      this.isolation = isolationFor(this.dialect.name, 'inbox.isolation', this.options.isolation);
      const { rows } = await this.executor.run(this.dialect.schema.tableExists(this.table));
      const found = rows[0]?.found;
      if (found === true || Number(found) > 0) return;
      const migrations =
        this.options.tableName === DEFAULT_INBOX_TABLE_NAME
          ? '...OutboxInboxMigrations'
          : `...createOutboxInboxMigrations('${this.options.tableName}')`;
      throw new OutboxTableMissingError(
        this.table.path,
        `It is the inbox's: add ${migrations} to the DataSource's migrations and run them (migrationsRun: true, or ` +
          'the TypeORM CLI).',
      );
    } catch (error) {
      // Nest runs no shutdown hook after a failed start: an open pool would keep the process alive.
      if (this.dataSource.isInitialized) await this.dataSource.destroy().catch(() => undefined);
      throw error;
    }
  }

  /**
   * Runs `work` once per `(consumer, messageId)`: in one transaction on the inbox's DataSource, it records
   * the id, then runs `work` — unless the id is already recorded, then it skips `work` and resolves
   * `{ duplicate: true }`. If `work` throws, the transaction rolls back, the id included, and the error
   * comes back: the next copy of the message runs it again. A copy that arrives while another one is
   * being processed waits for that transaction, then is a duplicate (or runs, if it rolled back).
   *
   * The transaction is opened through nestjs-cls when its transactional plugin is registered, so
   * `@Transactional()` methods, `TransactionHost.tx` and `OutboxService.publish()` called by `work` join it;
   * `work` also gets its EntityManager, and so does `manager` while it runs.
   *
   * @throws OutboxInboxMessageError when `consumer` or `messageId` is out of shape; nothing is written.
   */
  async process<T>(
    consumer: string,
    messageId: string | undefined,
    work: (manager: EntityManager) => Promise<T> | T,
  ): Promise<OutboxInboxOutcome<T>> {
    validateConsumer(consumer);
    const id = validateMessageId(messageId);
    return this.opener.run(this.isolation, async (manager) => {
      const receipt = this.dialect.inbox.receive(this.table, consumer, id);
      if ((await queryOn(manager.queryRunner!, receipt)).affected !== 1) return { duplicate: true };
      const result = await this.current.run(manager, () => work(manager));
      return { duplicate: false, result };
    });
  }

  /** The EntityManager of the inbox transaction the current code runs in (inside `process()` or an `@OutboxInbox()` handler). */
  get manager(): EntityManager {
    const manager = this.current.getStore();
    if (!manager) {
      throw new Error(
        'OutboxInboxService.manager is read outside an inbox transaction (process() or an @OutboxInbox() handler)',
      );
    }
    return manager;
  }
}

/** Refuses a consumer name the inbox cannot keep. */
export function validateConsumer(consumer: unknown): asserts consumer is string {
  if (typeof consumer !== 'string' || !CONSUMER_NAME.test(consumer)) {
    throw new OutboxInboxMessageError(
      `the consumer name must be 1 to 100 characters of letters, digits, ".", "_", ":" and "-", got ${describeValue(consumer)}`,
    );
  }
}

/** The id as stored (lower case), or an error saying what is wrong with it. */
function validateMessageId(id: unknown): string {
  if (id === undefined || id === null || id === '') {
    throw new OutboxInboxMessageError(
      'the message carries no outbox message id: it was not sent by the outbox, or through a transport that drops it ' +
        '(see "Exactly once" in the README for where each transport carries it)',
    );
  }
  if (typeof id !== 'string' || !MESSAGE_ID.test(id)) {
    throw new OutboxInboxMessageError(`the message id must be a UUID, got ${describeValue(id)}`);
  }
  return id.toLowerCase();
}
