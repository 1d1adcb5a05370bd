import { Injectable } from '@nestjs/common';
import { OutboxHandler, OutboxService, type OutboxMessage } from '../../../lib';
import { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { sqliteBackends } from '../../fixtures/backends';
import { deferred, eventually } from '../../fixtures/eventually';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Chain {
  delivered: OutboxMessage[] = [];
  constructor(
    private readonly outbox: OutboxService,
    private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
  ) {}

  @OutboxHandler('order.placed')
  async onPlaced(m: OutboxMessage<{ n: number }>) {
    this.delivered.push(m);
    // A handler that opens its own transaction while the worker and the application are busy.
    if (m.payload.n % 5 === 0) {
      await this.txHost.withTransaction(() => this.outbox.publish('order.followup', { n: m.payload.n }));
    }
  }

  @OutboxHandler('order.followup')
  onFollowup(m: OutboxMessage) {
    this.delivered.push(m);
  }
}

/**
 * TypeORM's SQLite driver runs everything on one connection. The application's transactions, the
 * handlers' transactions and the worker's statements must share it without "cannot start a
 * transaction within a transaction", SQLITE_BUSY, or a worker statement landing inside an
 * application transaction (which could deliver an event that is then rolled back).
 */
describe.each(sqliteBackends())('SQLite (%s): one connection shared by the application and the worker', (backend) => {
  let app: TestApp;
  afterEach(() => app.dispose());

  it('runs concurrent application transactions while the worker drains, with no error and no phantom event', async () => {
    app = await createTestApp({
      backend,
      providers: [Chain],
      outbox: { worker: { enabled: true, pollIntervalMs: 10, batchSize: 7, concurrency: 4 } },
    });
    const chain = app.module.get(Chain);
    const insert = `INSERT INTO "${app.ordersTable}" ("id", "note") VALUES (?, ?)`;

    const requests = Array.from({ length: 60 }, async (_, n) => {
      const body = async () => {
        const manager = app.txHost.tx;
        await manager.query(insert, [`o-${n}`, 'placed']);
        await manager.query(`SELECT count(*) FROM "${app.ordersTable}"`);
        await app.outbox.publish('order.placed', { n });
        await manager.query(`UPDATE "${app.ordersTable}" SET "note" = 'published' WHERE "id" = ?`, [`o-${n}`]);
        if (n % 4 === 3) throw new Error(`rollback ${n}`);
      };
      // Three ways applications open transactions: CLS, dataSource.transaction, and a query runner.
      if (n % 3 === 0) return app.txHost.withTransaction(body);
      if (n % 3 === 1) {
        return app.dataSource.transaction(async (manager) => {
          await manager.query(insert, [`o-${n}`, 'placed']);
          await app.outbox.publish('order.placed', { n }, { manager });
          if (n % 4 === 3) throw new Error(`rollback ${n}`);
        });
      }
      const runner = app.dataSource.createQueryRunner();
      await runner.startTransaction();
      try {
        await runner.query(insert, [`o-${n}`, 'placed']);
        await app.outbox.publish('order.placed', { n }, { manager: runner.manager });
        if (n % 4 === 3) throw new Error(`rollback ${n}`);
        await runner.commitTransaction();
      } catch (error) {
        await runner.rollbackTransaction();
        throw error;
      }
    });
    const outcomes = await Promise.allSettled(requests);

    const failures = outcomes.flatMap((o, n) => (o.status === 'rejected' ? [[n, String(o.reason)]] : []));
    // Only the deliberate rollbacks failed: nothing nested, nothing busy.
    expect(failures.filter(([n, reason]) => reason !== `Error: rollback ${n}`)).toEqual([]);
    const committed = outcomes.flatMap((o, n) => (o.status === 'fulfilled' ? [n] : []));
    expect(committed).toHaveLength(45);

    const followups = committed.filter((n) => n % 5 === 0).length;
    await eventually(
      async () => (await app.outbox.counts()).delivered === committed.length + followups,
      20_000,
      'every committed event delivered',
    );
    const placed = chain.delivered.filter((m) => m.topic === 'order.placed').map((m) => (m.payload as { n: number }).n);
    expect(placed.sort((a, b) => a - b)).toEqual(committed);
    const rows = await outboxRows(app);
    expect(rows.every((r) => r.status === 'delivered' && r.attempts === 1)).toBe(true);
    expect(app.logger.matching(/failed|rejected/)).toEqual([]);
  });

  it('nests a transaction in one begun on a query runner as a savepoint, without waiting for itself', async () => {
    app = await createTestApp({ backend });
    const insert = `INSERT INTO "${app.ordersTable}" ("id", "note") VALUES (?, ?)`;
    const runner = app.dataSource.createQueryRunner();
    await runner.startTransaction();
    try {
      await runner.query(insert, ['outer', 'runner']);
      await runner.manager.transaction(async (inner) => {
        await inner.query(insert, ['inner', 'savepoint']);
        await app.outbox.publish('order.placed', { n: 1 }, { manager: inner });
      });
      await runner.commitTransaction();
    } finally {
      await runner.release();
    }
    const orders = await app.raw.query<{ id: string }>(`SELECT "id" FROM "${app.ordersTable}" ORDER BY "id"`);
    expect(orders.map((o) => o.id)).toEqual(['inner', 'outer']);
    expect(await outboxRows(app)).toHaveLength(1);
  });

  it('makes a transaction started from the context of an earlier, finished one wait for the one open now', async () => {
    app = await createTestApp({ backend });
    const insert = `INSERT INTO "${app.ordersTable}" ("id", "note") VALUES (?, ?)`;
    const go = deferred();
    let later: Promise<unknown> | undefined;
    await app.dataSource.transaction(() => {
      // Fire and forget: the continuation keeps this transaction's async context after its commit.
      later = go.promise.then(() => app.dataSource.transaction((manager) => manager.query(insert, ['later', 'own'])));
      return Promise.resolve();
    });
    const runner = app.dataSource.createQueryRunner();
    await runner.startTransaction();
    await runner.query(insert, ['runner', 'rolled back']);
    go.resolve();
    // Real I/O turns in which the later transaction could (wrongly) run inside the runner's.
    for (let i = 0; i < 3; i++) await app.raw.query('SELECT 1');
    await runner.rollbackTransaction();
    await runner.release();
    await later;
    const orders = await app.raw.query<{ id: string }>(`SELECT "id" FROM "${app.ordersTable}"`);
    expect(orders.map((o) => o.id)).toEqual(['later']);
  });
});
