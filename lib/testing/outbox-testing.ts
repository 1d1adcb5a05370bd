import { OUTBOX_OPTIONS, OUTBOX_RESOLVED_OPTIONS } from '../outbox.constants';
import { OutboxConfigurationError, OutboxValidationError } from '../errors/outbox.errors';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { OutboxMessage } from '../interfaces/outbox-message.interface';
import { ModuleRef } from '@nestjs/core';
import { OutboxWorker } from '../delivery/outbox.worker';
import { InMemoryTransport } from '../transports/in-memory.transport';
import { validateTopic } from '../utils/topic';
import { uuidv7 } from '../utils/uuidv7';
import { OutboxTestHarness } from './outbox-test-harness';

export { OutboxTestHarness, type OutboxHandlerRecord } from './outbox-test-harness';

/**
 * What `OutboxTesting.override()` needs of `@nestjs/testing`'s `TestingModuleBuilder` (typed
 * structurally, so the library does not depend on `@nestjs/testing`).
 */
export interface OutboxOverridableBuilder<B> {
  overrideProvider(token: unknown): {
    useFactory(options: { factory: (...args: never[]) => unknown; inject?: unknown[] }): B;
  };
}

/**
 * How a module's outbox behaves under test (see `OutboxTesting.override`). The retry delays stay the
 * module's: with `testing` set, the worker makes every failure due again at once.
 */
function testingOptions(
  resolved: ResolvedOutboxOptions,
  harness: OutboxTestHarness,
  transports: InMemoryTransport[],
): ResolvedOutboxOptions {
  return {
    ...resolved,
    worker: { ...resolved.worker, enabled: false },
    transports,
    testing: harness,
  };
}

/**
 * Tests of an application that uses the outbox, with its real module and database:
 *
 * ```ts
 * const moduleRef = await OutboxTesting.override(Test.createTestingModule({ imports: [AppModule] })).compile();
 * const outbox = OutboxTesting.from(moduleRef);
 * ```
 */
export class OutboxTesting {
  /**
   * Changes every `OutboxModule` of the testing module being built: the worker is not scheduled (only
   * `drain()` delivers), failed deliveries are due again at once (no backoff, no Retry-After), and
   * every transport is replaced by an `InMemoryTransport` of the same name, so routes record what they
   * would send. Everything else (options, handlers, table, database) is the application's own.
   */
  static override<B>(builder: OutboxOverridableBuilder<B>): B {
    return builder.overrideProvider(OUTBOX_OPTIONS).useFactory({
      inject: [OUTBOX_RESOLVED_OPTIONS, ModuleRef],
      factory: (resolved: ResolvedOutboxOptions, module: ModuleRef) => {
        // Same names, so every route resolves to its stand-in; nothing connects to a broker or a URL.
        const transports = resolved.transports.map((transport) => new InMemoryTransport(transport.name));
        // The worker is built after these options: the harness looks it up when it first drains.
        const harness = new OutboxTestHarness(transports, () => module.get(OutboxWorker), resolved.errorText);
        return testingOptions(resolved, harness, transports);
      },
    });
  }

  /**
   * The harness of the outbox in `moduleRef` (a `TestingModule` or an application built from one with
   * `OutboxTesting.override()`). With several outboxes, name the table of the one you want.
   */
  static from(
    moduleRef: { get(token: unknown, options: { strict: false; each: true }): unknown },
    tableName?: string,
  ): OutboxTestHarness {
    const all = moduleRef.get(OUTBOX_OPTIONS, { strict: false, each: true }) as ResolvedOutboxOptions[];
    const matching = all.filter((options) => tableName === undefined || options.tableName === tableName);
    if (matching.length > 1) {
      const tables = matching.map((options) => options.tableName).join(', ');
      throw new OutboxConfigurationError(
        'OutboxTesting.from',
        `this module has ${matching.length} outboxes (tables ${tables}): pass the table name of the one to test`,
      );
    }
    const harness = matching[0]?.testing;
    if (!(harness instanceof OutboxTestHarness)) {
      throw new OutboxConfigurationError(
        'OutboxTesting.from',
        matching.length === 0
          ? `no OutboxModule${tableName === undefined ? '' : ` with table "${tableName}"`} in this module`
          : 'build the testing module with OutboxTesting.override(Test.createTestingModule(...)) first',
      );
    }
    return harness;
  }

  /**
   * A message as a handler receives it, for unit tests of a handler without a database: a fresh
   * UUIDv7 id, attempt 1, no key, no headers, created now, and a signal that is not aborted unless
   * you pass your own.
   */
  static message<T>(
    topic: string,
    payload: T,
    fields: Partial<Omit<OutboxMessage<T>, 'topic' | 'payload'>> = {},
  ): OutboxMessage<T> {
    validateTopic(topic);
    if (fields.attempt !== undefined && (!Number.isInteger(fields.attempt) || fields.attempt < 1)) {
      throw new OutboxValidationError('attempt', `expected a whole number of 1 or more, got ${fields.attempt}`);
    }
    return {
      id: fields.id ?? uuidv7(),
      topic,
      key: fields.key ?? null,
      payload,
      headers: { ...(fields.headers ?? {}) },
      attempt: fields.attempt ?? 1,
      createdAt: fields.createdAt ?? new Date(),
      signal: fields.signal ?? new AbortController().signal,
    };
  }
}
