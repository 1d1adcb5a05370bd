import { type DynamicModule, Module } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { DataSource } from 'typeorm';
import { OUTBOX_EXTRAS, OUTBOX_OPTIONS, OUTBOX_RAW_OPTIONS } from './outbox.constants';
import { OutboxConfigurationError } from './errors/outbox.errors';
import { OUTBOX_OPTIONS_TYPE, OutboxConfigurableModuleClass, type OutboxModuleExtras } from './outbox.module-definition';
import { resolveOutboxOptions, type OutboxModuleOptions, type ResolvedOutboxOptions } from './outbox.options';
import { DeliveryTargets } from './delivery/delivery-targets';
import { OutboxExplorer } from './delivery/outbox.explorer';
import { OutboxService } from './publishing/outbox.service';
import { OutboxOperations } from './operations/outbox-operations.service';
import { OutboxWorker } from './delivery/outbox.worker';
import { OutboxEvents } from './events/outbox-events';
import { TransportRegistry } from './transports/transport-registry';

/**
 * Table and data source shape the module's imports, so forRootAsync takes them beside `useFactory`.
 * A factory may still return a DataSource instance, or repeat the declared values; anything else
 * would silently disagree with the registered entity and is refused.
 */
function mergeExtras(raw: OutboxModuleOptions | undefined, extras: OutboxModuleExtras): OutboxModuleOptions {
  const merged: OutboxModuleOptions = { ...(raw ?? {}) };
  for (const key of ['tableName', 'dataSource'] as const) {
    const declared = extras[key];
    const returned = merged[key];
    const returnedInstance = key === 'dataSource' && returned instanceof DataSource && declared === undefined;
    if (returned !== undefined && returned !== declared && !returnedInstance) {
      throw new OutboxConfigurationError(
        key,
        `with forRootAsync, declare ${key} beside useFactory (OutboxModule.forRootAsync({ ${key}, useFactory })), ` +
          'not in the object the factory returns: it decides which entity and data source the module imports',
      );
    }
    if (declared !== undefined) (merged as Record<string, unknown>)[key] = declared;
  }
  return merged;
}

/** The module's options as its providers see them: the raw options with the declared extras, resolved. */
export function resolveModuleOptions(raw: OutboxModuleOptions | undefined, extras: OutboxModuleExtras): ResolvedOutboxOptions {
  return resolveOutboxOptions(mergeExtras(raw, extras));
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
      useFactory: resolveModuleOptions,
    },
    {
      provide: TransportRegistry,
      inject: [OUTBOX_OPTIONS],
      useFactory: (options: ResolvedOutboxOptions) => new TransportRegistry(options.transports),
    },
    DeliveryTargets,
    OutboxService,
    OutboxOperations,
    OutboxExplorer,
    OutboxWorker,
    OutboxEvents,
  ],
  exports: [OutboxService, OutboxOperations, OutboxWorker, OutboxEvents],
})
export class OutboxModule extends OutboxConfigurableModuleClass {
  /**
   * Checks the options at once, before anything connects: a bad value throws an
   * `OutboxConfigurationError` from this call, where the module is declared. (`forRootAsync` checks
   * what its factory returns, as soon as Nest runs it.)
   */
  static override forRoot(options: typeof OUTBOX_OPTIONS_TYPE = {}): DynamicModule {
    const { isGlobal: _isGlobal, ...moduleOptions } = options ?? {};
    resolveOutboxOptions(moduleOptions);
    return super.forRoot(options);
  }
}
