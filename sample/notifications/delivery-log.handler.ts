import { Injectable, Logger } from '@nestjs/common';
import { OutboxHandler, type OutboxMessage } from '../../lib';
import { ORDER_PLACED, type OrderPlacedEvent } from '../orders/order-placed.event';

/** Logs every delivery of `order.placed`. */
@Injectable()
export class DeliveryLogHandler {
  private readonly logger = new Logger(DeliveryLogHandler.name);

  @OutboxHandler(ORDER_PLACED)
  onOrderPlaced(message: OutboxMessage<OrderPlacedEvent>): void {
    this.logger.log(`${message.topic} delivered: order ${message.payload.orderId}, attempt ${message.attempt}`);
  }
}
