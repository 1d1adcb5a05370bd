import { Transport, type ClientProviderOptions } from '@nestjs/microservices';

export const ORDERS_BROKER = 'ORDERS_BROKER';

/**
 * The broker `order.placed` is forwarded to, from BROKER_URL: amqp:// (RabbitMQ, queue `orders`) or
 * nats://. None when unset. Throws on any other scheme, before Nest starts.
 */
export function brokerClient(brokerUrl: string | undefined): ClientProviderOptions | undefined {
  if (!brokerUrl) return undefined;
  if (/^amqps?:\/\//i.test(brokerUrl)) {
    return {
      name: ORDERS_BROKER,
      transport: Transport.RMQ,
      options: { urls: [brokerUrl], queue: 'orders', queueOptions: { durable: true }, persistent: true },
    };
  }
  if (/^nats:\/\//i.test(brokerUrl)) {
    return {
      name: ORDERS_BROKER,
      transport: Transport.NATS,
      options: { servers: [brokerUrl], maxReconnectAttempts: -1 },
    };
  }
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(brokerUrl)?.[1];
  throw new Error(
    `BROKER_URL ${scheme ? `uses the unsupported scheme "${scheme}:"` : 'is not a URL'}; ` +
      'set it to amqp://user:password@host:5672 or nats://host:4222, or unset it',
  );
}
