import type { ExecutionContext } from '@nestjs/common';
import { KafkaContext, MqttContext, NatsContext, RedisContext } from '@nestjs/microservices';
import { headers as natsHeaders } from 'nats';
import { inboxDeliveryOf } from '../../lib/inbox/inbox-delivery';

/** An RPC ExecutionContext as Nest builds one for a received message: the transport's context and the data. */
function rpc(context: unknown, data: unknown): ExecutionContext {
  return {
    getType: () => 'rpc',
    switchToRpc: () => ({ getContext: () => context, getData: () => data }),
  } as unknown as ExecutionContext;
}

const ID = '0192f0c4-8a6e-7b1c-9d2e-3f4a5b6c7d8e';
const envelope = {
  id: ID,
  topic: 'billing.charged',
  key: null,
  headers: {},
  createdAt: '2026-12-05T00:00:00.000Z',
  payload: {},
};

describe('where an inbox finds the outbox message id', () => {
  it('reads the Kafka header x-outbox-id, as a Buffer', () => {
    const context = new KafkaContext([
      { headers: { 'x-outbox-id': Buffer.from(ID) }, key: null, value: {} } as never,
      0,
      'billing',
      {} as never,
      {} as never,
      {} as never,
    ]);
    expect(inboxDeliveryOf(rpc(context, {}), undefined, true).id).toBe(ID);
  });

  it('reads Nats-Msg-Id, else x-outbox-id, from NATS headers', () => {
    const withMsgId = natsHeaders();
    withMsgId.set('Nats-Msg-Id', ID);
    expect(inboxDeliveryOf(rpc(new NatsContext(['billing', withMsgId]), {}), undefined, true).id).toBe(ID);
    const withOutboxId = natsHeaders();
    withOutboxId.set('x-outbox-id', ID);
    expect(inboxDeliveryOf(rpc(new NatsContext(['billing', withOutboxId]), {}), undefined, true).id).toBe(ID);
    expect(inboxDeliveryOf(rpc(new NatsContext(['billing', undefined]), {}), undefined, true).id).toBeUndefined();
  });

  it('reads the MQTT 5 user property x-outbox-id', () => {
    const packet = { properties: { userProperties: { 'x-outbox-id': ID } } };
    expect(inboxDeliveryOf(rpc(new MqttContext(['billing', packet as never]), {}), undefined, true).id).toBe(ID);
  });

  it('takes the id of an envelope only when the data is one, never a payload’s own id', () => {
    expect(inboxDeliveryOf(rpc(new RedisContext(['billing']), envelope), undefined, true).id).toBe(ID);
    expect(
      inboxDeliveryOf(rpc(new RedisContext(['billing']), { id: ID, amount: 5 }), undefined, true).id,
    ).toBeUndefined();
  });

  it('offers no acknowledgement outside RabbitMQ', () => {
    const delivery = inboxDeliveryOf(rpc(new RedisContext(['billing']), envelope), undefined, true);
    expect(delivery.ack).toBeUndefined();
    expect(delivery.nack).toBeUndefined();
  });
});
