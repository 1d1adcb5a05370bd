import type { ExecutionContext } from '@nestjs/common';
import { OutboxConfigurationError, OutboxWebhookSignatureError } from '../errors/outbox.errors';
import { verifyWebhookSignature } from '../transports/webhook/webhook-signature';
import type { ResolvedInboxOptions } from './inbox-options';

/** A message as an inbox handler receives it: its outbox id, and where the broker wants it acknowledged. */
export interface InboxDelivery {
  /** The outbox message id the transport carried, if any. */
  id: string | undefined;
  /** Acknowledges the broker message (RabbitMQ with `noAck: false`); absent elsewhere. */
  ack?: () => void;
  /** Hands the broker message back: to be delivered again (`requeue`), or to its dead-letter exchange. */
  nack?: (requeue: boolean) => void;
}

/** The metadata each transport of `ClientProxyTransport` carries the id in (see client-proxy.transport.ts). */
const ID_HEADER = 'x-outbox-id';

type Headers = Record<string, unknown>;

interface RmqLike {
  getMessage(): { properties?: { messageId?: unknown; headers?: Headers } };
  getChannelRef(): { ack(message: unknown): void; nack(message: unknown, allUpTo?: boolean, requeue?: boolean): void };
}
interface NatsLike {
  getHeaders(): { get(name: string): string } | undefined;
}
interface MqttLike {
  getPacket(): { properties?: { userProperties?: Record<string, string | string[]> } };
}
interface KafkaLike {
  getMessage(): { headers?: Record<string, Buffer | string | undefined> };
}

const has = <T>(value: unknown, method: string): value is T =>
  typeof value === 'object' && value !== null && typeof (value as Record<string, unknown>)[method] === 'function';

const text = (value: unknown): string | undefined => {
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  if (Array.isArray(value)) return text(value[0]);
  return typeof value === 'string' ? value : undefined;
};

/**
 * The envelope `ClientProxyTransport` sends as the data on Redis (and elsewhere with `envelope: true`):
 * only an object with every key of it is taken for one, never a payload that happens to have an `id`.
 */
function envelopeId(data: unknown): string | undefined {
  if (typeof data !== 'object' || data === null) return undefined;
  const envelope = data as Record<string, unknown>;
  const keys = ['id', 'topic', 'headers', 'createdAt', 'payload'];
  return keys.every((key) => key in envelope) ? text(envelope.id) : undefined;
}

/**
 * Reads a received message of a Nest microservice (RabbitMQ, NATS, MQTT, Kafka, Redis) or an HTTP request
 * (a `WebhookTransport` call, its signature checked when `webhook` is configured).
 */
export function inboxDeliveryOf(
  context: ExecutionContext,
  webhook: ResolvedInboxOptions['webhook'],
  signature: boolean,
): InboxDelivery {
  if (context.getType() === 'http') return webhookDelivery(context, webhook, signature);
  const rpc = context.switchToRpc();
  const transport: unknown = rpc.getContext();
  const fromEnvelope = envelopeId(rpc.getData());
  if (has<RmqLike>(transport, 'getChannelRef')) {
    const message = transport.getMessage();
    const channel = transport.getChannelRef();
    return {
      id: text(message.properties?.messageId) ?? text(message.properties?.headers?.[ID_HEADER]) ?? fromEnvelope,
      ack: () => channel.ack(message),
      nack: (requeue) => channel.nack(message, false, requeue),
    };
  }
  if (has<NatsLike>(transport, 'getHeaders')) {
    const headers = transport.getHeaders();
    return { id: text(headers?.get('Nats-Msg-Id')) || text(headers?.get(ID_HEADER)) || fromEnvelope };
  }
  if (has<MqttLike>(transport, 'getPacket')) {
    return { id: text(transport.getPacket().properties?.userProperties?.[ID_HEADER]) ?? fromEnvelope };
  }
  if (has<KafkaLike>(transport, 'getPartition')) {
    return { id: text(transport.getMessage().headers?.[ID_HEADER]) ?? fromEnvelope };
  }
  return { id: fromEnvelope };
}

interface RequestLike {
  headers: Record<string, string | string[] | undefined>;
  rawBody?: Buffer;
}

function webhookDelivery(
  context: ExecutionContext,
  webhook: ResolvedInboxOptions['webhook'],
  signature: boolean,
): InboxDelivery {
  const request = context.switchToHttp().getRequest<RequestLike>();
  const id = text(request.headers['idempotency-key']);
  if (!signature) return { id };
  if (!webhook) {
    throw new OutboxConfigurationError(
      'inbox.webhook.secret',
      "an @OutboxInbox() route verifies the webhook's signature: set the WebhookTransport's secret here, or give " +
        'the route { signature: false } if something else verifies its requests',
    );
  }
  if (!Buffer.isBuffer(request.rawBody)) {
    throw new OutboxConfigurationError(
      'inbox.webhook',
      'the signature is computed over the request body as sent: create the application with ' +
        'NestFactory.create(AppModule, { rawBody: true })',
    );
  }
  const header = text(request.headers[webhook.signatureHeader]);
  if (header === undefined) throw new OutboxWebhookSignatureError(`it has no ${webhook.signatureHeader} header`);
  const body = request.rawBody;
  if (!webhook.secrets.some((secret) => verifyWebhookSignature(body, header, secret, webhook.toleranceSeconds))) {
    throw new OutboxWebhookSignatureError(
      `its ${webhook.signatureHeader} header does not match the body with a configured secret, or its timestamp is ` +
        `more than ${webhook.toleranceSeconds} s from now`,
    );
  }
  return { id };
}
