import { type DynamicModule, Module, type ModuleMetadata } from '@nestjs/common';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import { OUTBOX_ADMIN_OPTIONS } from './admin-constants';
import { createAdminController } from './admin.controller';
import {
  ADMIN_ACCESS_KEYS,
  ADMIN_BEHAVIOUR_KEYS,
  resolveAdminAccess,
  resolveAdminBehaviour,
  resolveAdminOptions,
  type OutboxAdminAccessOptions,
  type OutboxAdminBehaviour,
  type OutboxAdminModuleOptions,
  type ResolvedAdminAccess,
} from './admin-options';
import { OutboxAdminService } from './outbox-admin.service';

/**
 * `OutboxAdminModule.forRootAsync()`: where the page is and who may reach it, given here (they shape its
 * routes), and what it does from a factory (e.g. `readOnly` from ConfigService).
 */
export interface OutboxAdminModuleAsyncOptions extends OutboxAdminAccessOptions, Pick<ModuleMetadata, 'imports'> {
  inject?: Array<string | symbol | (abstract new (...args: never[]) => unknown) | (new (...args: never[]) => unknown)>;
  useFactory: (...args: never[]) => OutboxAdminBehaviour | Promise<OutboxAdminBehaviour>;
}

function module(access: ResolvedAdminAccess, imports: ModuleMetadata['imports'], options: DynamicModule['providers']) {
  const guards = access.canActivate ? [...access.guards, { canActivate: access.canActivate }] : access.guards;
  return {
    module: OutboxAdminModule,
    imports: imports ?? [],
    controllers: [createAdminController(access.path, guards)],
    providers: [...(options ?? []), OutboxAdminService],
    exports: [OutboxAdminService],
  };
}

/**
 * The admin page and its JSON API, on the application's own HTTP adapter, behind the application's
 * guards: a face on `OutboxOperations`. Needs `OutboxModule` (global by default, else in `imports`) and
 * the audit table (`OutboxAdminMigrations`). Refuses to be declared without a guard unless told
 * `unsafeAllowAnonymous: true`.
 */
@Module({})
export class OutboxAdminModule {
  /** Checks the options at once: a bad value, or no guard, throws an `OutboxConfigurationError` from this call. */
  static forRoot(options: OutboxAdminModuleOptions): DynamicModule {
    const { access, behaviour } = resolveAdminOptions(options);
    return module(access, [], [{ provide: OUTBOX_ADMIN_OPTIONS, useValue: behaviour }]);
  }

  static forRootAsync(options: OutboxAdminModuleAsyncOptions): DynamicModule {
    const { imports, inject, useFactory, ...access } = options ?? ({} as OutboxAdminModuleAsyncOptions);
    if (typeof useFactory !== 'function') {
      throw new OutboxConfigurationError('admin.useFactory', "forRootAsync() needs a factory of the page's options");
    }
    return module(resolveAdminAccess(access, ADMIN_ACCESS_KEYS), imports, [
      {
        provide: OUTBOX_ADMIN_OPTIONS,
        inject: inject ?? [],
        useFactory: async (...args: never[]) => resolveAdminBehaviour(await useFactory(...args), ADMIN_BEHAVIOUR_KEYS),
      },
    ]);
  }
}
