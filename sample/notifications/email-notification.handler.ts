import { Injectable, Logger } from '@nestjs/common';
import { OutboxHandler, type OutboxMessage } from '../../lib';
import { ORDER_PLACED, type OrderPlacedEvent } from '../orders/order-placed.event';

/**
 * "Sends" an order confirmation. The mail server is simulated as down on the first attempt of
 * every message, so each event shows the outbox retrying a failed handler.
 */
@Injectable()
export class EmailNotificationHandler {
  private readonly logger = new Logger(EmailNotificationHandler.name);
  /** Messages this process delivered on a retry. */
  retries = 0;

  @OutboxHandler(ORDER_PLACED)
  sendConfirmation(message: OutboxMessage<OrderPlacedEvent>): void {
    const { orderId, customer } = message.payload;
    if (message.attempt === 1) {
      this.logger.warn(`Mail server unavailable (simulated) for order ${orderId}; the outbox will retry`);
      throw new Error('mail server unavailable (simulated)');
    }
    this.retries++;
    this.logger.log(`Confirmation e-mail sent to ${customer} for order ${orderId}, attempt ${message.attempt}`);
  }
}
