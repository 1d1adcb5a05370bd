import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { OUTBOX_OPTIONS } from './outbox.constants';
import { getOutboxHandlerMetadata } from './decorators/outbox-handler.decorator';
import { OutboxConfigurationError } from './errors/outbox.errors';
import type { OutboxHandlerFn, OutboxHandlerOptions } from './interfaces/outbox-message.interface';
import { assertTimeoutBelowLease, integerOption, type ResolvedOutboxOptions } from './outbox.options';
import { validateTopic } from './outbox.validation';

/** A discovered handler, bound to its provider instance. */
export interface RegisteredHandler {
  /** Stable name recorded when the handler succeeds. */
  name: string;
  topic: string;
  timeoutMs: number;
  retry: { initialDelayMs: number; maxDelayMs: number };
  invoke: OutboxHandlerFn;
}

const HANDLER_OPTION_KEYS = ['name', 'timeoutMs', 'retry'];

/** Finds `@OutboxHandler()` methods once, at module init, and serves them by topic. */
@Injectable()
export class OutboxExplorer implements OnModuleInit {
  private readonly logger = new Logger('OutboxExplorer');
  private readonly byTopic = new Map<string, RegisteredHandler[]>();

  constructor(
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
  ) {}

  onModuleInit(): void {
    for (const wrapper of this.discovery.getProviders()) {
      const { instance } = wrapper;
      if (!instance || typeof instance !== 'object') continue;
      const prototype = Object.getPrototypeOf(instance);
      if (!prototype) continue;
      for (const methodName of this.scanner.getAllMethodNames(prototype)) {
        const entries = getOutboxHandlerMetadata(prototype[methodName]);
        if (entries.length === 0) continue;
        const owner = `${instance.constructor?.name ?? 'anonymous'}.${methodName}`;
        if (!wrapper.isDependencyTreeStatic()) {
          this.logger.warn(
            `@OutboxHandler on ${owner} is ignored: its provider is request-scoped, and the worker runs outside any request`,
          );
          continue;
        }
        for (const { topic, options } of entries) {
          this.register(owner, topic, options, instance[methodName].bind(instance));
        }
      }
    }
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
    const unknown = Object.keys(options).filter((k) => !HANDLER_OPTION_KEYS.includes(k));
    if (unknown.length > 0) {
      throw new OutboxConfigurationError(`${where}: ${unknown[0]}`, `unknown option; allowed: ${HANDLER_OPTION_KEYS.join(', ')}`);
    }
    const { worker, retry } = this.options;
    const timeoutMs = integerOption(`${where}: timeoutMs`, options.timeoutMs, worker.handlerTimeoutMs, 1, worker.leaseMs);
    assertTimeoutBelowLease(`${where}: timeoutMs`, timeoutMs, worker.leaseMs);
    const initialDelayMs = integerOption(
      `${where}: retry.initialDelayMs`,
      options.retry?.initialDelayMs,
      retry.initialDelayMs,
      0,
      86_400_000,
    );
    const maxDelayMs = integerOption(
      `${where}: retry.maxDelayMs`,
      options.retry?.maxDelayMs,
      Math.max(retry.maxDelayMs, initialDelayMs),
      initialDelayMs,
      86_400_000,
    );
    const name = options.name ?? owner;
    if (typeof name !== 'string' || name.length === 0 || name.length > 200) {
      throw new OutboxConfigurationError(`${where}: name`, 'expected a string of 1 to 200 characters');
    }
    const handlers = this.byTopic.get(topic) ?? [];
    if (handlers.some((h) => h.name === name)) {
      throw new OutboxConfigurationError(
        where,
        `a handler named "${name}" is already registered for this topic; give one of them options.name`,
      );
    }
    handlers.push({ name, topic, timeoutMs, retry: { initialDelayMs, maxDelayMs }, invoke });
    this.byTopic.set(topic, handlers);
    this.logger.log(`Outbox handler ${name} {${topic}}`);
  }

  handlersFor(topic: string): readonly RegisteredHandler[] {
    return this.byTopic.get(topic) ?? [];
  }
}
