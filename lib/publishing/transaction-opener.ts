import { Propagation, TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { OutboxIsolationLevel } from '../interfaces/outbox-message.interface';
import { sameDataSource } from './transaction-resolver';

type OpenerOptions = Pick<ResolvedOutboxOptions, 'transactionResolver' | 'transactionConnectionName'>;

/**
 * Opens a transaction of its own on the outbox's DataSource, for work that must commit with the
 * record of its outcome (a transactional handler). Through nestjs-cls when its transactional plugin is
 * registered — so `@Transactional()` methods, `TransactionHost.tx` and `OutboxService.publish()` called
 * from the work join it — else on the DataSource, the transaction's manager handed to the work.
 */
export class TransactionOpener {
  /**
   * `resolvedHost`: the plugin's host as the application's injector resolved it, when the caller has it
   * (`undefined`: none is registered) — else the last one registered in the process is taken.
   */
  constructor(
    private readonly options: OpenerOptions,
    private readonly dataSource: DataSource,
    private readonly resolvedHost?: { host: TransactionHost<TransactionalAdapterTypeOrm> | undefined },
  ) {}

  run<T>(isolation: OutboxIsolationLevel | undefined, work: (manager: EntityManager) => Promise<T>): Promise<T> {
    const host = this.host();
    if (!host) {
      return isolation ? this.dataSource.transaction(isolation, work) : this.dataSource.transaction(work);
    }
    const options = isolation ? { isolationLevel: isolation } : undefined;
    // A new transaction whatever the context: a handler's writes never join a transaction it was not given.
    return host.withTransaction(Propagation.RequiresNew, options as { isolationLevel: OutboxIsolationLevel }, () => {
      const manager = host.tx;
      if (!sameDataSource(manager.connection, this.dataSource)) {
        throw new OutboxConfigurationError(
          'transactional',
          "nestjs-cls's transactional plugin opens transactions on another DataSource than the outbox table's: " +
            'set transactionConnectionName to the plugin registered for that DataSource',
        );
      }
      return work(manager);
    });
  }

  /** nestjs-cls's host of transactions, unless the app resolves its transactions its own way or has none. */
  private host(): TransactionHost<TransactionalAdapterTypeOrm> | undefined {
    if (this.options.transactionResolver) return undefined;
    if (this.resolvedHost) return this.resolvedHost.host;
    try {
      return TransactionHost.getInstance<TransactionalAdapterTypeOrm>(this.options.transactionConnectionName);
    } catch {
      return undefined;
    }
  }
}
