import { type DynamicModule, Module } from '@nestjs/common';
import { ClsPluginTransactional } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { getDataSourceToken, TypeOrmModule, type TypeOrmModuleOptions } from '@nestjs/typeorm';
import { ClsModule } from 'nestjs-cls';
import { ClientsModule, type ClientProviderOptions } from '@nestjs/microservices';
import { ClientProxyTransport, OutboxModule, type OutboxClientProxy, type OutboxModuleOptions } from '../lib';
import { ORDERS_BROKER } from './broker.config';
import { NotificationsModule } from './notifications/notifications.module';
import { OrdersModule } from './orders/orders.module';
import { OutboxController } from './outbox.controller';

@Module({})
export class AppModule {
  /**
   * `database` comes from `databaseOptions()` and `broker` from `brokerClient()`, both checked in
   * main.ts before Nest starts.
   */
  static forRoot(database: TypeOrmModuleOptions, broker?: ClientProviderOptions): DynamicModule {
    // Short delays so the retry of the flaky handler shows within a second.
    const outbox: OutboxModuleOptions = {
      worker: { pollIntervalMs: 200 },
      retry: { initialDelayMs: 200, maxDelayMs: 2000 },
    };
    return {
      module: AppModule,
      imports: [
        TypeOrmModule.forRoot(database),
        // The ambient transaction that @Transactional() opens and OutboxService.publish() joins.
        ClsModule.forRoot({
          global: true,
          middleware: { mount: true },
          plugins: [
            new ClsPluginTransactional({
              imports: [TypeOrmModule],
              adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken() }),
            }),
          ],
        }),
        broker
          ? // order.placed also goes to the broker, tracked apart from the in-process handlers.
            OutboxModule.forRootAsync({
              imports: [ClientsModule.register([broker])],
              inject: [ORDERS_BROKER],
              useFactory: (client: OutboxClientProxy) => ({
                ...outbox,
                transports: [new ClientProxyTransport('broker', client)],
                routes: [{ topic: 'order.placed', transport: 'broker' }],
              }),
            })
          : OutboxModule.forRoot(outbox),
        OrdersModule,
        NotificationsModule,
      ],
      controllers: [OutboxController],
    };
  }
}
