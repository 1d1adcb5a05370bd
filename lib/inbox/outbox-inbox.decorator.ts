import { applyDecorators, SetMetadata, UseInterceptors } from '@nestjs/common';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import { describeValue } from '../utils/describe-value';
import { CONSUMER_NAME, OUTBOX_INBOX_METADATA } from './inbox-constants';
import { OutboxInboxInterceptor } from './outbox-inbox.interceptor';
import { rejectUnknownOptions } from '../utils/option-checks';
import type { OutboxInboxMetadata, OutboxInboxOptions } from './inbox-metadata';

export type { OutboxInboxMetadata, OutboxInboxOptions } from './inbox-metadata';

/**
 * Runs the handler at most once per message for `consumer`: the message's outbox id (from the transport's
 * metadata: AMQP `messageId`, NATS `Nats-Msg-Id`, MQTT user property and Kafka header `x-outbox-id`, the
 * Redis envelope's `id`, HTTP `Idempotency-Key`) is recorded in the inbox table in one transaction with
 * the handler's writes — made through nestjs-cls (`@Transactional()`, `TransactionHost.tx`) or
 * `OutboxInboxService.manager`. A copy of a message already processed skips the handler (an HTTP request
 * gets an empty 2xx). On `@EventPattern()` / `@MessagePattern()` handlers of a Nest microservice, and on
 * controllers' routes that receive the outbox's webhooks. Needs `OutboxInboxModule`.
 */
export function OutboxInbox(consumer: string, options: OutboxInboxOptions = {}): MethodDecorator & ClassDecorator {
  if (typeof consumer !== 'string' || !CONSUMER_NAME.test(consumer)) {
    throw new OutboxConfigurationError(
      '@OutboxInbox()',
      `the consumer name must be 1 to 100 characters of letters, digits, ".", "_", ":" and "-", got ${describeValue(consumer)}`,
    );
  }
  if (typeof options !== 'object' || options === null) {
    throw new OutboxConfigurationError(`@OutboxInbox('${consumer}')`, 'options must be an object');
  }
  rejectUnknownOptions(`@OutboxInbox('${consumer}')`, options, ['acknowledge', 'signature'], ': ', 'allowed');
  for (const flag of ['acknowledge', 'signature'] as const) {
    if (options[flag] !== undefined && typeof options[flag] !== 'boolean') {
      throw new OutboxConfigurationError(
        `@OutboxInbox('${consumer}'): ${flag}`,
        `expected true or false, got ${describeValue(options[flag])}`,
      );
    }
  }
  const metadata: OutboxInboxMetadata = { consumer, ...options };
  return applyDecorators(SetMetadata(OUTBOX_INBOX_METADATA, metadata), UseInterceptors(OutboxInboxInterceptor));
}
