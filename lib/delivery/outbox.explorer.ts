import { Inject, Injectable, type Logger, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper';
import { DEFAULT_TABLE_NAME, OUTBOX_EXTRAS, OUTBOX_OPTIONS, OUTBOX_STORE } from '../outbox.constants';
import { getOutboxHandlerMetadata } from '../decorators/outbox-handler.decorator';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import type {
  OutboxHandlerFn,
  OutboxHandlerOptions,
  OutboxIsolationLevel,
} from '../interfaces/outbox-message.interface';
import { rejectUnknownOptions, isPlainObject } from '../utils/option-checks';
import type { OutboxStore } from '../store/outbox.store';
import { TransactionOpener } from '../publishing/transaction-opener';
import { isolationFor } from '../publishing/isolation';
import { transactionalTarget } from './transactional-target';
import type { OutboxModuleExtras, ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import { targetPolicy } from './target-policy';
import { validateTopic } from '../utils/topic';
import { aboutEvents } from '../utils/log-record';
import { DeliveryTargets } from './delivery-targets';
import { StartRefusal } from '../store/start-refusal';

const HANDLER_OPTION_KEYS = ['name', 'timeoutMs', 'retry', 'concurrency', 'transactional'];

/**
 * Finds `@OutboxHandler()` methods on providers and controllers once, at module init, checks their
 * options and registers them with the delivery targets.
 */
@Injectable()
export class OutboxExplorer implements OnModuleInit {
  private readonly logger: Logger;
  /** Opens the transactions of transactional handlers. */
  private readonly opener: TransactionOpener;

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    private readonly targets: DeliveryTargets,
    private readonly refusal: StartRefusal,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
  ) {
    this.logger = options.errorText.logger('OutboxExplorer');
    this.opener = new TransactionOpener(options, store.dataSource);
  }

  onModuleInit(): Promise<void> {
    return this.refusal.guard(() => {
      this.refuseSeveralGlobalOutboxes();
      for (const wrapper of this.discovery.getProviders()) this.explore(wrapper, 'provider');
      // Nest apps keep message handlers (@EventPattern) on controllers, so @OutboxHandler may sit there too.
      for (const wrapper of this.discovery.getControllers()) this.explore(wrapper, 'controller');
    });
  }

  private explore(wrapper: InstanceWrapper, kind: 'provider' | 'controller'): void {
    const instance = wrapper.instance as Record<string, unknown> | null | undefined;
    if (!instance || typeof instance !== 'object') return;
    const prototype = Object.getPrototypeOf(instance) as Record<string, unknown> | null;
    if (!prototype) return;
    for (const methodName of this.scanner.getAllMethodNames(prototype)) {
      const entries = getOutboxHandlerMetadata(prototype[methodName]);
      if (entries.length === 0) continue;
      const owner = `${(instance.constructor as { name?: string } | undefined)?.name ?? 'anonymous'}.${methodName}`;
      if (!wrapper.isDependencyTreeStatic()) {
        this.logger.warn(
          `@OutboxHandler on ${owner} is ignored: its ${kind} is request-scoped, and the worker runs outside any request`,
        );
        continue;
      }
      for (const { topic, options } of entries) {
        // The metadata sits on a method, so this is a function of the instance.
        this.register(owner, topic, options, (instance[methodName] as OutboxHandlerFn).bind(instance));
      }
    }
  }

  /**
   * Two global outboxes in one application would both provide `OutboxService` everywhere, and Nest
   * silently resolves it to the last one. Counted per application (discovery sees only its own
   * modules), so several applications in one process are unaffected.
   */
  private refuseSeveralGlobalOutboxes(): void {
    const globals = this.discovery
      .getProviders()
      .filter((wrapper) => wrapper.token === OUTBOX_EXTRAS)
      .map((wrapper) => wrapper.instance as OutboxModuleExtras | undefined)
      .filter((extras) => extras?.isGlobal);
    if (globals.length < 2) return;
    const tables = globals.map((extras) => extras!.tableName ?? DEFAULT_TABLE_NAME).join(', ');
    throw new OutboxConfigurationError(
      'isGlobal',
      `${globals.length} OutboxModules are global in this application (tables ${tables}), and OutboxService would ` +
        'resolve to only one of them. Keep one global; register every other outbox with isGlobal: false in the module ' +
        'that uses it, and inject its OutboxService there',
    );
  }

  /**
   * A handler's `transactional` option: undefined when it is not, else the isolation level its
   * transactions set (see `isolationFor`).
   */
  private transactionalOption(where: string, value: unknown): { isolation?: OutboxIsolationLevel } | undefined {
    if (value === undefined || value === false) return undefined;
    const path = `${where}: transactional`;
    const dialect = this.store.dialect.name;
    if (value === true) return { isolation: isolationFor(dialect, path, undefined) };
    if (!isPlainObject(value)) throw new OutboxConfigurationError(path, 'expected true, false or { isolation }');
    rejectUnknownOptions(path, value, ['isolation'], '.', 'allowed');
    return { isolation: isolationFor(dialect, `${path}.isolation`, (value as { isolation?: unknown }).isolation) };
  }

  private register(owner: string, topic: string, options: OutboxHandlerOptions, invoke: OutboxHandlerFn): void {
    const where = `@OutboxHandler('${topic}') on ${owner}`;
    try {
      validateTopic(topic);
    } catch (error) {
      throw new OutboxConfigurationError(where, (error as Error).message);
    }
    if (typeof options !== 'object' || options === null) {
      throw new OutboxConfigurationError(where, 'options must be an object');
    }
    rejectUnknownOptions(where, options, HANDLER_OPTION_KEYS, ': ', 'allowed');
    const policy = targetPolicy((key) => `${where}: ${key}`, options, this.options.worker, this.options.retry);
    const name = options.name ?? owner;
    if (typeof name !== 'string' || name.length === 0 || name.length > 200) {
      throw new OutboxConfigurationError(`${where}: name`, 'expected a string of 1 to 200 characters');
    }
    if (this.targets.hasHandler(topic, name)) {
      throw new OutboxConfigurationError(
        where,
        `a handler named "${name}" is already registered for this topic; give one of them options.name`,
      );
    }
    const transactional = this.transactionalOption(where, options.transactional);
    this.targets.addHandler(topic, {
      name,
      ...policy,
      invoke: transactional
        ? transactionalTarget(invoke, name, transactional.isolation, this.opener, this.store)
        : invoke,
    });
    this.logger.log(aboutEvents(`Outbox handler ${name} {${topic}}`, { topic }));
  }
}
