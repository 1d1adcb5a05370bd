import { type DynamicModule, Module } from '@nestjs/common';
import { ClsPluginTransactional } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { getDataSourceToken, TypeOrmModule, type TypeOrmModuleOptions } from '@nestjs/typeorm';
import { ClsModule } from 'nestjs-cls';
import { OutboxModule } from '../lib';
import { NotificationsModule } from './notifications/notifications.module';
import { OrdersModule } from './orders/orders.module';
import { OutboxController } from './outbox.controller';

@Module({})
export class AppModule {
  /** `database` comes from `databaseOptions()`, checked in main.ts before Nest starts. */
  static forRoot(database: TypeOrmModuleOptions): DynamicModule {
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
        // Short delays so the retry of the flaky handler shows within a second.
        OutboxModule.forRoot({
          worker: { pollIntervalMs: 200 },
          retry: { initialDelayMs: 200, maxDelayMs: 2000 },
        }),
        OrdersModule,
        NotificationsModule,
      ],
      controllers: [OutboxController],
    };
  }
}
