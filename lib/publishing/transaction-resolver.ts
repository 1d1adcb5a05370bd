import { TransactionHost } from '@nestjs-cls/transactional';
import type { DataSource, EntityManager } from 'typeorm';
import { OutboxTransactionRequiredError } from '../errors/outbox.errors';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';

type ResolutionOptions = Pick<ResolvedOutboxOptions, 'transactionResolver' | 'transactionConnectionName'>;

/**
 * The caller's transaction, which a publish must join: the `{ manager }` passed explicitly, else the
 * configured resolver's, else the ambient nestjs-cls one. Throws `OutboxTransactionRequiredError` when
 * there is none, when it is not inside a transaction, or when it belongs to another DataSource than the
 * outbox table (the event would commit apart from the table it is read from).
 */
export function transactionalManager(
  explicit: EntityManager | undefined,
  options: ResolutionOptions,
  outboxDataSource: DataSource,
): EntityManager {
  const manager = explicit ?? ambientManager(options);
  if (!manager) throw new OutboxTransactionRequiredError();
  if (!manager.queryRunner?.isTransactionActive) {
    throw new OutboxTransactionRequiredError(
      explicit
        ? 'the EntityManager passed as { manager } is not inside a transaction (dataSource.manager never is)'
        : 'the transaction resolver returned an EntityManager that is not inside a transaction',
    );
  }
  if (!sameDataSource(manager.connection, outboxDataSource)) {
    throw new OutboxTransactionRequiredError(
      'the active transaction belongs to another DataSource than the outbox table; set the `dataSource` option',
    );
  }
  return manager;
}

function ambientManager(options: ResolutionOptions): EntityManager | undefined {
  if (options.transactionResolver) return options.transactionResolver() ?? undefined;
  let host: TransactionHost | undefined;
  try {
    host = TransactionHost.getInstance(options.transactionConnectionName);
  } catch {
    return undefined; // ClsPluginTransactional is not registered: only { manager } can work.
  }
  // Never `host.tx` without an active transaction: that is the non-transactional fallback manager.
  return host.isTransactionActive() ? host.tx : undefined;
}

/**
 * Whether two references are one DataSource. Not by identity alone: an instrumentation may hand the app's
 * providers out wrapped in proxies (`@nestjs/observe`, which the current `nest new` sets up on NestJS 12,
 * wraps every provider, the DataSource too), while a transaction's manager holds the DataSource itself.
 * Its own EntityManager, made once in its constructor, is the same object through any such proxy.
 */
export function sameDataSource(a: DataSource, b: DataSource): boolean {
  return a === b || a.manager === b.manager;
}
