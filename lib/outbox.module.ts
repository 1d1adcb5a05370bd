import { Module } from '@nestjs/common';
import { DiscoveryModule, ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { OUTBOX_EXTRAS, OUTBOX_OPTIONS, OUTBOX_RAW_OPTIONS, OUTBOX_STORE } from './outbox.constants';
import { OutboxConfigurationError } from './errors/outbox.errors';
import { OutboxConfigurableModuleClass, type OutboxModuleExtras } from './outbox.module-definition';
import { resolveOutboxOptions, type OutboxModuleOptions, type ResolvedOutboxOptions } from './outbox.options';
import { OutboxExplorer } from './outbox.explorer';
import { OutboxService } from './outbox.service';
import { OutboxStore } from './outbox.store';
import { OutboxWorker } from './outbox.worker';

function mergeExtras(raw: OutboxModuleOptions | undefined, extras: OutboxModuleExtras): OutboxModuleOptions {
  const merged: OutboxModuleOptions = { ...(raw ?? {}) };
  for (const key of ['tableName', 'dataSource'] as const) {
    const declared = extras[key];
    if (declared === undefined) continue;
    if (merged[key] !== undefined && merged[key] !== declared) {
      throw new OutboxConfigurationError(
        key,
        `forRootAsync declared ${key} beside useFactory and the factory returned a different one; ` +
          'declare it in one place',
      );
    }
    (merged as Record<string, unknown>)[key] = declared;
  }
  return merged;
}

/**
 * The transactional outbox. `OutboxModule.forRoot(options)` or `forRootAsync({ useFactory, inject })`;
 * requires `TypeOrmModule.forRoot()` and, for the ambient transaction, `ClsModule` with
 * `ClsPluginTransactional` and the TypeORM adapter.
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    {
      provide: OUTBOX_OPTIONS,
      inject: [OUTBOX_RAW_OPTIONS, OUTBOX_EXTRAS],
      useFactory: (raw: OutboxModuleOptions, extras: OutboxModuleExtras) =>
        resolveOutboxOptions(mergeExtras(raw, extras)),
    },
    {
      provide: OUTBOX_STORE,
      inject: [OUTBOX_OPTIONS, ModuleRef],
      useFactory: (options: ResolvedOutboxOptions, moduleRef: ModuleRef) => {
        const dataSource =
          typeof options.dataSource === 'object'
            ? options.dataSource
            : moduleRef.get<DataSource>(getDataSourceToken(options.dataSource), { strict: false });
        return new OutboxStore(dataSource, options.tableName);
      },
    },
    OutboxService,
    OutboxExplorer,
    OutboxWorker,
  ],
  exports: [OutboxService, OutboxWorker],
})
export class OutboxModule extends OutboxConfigurableModuleClass {}
