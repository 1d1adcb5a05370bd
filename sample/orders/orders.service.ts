import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { Transactional, TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { OutboxService } from '../../lib';
import type { CreateOrderDto } from './create-order.dto';
import { Order } from './order.entity';
import { ORDER_PLACED, type OrderPlacedEvent } from './order-placed.event';

export interface PlacedOrder {
  order: Order;
  /** Id of the `order.placed` outbox event. */
  eventId: string;
}

@Injectable()
export class OrdersService {
  constructor(
    private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
    private readonly outbox: OutboxService,
  ) {}

  /** Saves the order and its `order.placed` event in one transaction: both are stored, or neither. */
  @Transactional()
  async place(input: CreateOrderDto): Promise<PlacedOrder> {
    const orders = this.txHost.tx.getRepository(Order);
    const order = orders.create({ id: randomUUID(), ...input });
    await orders.insert(order);
    const payload: OrderPlacedEvent = { orderId: order.id, customer: order.customer, amount: order.amount };
    const { id } = await this.outbox.publish(ORDER_PLACED, payload, { key: order.id });
    return { order, eventId: id };
  }

  findOne(id: string): Promise<Order | null> {
    return this.txHost.tx.getRepository(Order).findOneBy({ id });
  }
}
