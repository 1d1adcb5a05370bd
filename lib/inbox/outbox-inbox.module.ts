import { type DynamicModule, Module, type ModuleMetadata, type Provider } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import { OUTBOX_INBOX_DATA_SOURCE, OUTBOX_INBOX_OPTIONS } from './inbox-constants';
import { type OutboxInboxModuleOptions, resolveInboxOptions } from './inbox-options';
import { InboxRetention } from './inbox-retention';
import { OutboxInboxInterceptor } from './outbox-inbox.interceptor';
import { OutboxInboxService } from './outbox-inbox.service';

/** `OutboxInboxModule.forRootAsync()`: the options from a factory (e.g. the webhook secret from ConfigService). */
export interface OutboxInboxModuleAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  /** The DataSource's name when it is not the default one: it is injected before the factory runs. */
  dataSource?: string;
  inject?: Array<string | symbol | (abstract new (...args: never[]) => unknown) | (new (...args: never[]) => unknown)>;
  useFactory: (
    ...args: never[]
  ) => Omit<OutboxInboxModuleOptions, 'dataSource'> | Promise<Omit<OutboxInboxModuleOptions, 'dataSource'>>;
}

const PROVIDERS = [OutboxInboxService, InboxRetention, OutboxInboxInterceptor];
const EXPORTS = [OutboxInboxService, OutboxInboxInterceptor, OUTBOX_INBOX_OPTIONS];

function dataSourceProvider(dataSource: DataSource | string | undefined): Provider {
  if (dataSource instanceof DataSource) return { provide: OUTBOX_INBOX_DATA_SOURCE, useValue: dataSource };
  return { provide: OUTBOX_INBOX_DATA_SOURCE, useExisting: getDataSourceToken(dataSource) };
}

/**
 * The inbox of a service that receives the outbox's messages: `OutboxInboxService` and the `@OutboxInbox()`
 * decorator. Global, so the decorator works in every module of the application. Needs
 * `TypeOrmModule.forRoot()` and the inbox table (`OutboxInboxMigrations`); with nestjs-cls's
 * transactional plugin, handlers' `@Transactional()` writes join the inbox's transaction.
 */
@Module({})
export class OutboxInboxModule {
  /** Checks the options at once: a bad value throws an `OutboxConfigurationError` from this call. */
  static forRoot(options: OutboxInboxModuleOptions = {}): DynamicModule {
    const resolved = resolveInboxOptions(options);
    return {
      module: OutboxInboxModule,
      global: true,
      providers: [
        { provide: OUTBOX_INBOX_OPTIONS, useValue: resolved },
        dataSourceProvider(options?.dataSource),
        ...PROVIDERS,
      ],
      exports: EXPORTS,
    };
  }

  static forRootAsync(options: OutboxInboxModuleAsyncOptions): DynamicModule {
    return {
      module: OutboxInboxModule,
      global: true,
      imports: options.imports ?? [],
      providers: [
        {
          provide: OUTBOX_INBOX_OPTIONS,
          inject: options.inject ?? [],
          useFactory: async (...args: never[]) => {
            const given = await options.useFactory(...args);
            if (given && typeof given === 'object' && 'dataSource' in given) {
              throw new OutboxConfigurationError(
                'inbox.dataSource',
                'give it to forRootAsync({ dataSource }) beside useFactory: the DataSource is injected before the factory runs',
              );
            }
            return resolveInboxOptions(given);
          },
        },
        dataSourceProvider(options.dataSource),
        ...PROVIDERS,
      ],
      exports: EXPORTS,
    };
  }
}
