import { Inject, Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { OUTBOX_OPTIONS, OUTBOX_STORE } from '../outbox.constants';
import { OutboxValidationError } from '../errors/outbox.errors';
import type {
  OutboxCounts,
  PublishManyItem,
  PublishOptions,
  PublishResult,
} from '../interfaces/outbox-message.interface';
import type { ResolvedOutboxOptions } from '../interfaces/outbox-options.interface';
import type { OutboxStore } from '../store/outbox.store';
import { knownKeys, type KnownKeysRule } from '../utils/option-checks';
import { validateEvent } from './outbox.validation';
import { transactionalManager } from './transaction-resolver';

const PUBLISH_OPTION_KEYS = ['key', 'dedupeKey', 'headers', 'delayMs', 'availableAt', 'manager'];
const ITEM_KEYS = ['topic', 'payload', 'key', 'dedupeKey', 'headers', 'delayMs', 'availableAt'];

/** Publish options and publishMany's events: any object but an array (an event may be a class instance). */
const ARGUMENT: KnownKeysRule = {
  isObject: (value): value is object => typeof value === 'object' && value !== null && !Array.isArray(value),
  wrongValue: (field, expected, value) =>
    new OutboxValidationError(field, `expected ${expected}, got ${value === null ? 'null' : typeof value}`),
  unknownKey: (field, key, allowed) =>
    new OutboxValidationError(field, `unknown option "${key}"; allowed: ${allowed.join(', ')}`),
};

/** Writes events into the outbox, inside the caller's transaction. */
@Injectable()
export class OutboxService {
  constructor(
    @Inject(OUTBOX_OPTIONS) private readonly options: ResolvedOutboxOptions,
    @Inject(OUTBOX_STORE) private readonly store: OutboxStore,
  ) {}

  /**
   * Adds one event to the caller's transaction: it commits if and only if that transaction commits.
   * Throws `OutboxTransactionRequiredError` when there is no transaction, and `OutboxValidationError`
   * (or a subclass) for bad input; neither writes anything.
   */
  async publish<T>(topic: string, payload: T, options: PublishOptions = {}): Promise<PublishResult> {
    knownKeys('options', options, PUBLISH_OPTION_KEYS, ARGUMENT);
    const { manager, ...rest } = options;
    const [result] = await this.publishMany([{ ...rest, topic, payload }], { manager });
    return result;
  }

  /** Adds several events in one statement (per few thousand rows), all or none. */
  async publishMany(items: PublishManyItem[], options: { manager?: EntityManager } = {}): Promise<PublishResult[]> {
    if (!Array.isArray(items)) {
      throw new OutboxValidationError('items', `publishMany expects an array of events, got ${typeof items}`);
    }
    knownKeys('options', options, ['manager'], ARGUMENT);
    const insert = (traceContext: string | undefined) => this.insert(items, options.manager, traceContext ?? null);
    const { tracing } = this.options;
    if (!tracing || items.length === 0) return insert(undefined);
    // The caller's trace context, captured here: never at delivery, which runs in another's.
    return tracing.publish(items, insert);
  }

  private async insert(
    items: PublishManyItem[],
    given: EntityManager | undefined,
    traceContext: string | null,
  ): Promise<PublishResult[]> {
    const events = items.map((item, index) => {
      try {
        knownKeys('event', item, ITEM_KEYS, ARGUMENT);
        return validateEvent(item, this.options.maxPayloadBytes, traceContext);
      } catch (error) {
        if (error instanceof OutboxValidationError && items.length > 1) {
          error.message = `${error.message} (publishMany item ${index})`;
        }
        throw error;
      }
    });
    const manager = transactionalManager(given, this.options, this.store.dataSource);
    if (events.length === 0) return [];
    return this.store.insert(manager, events);
  }

  /** How many events are pending, in flight, delivered and dead-lettered. */
  counts(): Promise<OutboxCounts> {
    return this.store.counts();
  }
}
