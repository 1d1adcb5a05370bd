import { Body, Controller, Get, NotFoundException, Param, ParseUUIDPipe, Post } from '@nestjs/common';
import { parseCreateOrder } from './create-order.dto';
import type { Order } from './order.entity';
import { OrdersService, type PlacedOrder } from './orders.service';

@Controller('orders')
export class OrdersController {
  constructor(private readonly orders: OrdersService) {}

  @Post()
  place(@Body() body: unknown): Promise<PlacedOrder> {
    return this.orders.place(parseCreateOrder(body));
  }

  @Get(':id')
  async findOne(@Param('id', ParseUUIDPipe) id: string): Promise<Order> {
    const order = await this.orders.findOne(id);
    if (!order) throw new NotFoundException(`order ${id} not found`);
    return order;
  }
}
