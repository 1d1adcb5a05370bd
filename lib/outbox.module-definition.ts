import { ConfigurableModuleBuilder } from '@nestjs/common';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import {
  DEFAULT_TABLE_NAME,
  OUTBOX_EXTRAS,
  OUTBOX_OPTIONS,
  OUTBOX_RAW_OPTIONS,
  OUTBOX_STORE,
} from './outbox.constants';
import type {
  OutboxModuleExtras,
  OutboxModuleOptions,
  ResolvedOutboxOptions,
} from './interfaces/outbox-options.interface';
import { createOutboxEntity } from './schema/outbox-event.entity';
import { OutboxStore } from './store/outbox.store';
import { OutboxEvents } from './events/outbox-events';

export type { OutboxModuleExtras } from './interfaces/outbox-options.interface';

export const {
  ConfigurableModuleClass: OutboxConfigurableModuleClass,
  ASYNC_OPTIONS_TYPE: OUTBOX_ASYNC_OPTIONS_TYPE,
  OPTIONS_TYPE: OUTBOX_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<OutboxModuleOptions>({
  moduleName: 'Outbox',
  optionsInjectionToken: OUTBOX_RAW_OPTIONS,
})
  .setClassMethodName('forRoot')
  .setExtras<OutboxModuleExtras>(
    { isGlobal: true, tableName: undefined, dataSource: undefined },
    (definition, extras) => {
      // Checked by forRoot() or forRootAsync() before the builder calls this.
      const tableName = extras.tableName ?? DEFAULT_TABLE_NAME;
      const dataSourceName = typeof extras.dataSource === 'string' ? extras.dataSource : undefined;
      // Registering the entity through forFeature is what makes `autoLoadEntities: true` pick it up.
      const entityImports =
        extras.dataSource instanceof DataSource
          ? []
          : [TypeOrmModule.forFeature([createOutboxEntity(tableName)], dataSourceName)];
      const store =
        extras.dataSource instanceof DataSource
          ? {
              provide: OUTBOX_STORE,
              inject: [OUTBOX_OPTIONS, OutboxEvents],
              useFactory: (options: ResolvedOutboxOptions, events: OutboxEvents) =>
                new OutboxStore(
                  extras.dataSource as DataSource,
                  options.tableName,
                  events,
                  options.wakeUp,
                  options.errorText,
                  options.ordering,
                ),
            }
          : {
              provide: OUTBOX_STORE,
              inject: [OUTBOX_OPTIONS, getDataSourceToken(dataSourceName), OutboxEvents],
              useFactory: (options: ResolvedOutboxOptions, named: DataSource, events: OutboxEvents) =>
                new OutboxStore(
                  options.dataSource instanceof DataSource ? options.dataSource : named,
                  options.tableName,
                  events,
                  options.wakeUp,
                  options.errorText,
                  options.ordering,
                ),
            };
      return {
        ...definition,
        global: extras.isGlobal,
        imports: [...(definition.imports ?? []), ...entityImports],
        providers: [...(definition.providers ?? []), { provide: OUTBOX_EXTRAS, useValue: extras }, store],
        // For the admin page's module (its audit trail sits beside this outbox's table): not in the public API.
        exports: [...(definition.exports ?? []), OUTBOX_STORE, OUTBOX_OPTIONS],
      };
    },
  )
  .build();
