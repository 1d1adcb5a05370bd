import { type CallHandler, type ExecutionContext, Inject, Injectable, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { defer, lastValueFrom, type Observable } from 'rxjs';
import { OutboxInboxMessageError } from '../errors/outbox.errors';
import { OUTBOX_INBOX_METADATA, OUTBOX_INBOX_OPTIONS } from './inbox-constants';
import { type InboxDelivery, inboxDeliveryOf } from './inbox-delivery';
import type { ResolvedInboxOptions } from './inbox-options';
import type { OutboxInboxMetadata } from './inbox-metadata';
import { OutboxInboxService } from './outbox-inbox.service';

/** What `@OutboxInbox()` puts in front of a handler (see the decorator). */
@Injectable()
export class OutboxInboxInterceptor implements NestInterceptor {
  constructor(
    private readonly reflector: Reflector,
    private readonly inbox: OutboxInboxService,
    @Inject(OUTBOX_INBOX_OPTIONS) private readonly options: ResolvedInboxOptions,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const metadata = this.reflector.getAllAndOverride<OutboxInboxMetadata | undefined>(OUTBOX_INBOX_METADATA, [
      context.getHandler(),
      context.getClass(),
    ]);
    if (!metadata) return next.handle();
    return defer(async () => {
      let delivery: InboxDelivery | undefined;
      try {
        delivery = inboxDeliveryOf(context, this.options.webhook, metadata.signature !== false);
        // The handler runs inside the transaction's async context: what it writes through nestjs-cls joins it.
        const outcome = await this.inbox.process(metadata.consumer, delivery.id, () =>
          lastValueFrom(next.handle() as Observable<unknown>, { defaultValue: undefined }),
        );
        if (metadata.acknowledge) delivery.ack?.();
        return outcome.duplicate ? undefined : outcome.result;
      } catch (error) {
        // A message without a usable id can never succeed: to the dead letters, not round again.
        if (metadata.acknowledge) delivery?.nack?.(!(error instanceof OutboxInboxMessageError));
        throw error;
      }
    });
  }
}
