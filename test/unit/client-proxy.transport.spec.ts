import { ClientProxy, type ReadPacket, type WritePacket } from '@nestjs/microservices';
import { ClientProxyTransport, type OutboxMessage, type OutboxRoute } from '../../lib';

/**
 * No Kafka broker runs here (the broker tests cover RabbitMQ, NATS, MQTT and Redis for real), so the
 * Kafka branch is checked at the client's boundary: a client whose class is named like Nest's
 * ClientKafka, which records the event packets the transport hands it instead of producing them.
 */
class ClientKafka extends ClientProxy {
  readonly events: ReadPacket[] = [];
  connect(): Promise<void> {
    return Promise.resolve();
  }
  close(): void {}
  unwrap<T>(): T {
    throw new Error('no producer in this test');
  }
  protected publish(_packet: ReadPacket, _callback: (packet: WritePacket) => void): () => void {
    throw new Error('the transport only emits events');
  }
  protected dispatchEvent<T>(packet: ReadPacket): Promise<T> {
    this.events.push(packet);
    return Promise.resolve(undefined as T);
  }
}

const route: OutboxRoute = { topic: '#', transport: 'kafka' };

function message(key: string | null): OutboxMessage {
  return {
    id: '0190a2b0-0000-7000-8000-000000000001',
    topic: 'order.placed',
    key,
    payload: { orderId: 42 },
    headers: { traceparent: '00-abc-def-01' },
    attempt: 1,
    createdAt: new Date('2024-05-01T12:00:00Z'),
    signal: new AbortController().signal,
  };
}

describe('ClientProxyTransport on Kafka', () => {
  it('sends the event key as the message key, the payload as the value, and the outbox headers', async () => {
    const client = new ClientKafka();
    await new ClientProxyTransport('kafka', client).send(message('order-42'), route);
    expect(client.events).toEqual([
      {
        pattern: 'order.placed',
        data: {
          key: 'order-42',
          value: { orderId: 42 },
          headers: {
            traceparent: '00-abc-def-01',
            'x-outbox-id': '0190a2b0-0000-7000-8000-000000000001',
            'x-outbox-topic': 'order.placed',
            'x-outbox-key': 'order-42',
          },
        },
      },
    ]);
  });

  it('keys an event without a key by its id, and takes the pattern from the option', async () => {
    const client = new ClientKafka();
    const transport = new ClientProxyTransport('kafka', client, { pattern: (m) => `events.${m.topic}` });
    await transport.send(message(null), route);
    expect(client.events).toHaveLength(1);
    expect(client.events[0]).toMatchObject({
      pattern: 'events.order.placed',
      data: { key: '0190a2b0-0000-7000-8000-000000000001', value: { orderId: 42 } },
    });
    expect((client.events[0].data as { headers: Record<string, string> }).headers).not.toHaveProperty('x-outbox-key');
  });
});
