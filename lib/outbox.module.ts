import { type DynamicModule, Module, type Provider } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import {
  DEFAULT_TABLE_NAME,
  OUTBOX_ERROR_TEXT,
  OUTBOX_EXTRAS,
  OUTBOX_OPTIONS,
  OUTBOX_RAW_OPTIONS,
  OUTBOX_RESOLVED_OPTIONS,
} from './outbox.constants';
import {
  OUTBOX_ASYNC_OPTIONS_TYPE,
  OUTBOX_OPTIONS_TYPE,
  OutboxConfigurableModuleClass,
} from './outbox.module-definition';
import { resolveAsyncOutboxOptions, resolveOutboxOptions, type ResolvedOutboxOptions } from './outbox.options';
import { validateTableName } from './schema/table-name';
import type { OutboxModuleExtras, OutboxModuleOptions } from './interfaces/outbox-options.interface';
import { DeliveryTargets } from './delivery/delivery-targets';
import { OutboxExplorer } from './delivery/outbox.explorer';
import { OutboxService } from './publishing/outbox.service';
import { OutboxOperations } from './operations/outbox-operations.service';
import { OutboxWorker } from './delivery/outbox.worker';
import { OutboxEvents } from './events/outbox-events';
import { TransportRegistry } from './transports/transport-registry';
import { OutboxHealthIndicator } from './observability/outbox-health.indicator';
import { OutboxPrometheusMetrics } from './observability/prometheus-metrics';
import { OutboxOpenTelemetryMetrics } from './observability/opentelemetry-metrics';
import { resolvingOrClosing, StartRefusal } from './store/start-refusal';

/** The module the builder made, with the provider of its resolved options. */
function withResolvedOptions(module: DynamicModule, resolved: Provider): DynamicModule {
  return { ...module, providers: [...(module.providers ?? []), resolved] };
}

/**
 * The transactional outbox. `OutboxModule.forRoot(options)` or `forRootAsync({ useFactory, inject })`;
 * requires `TypeOrmModule.forRoot()` and, for the ambient transaction, `ClsModule` with
 * `ClsPluginTransactional` and the TypeORM adapter.
 */
@Module({
  imports: [DiscoveryModule],
  providers: [
    // A factory, not useExisting: Nest hands consumers of an alias what it points to, even once
    // OutboxTesting.override() has replaced it.
    {
      provide: OUTBOX_OPTIONS,
      inject: [OUTBOX_RESOLVED_OPTIONS],
      useFactory: (options: ResolvedOutboxOptions) => options,
    },
    // The one path of this outbox's error texts, made when its options were resolved.
    {
      provide: OUTBOX_ERROR_TEXT,
      inject: [OUTBOX_RESOLVED_OPTIONS],
      useFactory: (options: ResolvedOutboxOptions) => options.errorText,
    },
    {
      provide: TransportRegistry,
      inject: [OUTBOX_OPTIONS],
      useFactory: (options: ResolvedOutboxOptions) => new TransportRegistry(options.transports, options.errorText),
    },
    DeliveryTargets,
    OutboxService,
    OutboxOperations,
    OutboxExplorer,
    OutboxWorker,
    OutboxEvents,
    OutboxHealthIndicator,
    OutboxPrometheusMetrics,
    OutboxOpenTelemetryMetrics,
    StartRefusal,
  ],
  exports: [OutboxService, OutboxOperations, OutboxWorker, OutboxEvents, OutboxHealthIndicator],
})
export class OutboxModule extends OutboxConfigurableModuleClass {
  /**
   * Checks the options at once, before anything connects: a bad value throws an
   * `OutboxConfigurationError` from this call, where the module is declared. The module keeps what
   * this resolved.
   */
  static override forRoot(options: typeof OUTBOX_OPTIONS_TYPE = {}): DynamicModule {
    const { isGlobal: _isGlobal, ...moduleOptions } = options ?? {};
    const resolved = resolveOutboxOptions(moduleOptions);
    return withResolvedOptions(super.forRoot(options), { provide: OUTBOX_RESOLVED_OPTIONS, useValue: resolved });
  }

  /**
   * Checks the table name at once, as `forRoot` does; the other options when Nest runs the factory,
   * which resolves them with the declared extras.
   */
  static override forRootAsync(options: typeof OUTBOX_ASYNC_OPTIONS_TYPE): DynamicModule {
    validateTableName(options.tableName ?? DEFAULT_TABLE_NAME);
    // The DataSource is injected so that a refused option can close it: TypeORM has opened it by then.
    const declared = options.dataSource instanceof DataSource ? options.dataSource : undefined;
    const named = typeof options.dataSource === 'string' ? options.dataSource : undefined;
    return withResolvedOptions(super.forRootAsync(options), {
      provide: OUTBOX_RESOLVED_OPTIONS,
      inject: [OUTBOX_RAW_OPTIONS, OUTBOX_EXTRAS, ...(declared ? [] : [getDataSourceToken(named)])],
      useFactory: (raw: OutboxModuleOptions | undefined, extras: OutboxModuleExtras, injected?: DataSource) =>
        resolvingOrClosing(
          () => resolveAsyncOutboxOptions(raw, extras),
          raw?.dataSource instanceof DataSource ? raw.dataSource : (declared ?? injected),
        ),
    });
  }
}
