import { Injectable } from '@nestjs/common';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { ClsPluginTransactional, getTransactionHostToken, type TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { ClsModule } from 'nestjs-cls';
import { OutboxHandler, OutboxTransactionRequiredError, type OutboxMessage } from '../../../lib';
import { backends } from '../../fixtures/backends';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';

/**
 * How publish() finds the transaction when `@nestjs-cls/transactional` is absent or registered under
 * a connection name. In a file of its own: `TransactionHost` keeps its instances in a static map, which
 * every other suite fills with the default connection's host. Jest gives each file fresh modules, so
 * here the map starts empty; the tests run in order and each says what the map holds by then.
 */

@Injectable()
class Delivered {
  ids: string[] = [];

  @OutboxHandler('order.placed')
  placed(m: OutboxMessage) {
    this.ids.push(m.id);
  }
}

const namedCls = (connectionName: string) =>
  ClsModule.forRoot({
    global: true,
    plugins: [
      new ClsPluginTransactional({
        connectionName,
        imports: [TypeOrmModule],
        adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken() }),
      }),
    ],
  });

describe.each(backends())('publishing with and without the CLS transaction plugin on %s', (backend) => {
  let app: TestApp;
  afterEach(() => app?.dispose());

  it('without ClsPluginTransactional: refuses a publish with no manager, and takes one with { manager }', async () => {
    app = await createTestApp({ backend, cls: false, providers: [Delivered] });
    await expect(app.outbox.publish('order.placed', { n: 1 })).rejects.toThrow(OutboxTransactionRequiredError);
    await expect(app.dataSource.transaction(() => app.outbox.publish('order.placed', { n: 1 }))).rejects.toThrow(
      OutboxTransactionRequiredError,
    );
    expect(await outboxRows(app)).toHaveLength(0);

    const { id } = await app.dataSource.transaction((manager) =>
      app.outbox.publish('order.placed', { n: 2 }, { manager }),
    );
    expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
    expect(app.module.get(Delivered).ids).toEqual([id]);
  });

  it('joins the transaction of the connection named by `transactionConnectionName`, and only that one', async () => {
    // Only a host named "orders" exists (none for the default connection name).
    app = await createTestApp({ backend, cls: false, imports: [namedCls('orders')], providers: [Delivered] });
    const orders = app.module.get<TransactionHost<TransactionalAdapterTypeOrm>>(getTransactionHostToken('orders'));
    await expect(orders.withTransaction(() => app.outbox.publish('order.placed', { n: 1 }))).rejects.toThrow(
      OutboxTransactionRequiredError,
    );
    expect(await outboxRows(app)).toHaveLength(0);
    await app.dispose();

    app = await createTestApp({
      backend,
      cls: false,
      imports: [namedCls('orders')],
      providers: [Delivered],
      outbox: { transactionConnectionName: 'orders' },
    });
    const joined = app.module.get<TransactionHost<TransactionalAdapterTypeOrm>>(getTransactionHostToken('orders'));
    await expect(
      joined.withTransaction(async () => {
        await app.outbox.publish('order.placed', { n: 2 });
        throw new Error('the business change failed');
      }),
    ).rejects.toThrow('the business change failed');
    expect(await outboxRows(app)).toHaveLength(0);
    const { id } = await joined.withTransaction(() => app.outbox.publish('order.placed', { n: 3 }));
    expect(await app.worker.drain()).toMatchObject({ delivered: 1 });
    expect(app.module.get(Delivered).ids).toEqual([id]);
  });
});
