import { OUTBOX_HANDLER_METADATA } from '../outbox.constants';
import type { OutboxHandlerOptions } from '../interfaces/outbox-message.interface';

export interface OutboxHandlerMetadata {
  topic: string;
  options: OutboxHandlerOptions;
}

/**
 * Marks a provider method as a handler of `topic` (stack the decorator for several topics). The
 * method receives an `OutboxMessage`; throwing means "failed, retry later", throwing
 * `OutboxNonRetryableError` dead-letters the event.
 */
export function OutboxHandler(topic: string, options: OutboxHandlerOptions = {}): MethodDecorator {
  return (_target, _key, descriptor: PropertyDescriptor) => {
    const method = descriptor.value as object;
    const existing =
      (Reflect.getMetadata(OUTBOX_HANDLER_METADATA, method) as OutboxHandlerMetadata[] | undefined) ?? [];
    Reflect.defineMetadata(OUTBOX_HANDLER_METADATA, [...existing, { topic, options }], method);
    return descriptor;
  };
}

/** The one accessor of handler metadata (STYLE rule 5). */
export function getOutboxHandlerMetadata(method: unknown): OutboxHandlerMetadata[] {
  if (typeof method !== 'function') return [];
  return (Reflect.getMetadata(OUTBOX_HANDLER_METADATA, method) as OutboxHandlerMetadata[] | undefined) ?? [];
}
