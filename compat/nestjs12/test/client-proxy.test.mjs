import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { ClientsModule, Transport } from '@nestjs/microservices';
import { Redis } from 'ioredis';
import { ClientProxyTransport, OutboxModule } from 'nestjs-typeorm-outbox';
import { BACKENDS, uniqueName } from '../support/databases.mjs';
import { startApp } from '../support/app.mjs';
import { eventually } from '../support/waiting.mjs';

const redis = { host: process.env.OUTBOX_TEST_REDIS_HOST ?? '127.0.0.1', port: Number(process.env.OUTBOX_TEST_REDIS_PORT ?? 6379) };

for (const backend of BACKENDS) {
  describe(`a ClientProxy route to Redis on ${backend}`, () => {
    let app;
    let subscriber;
    let channel;
    const received = [];

    beforeEach(async () => {
      channel = uniqueName('compat_orders');
      received.length = 0;
      // An independent consumer, written with the Redis client alone.
      subscriber = new Redis(redis);
      subscriber.on('message', (from, text) => received.push({ from, packet: JSON.parse(text) }));
      await subscriber.subscribe(channel);
    });
    afterEach(async () => {
      await app?.dispose();
      subscriber.disconnect();
    });

    it('forwards an event published in a transaction through Nest’s Redis ClientProxy', async () => {
      app = await startApp(backend, {
        outboxModule: (table) =>
          OutboxModule.forRootAsync({
            tableName: table,
            imports: [ClientsModule.register([{ name: 'ORDERS_BROKER', transport: Transport.REDIS, options: redis }])],
            inject: ['ORDERS_BROKER'],
            useFactory: (client) => ({
              worker: { enabled: false },
              transports: [new ClientProxyTransport('redis', client, { pattern: () => channel })],
              routes: [{ topic: 'order.*', transport: 'redis', timeoutMs: 5000 }],
            }),
          }),
      });
      const { id } = await app.txHost.withTransaction(() =>
        app.outbox.publish('order.shipped', { orderId: 'o-7' }, { key: 'o-7', headers: { 'x-trace': 't7' } }),
      );

      const drained = await app.worker.drain();
      assert.equal(drained.delivered, 1);
      assert.equal(drained.failed, 0);
      const [message] = await eventually(() => received.length > 0 && received, 'the message on Redis');
      assert.equal(message.from, channel);
      const envelope = message.packet.data;
      assert.equal(envelope.id, id);
      assert.equal(envelope.topic, 'order.shipped');
      assert.equal(envelope.key, 'o-7');
      assert.deepEqual(envelope.headers, { 'x-trace': 't7' });
      assert.deepEqual(envelope.payload, { orderId: 'o-7' });
      const row = await app.row(id);
      assert.equal(row.status, 'delivered');
    });
  });
}
