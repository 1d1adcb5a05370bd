import { lastValueFrom, type Observable } from 'rxjs';
import { OutboxConfigurationError } from '../../errors/outbox.errors';
import type { OutboxMessage } from '../../interfaces/outbox-message.interface';
import type { OutboxRoute, OutboxTransport } from '../../interfaces/outbox-transport.interface';
import { loadOptional } from '../../utils/optional-package';
import { type Broker, brokerOf } from './client-broker';

/** The part of a `@nestjs/microservices` `ClientProxy` the transport uses (kept structural: optional peer). */
export interface OutboxClientProxy {
  connect(): Promise<unknown>;
  emit<TResult = unknown, TInput = unknown>(pattern: unknown, data: TInput): Observable<TResult>;
}

export interface ClientProxyTransportOptions {
  /** The pattern (routing key, subject, channel, topic) of a message. Default: the event's topic. */
  pattern?: (message: OutboxMessage) => string;
  /**
   * Send `{ id, topic, key, headers, createdAt, payload }` as the data instead of the bare payload.
   * Default: on for Redis (which has no headers to carry the id), off elsewhere.
   */
  envelope?: boolean;
  /**
   * NATS only: publish through JetStream and wait for the stream's acknowledgement, with the event id
   * as `Nats-Msg-Id` (JetStream drops duplicates within its window). A stream must cover the subject.
   */
  jetstream?: boolean | { timeoutMs?: number };
}

type Microservices = typeof import('@nestjs/microservices');

/**
 * Forwards events to a broker through a `ClientProxy` of `@nestjs/microservices` — one the app
 * registered with `ClientsModule`, injected into `OutboxModule.forRootAsync`. The topic is the pattern
 * and the payload the data; the event id, key and headers travel the way each broker carries metadata:
 *
 * - RabbitMQ: `messageId` = id, persistent, AMQP headers `x-outbox-id`, `x-outbox-topic`, `x-outbox-key` and
 *   the event's headers. Resolved when the broker confirms (the client's channel uses publisher confirms).
 * - NATS: message headers (`Nats-Msg-Id` = id, …). Core NATS: resolved after a flush, i.e. the server
 *   received it; with `jetstream`, after the stream's acknowledgement.
 * - MQTT: QoS 1 (resolved on PUBACK), MQTT 5 user properties (connect the client with `protocolVersion: 5`).
 * - Kafka: message key = event key (or id), Kafka headers as above.
 * - Redis: pub/sub carries no headers; the data is the envelope (see `envelope`). Resolved when Redis
 *   reports at least one subscriber received it.
 */
export class ClientProxyTransport implements OutboxTransport {
  private readonly broker: Broker;
  private microservices: Microservices | undefined;

  constructor(
    readonly name: string,
    private readonly client: OutboxClientProxy,
    private readonly options: ClientProxyTransportOptions = {},
  ) {
    if (!client || typeof client.emit !== 'function' || typeof client.connect !== 'function') {
      throw new OutboxConfigurationError(
        `transports.${name}`,
        'expected a ClientProxy of @nestjs/microservices (inject the client registered with ClientsModule)',
      );
    }
    this.broker = brokerOf(client);
    if (options.jetstream && this.broker !== 'nats') {
      throw new OutboxConfigurationError(`transports.${name}.jetstream`, 'JetStream needs a NATS client (ClientNats)');
    }
  }

  async send(message: OutboxMessage, route: OutboxRoute): Promise<void> {
    void route;
    const pattern = this.options.pattern ? this.options.pattern(message) : message.topic;
    const envelope = this.options.envelope ?? this.broker === 'redis';
    const body = envelope
      ? {
          id: message.id,
          topic: message.topic,
          key: message.key,
          headers: message.headers,
          createdAt: message.createdAt.toISOString(),
          payload: message.payload,
        }
      : message.payload;
    const metadata: Record<string, string> = {
      ...message.headers,
      'x-outbox-id': message.id,
      'x-outbox-topic': message.topic,
      ...(message.key === null ? {} : { 'x-outbox-key': message.key }),
    };

    if (this.broker === 'nats' && this.options.jetstream) {
      return this.publishToJetStream(pattern, body, metadata, message);
    }
    if (this.broker === 'redis') return this.publishToRedis(pattern, body);
    await lastValueFrom(this.client.emit(pattern, this.record(body, metadata, message)), { defaultValue: undefined });
    if (this.broker === 'nats') {
      // Core NATS publishes without a reply; a flush round trip proves the server has the message.
      await (this.client as unknown as { natsClient: { flush(): Promise<void> } }).natsClient.flush();
    }
  }

  private record(body: unknown, metadata: Record<string, string>, message: OutboxMessage): unknown {
    const ms = () =>
      (this.microservices ??= loadOptional<Microservices>('@nestjs/microservices', 'ClientProxyTransport'));
    switch (this.broker) {
      case 'rmq':
        return new (ms().RmqRecordBuilder)(body)
          .setOptions({
            messageId: message.id,
            persistent: true,
            headers: metadata,
            type: message.topic,
            timestamp: Math.floor(message.createdAt.getTime() / 1000),
            contentType: 'application/json',
          })
          .build();
      case 'nats':
        return new (ms().NatsRecordBuilder)(body).setHeaders(this.natsHeaders(metadata, message.id)).build();
      case 'mqtt':
        return new (ms().MqttRecordBuilder)(body)
          .setQoS(1)
          .setProperties({ userProperties: metadata, contentType: 'application/json' })
          .build();
      case 'kafka':
        return { key: message.key ?? message.id, value: body, headers: metadata };
      default:
        return body;
    }
  }

  private natsHeaders(metadata: Record<string, string>, id: string) {
    const nats = loadOptional<typeof import('nats')>('nats', 'ClientProxyTransport');
    const headers = nats.headers();
    for (const [name, value] of Object.entries(metadata)) headers.set(name, value);
    headers.set('Nats-Msg-Id', id);
    return headers;
  }

  /**
   * Redis pub/sub keeps nothing: a message published while no one listens is gone. PUBLISH reports
   * how many subscribers got it, so none counts as a failure (retried), not as a delivery.
   */
  private async publishToRedis(channel: string, body: unknown): Promise<void> {
    await this.client.connect();
    const publisher = (this.client as unknown as { pubClient: { publish(c: string, m: string): Promise<number> } })
      .pubClient;
    // The packet a Nest Redis client would send, so @EventPattern consumers decode it the same way.
    const receivers = await publisher.publish(channel, JSON.stringify({ pattern: channel, data: body }));
    if (receivers === 0) {
      throw new Error(`Redis reported no subscriber on channel "${channel}": the message was not received`);
    }
  }

  private async publishToJetStream(
    subject: string,
    body: unknown,
    metadata: Record<string, string>,
    message: OutboxMessage,
  ): Promise<void> {
    await this.client.connect();
    const connection = (this.client as unknown as { natsClient: import('nats').NatsConnection }).natsClient;
    const timeout = typeof this.options.jetstream === 'object' ? this.options.jetstream.timeoutMs : undefined;
    // The same JSON packet a Nest NATS client would send, so consumers decode it the same way.
    const data = new TextEncoder().encode(JSON.stringify({ pattern: subject, data: body }));
    await connection.jetstream().publish(subject, data, {
      msgID: message.id,
      headers: this.natsHeaders(metadata, message.id),
      ...(timeout ? { timeout } : {}),
    });
  }
}
