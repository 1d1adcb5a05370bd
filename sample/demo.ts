import { setTimeout as sleep } from 'node:timers/promises';
import { type INestApplicationContext, Logger } from '@nestjs/common';
import { OutboxService } from '../lib';
import { EmailNotificationHandler } from './notifications/email-notification.handler';
import type { CreateOrderDto } from './orders/create-order.dto';
import { OrdersService } from './orders/orders.service';

const ORDERS: CreateOrderDto[] = [
  { customer: 'Ada Lovelace', amount: 4200 },
  { customer: 'Alan Turing', amount: 1999 },
  { customer: 'Grace Hopper', amount: 12550 },
  { customer: 'Edsger Dijkstra', amount: 700 },
];
const TIMEOUT_MS = 30_000;
const POLL_MS = 100;

/**
 * Places a few orders and waits until the worker has delivered every event, retries included.
 * Resolves to true on success, false on timeout or dead-lettered events. The database may hold
 * events of earlier runs, so progress is measured from the counts at the start.
 */
export async function runDemo(app: INestApplicationContext): Promise<boolean> {
  const logger = new Logger('Demo');
  const deadline = Date.now() + TIMEOUT_MS;
  const outbox = app.get(OutboxService);
  const orders = app.get(OrdersService);

  const start = await outbox.counts();
  for (const input of ORDERS) {
    const { order, eventId } = await orders.place(input);
    logger.log(`Placed order ${order.id} for ${order.customer} (${order.amount} cents), event ${eventId}`);
  }

  const target = start.delivered + ORDERS.length;
  let counts = await outbox.counts();
  while (counts.pending > 0 || counts.inFlight > 0 || counts.delivered < target) {
    if (counts.dead > start.dead) {
      logger.error(`${counts.dead - start.dead} event(s) were dead-lettered; see the OutboxWorker errors above`);
      return false;
    }
    if (Date.now() >= deadline) {
      logger.error(`Timed out after ${TIMEOUT_MS / 1000} s waiting for delivery; outbox: ${JSON.stringify(counts)}`);
      return false;
    }
    await sleep(POLL_MS);
    counts = await outbox.counts();
  }

  const delivered = counts.delivered - start.delivered;
  const leftOver = delivered - ORDERS.length;
  const retries = app.get(EmailNotificationHandler).retries;
  logger.log(
    `Done: ${ORDERS.length} orders placed, ${delivered} events delivered` +
      `${leftOver > 0 ? ` (${leftOver} left over from an earlier run)` : ''}, ${retries} retries seen`,
  );
  return true;
}
