import { Transport, type ClientProviderOptions } from '@nestjs/microservices';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ClientProxyTransport, WebhookTransport } from '../../../lib';
import { backends } from '../../fixtures/backends';
import { brokerApp } from '../../fixtures/brokers';
import { errorPlaces, leaks } from '../../fixtures/secrets';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';

/** One attempt, dead at its first failure: what it recorded is all there is to look at. */
const ONE_ATTEMPT = { maxAttempts: 1 };

/** A broker client pointed at a closed port or given a wrong password, and the secrets in its options. */
const WRONG: Array<[string, ClientProviderOptions, string[]]> = [
  [
    'RabbitMQ on a closed port',
    {
      name: 'BROKER',
      transport: Transport.RMQ,
      options: { urls: ['amqp://rmq-user-7:rmq-pw-7@127.0.0.1:5999'], queue: 'outbox-redaction' },
    },
    ['rmq-user-7', 'rmq-pw-7'],
  ],
  [
    'RabbitMQ with a wrong password',
    {
      name: 'BROKER',
      transport: Transport.RMQ,
      options: { urls: ['amqp://guest:wrong-pw-8@127.0.0.1:5672'], queue: 'outbox-redaction' },
    },
    ['wrong-pw-8'],
  ],
  [
    'NATS on a closed port',
    {
      name: 'BROKER',
      transport: Transport.NATS,
      options: { servers: ['nats://nats-user-9:nats-pw-9@127.0.0.1:4299'], maxReconnectAttempts: 0 },
    },
    ['nats-user-9', 'nats-pw-9'],
  ],
  [
    'Redis on a closed port',
    {
      name: 'BROKER',
      transport: Transport.REDIS,
      options: { host: '127.0.0.1', port: 6399, password: 'redis-pw-10', retryAttempts: 1000, retryDelay: 200 },
    },
    ['redis-pw-10'],
  ],
  [
    'MQTT on a closed port',
    {
      name: 'BROKER',
      transport: Transport.MQTT,
      options: { url: 'mqtt://127.0.0.1:1899', username: 'mq-user-11', password: 'mq-pw-11', reconnectPeriod: 0 },
    },
    ['mq-user-11', 'mq-pw-11'],
  ],
];

// Transports do not depend on the database: the first backend only, like brokers.e2e-spec.ts.
describe('secrets of transports stay out of errors', () => {
  let app: TestApp | undefined;
  afterEach(async () => {
    await app?.dispose();
    app = undefined;
  });

  it.each(WRONG)(
    '%s: none of its credentials is logged, stored, emitted or grouped',
    async (_name, client, secrets) => {
      app = await brokerApp(client, (proxy) => ({
        transports: [new ClientProxyTransport('broker', proxy, { pattern: () => 'outbox-redaction' })],
        routes: [{ topic: 'order.*', transport: 'broker', timeoutMs: 3000 }],
        retry: ONE_ATTEMPT,
      }));
      const watch = errorPlaces(app);
      await app.txHost.withTransaction(() => app!.outbox.publish('order.placed', { n: 1 }));
      expect(await app.worker.drain()).toMatchObject({ delivered: 0, deadLettered: 1 });
      const [row] = await outboxRows(app);
      expect(String(row.last_error)).toMatch(/^transport:broker: /);
      expect(leaks(await watch.places(), secrets)).toEqual([]);
    },
  );

  describe('a webhook refused with its request echoed back', () => {
    let server: Server;
    let url: string;
    beforeAll(async () => {
      // A receiver that refuses the event and, as some do, echoes what it was sent.
      server = createServer((req, res) => {
        req.resume();
        res.writeHead(401, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({ authorization: req.headers.authorization, signature: req.headers['x-outbox-signature'] }),
        );
      });
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    });
    afterAll(() => new Promise((resolve) => server.close(resolve)));

    it('keeps its Authorization header and signing secret out of logs, rows, events and failure groups', async () => {
      app = await createTestApp({
        backend: backends()[0],
        outbox: {
          transports: [
            new WebhookTransport('partners', {
              url,
              headers: { Authorization: 'Bearer wh-tok-777' },
              secret: 'wh-signing-secret-3',
            }),
          ],
          routes: [{ topic: 'order.*', transport: 'partners' }],
          retry: ONE_ATTEMPT,
        },
      });
      const watch = errorPlaces(app);
      await app.txHost.withTransaction(() => app!.outbox.publish('order.placed', { n: 1 }));
      expect(await app.worker.drain()).toMatchObject({ deadLettered: 1 });
      const [row] = await outboxRows(app);
      // The receiver's answer is kept, with the echoed credential hidden.
      expect(String(row.last_error)).toContain('answered 401');
      expect(String(row.last_error)).toContain('\\"authorization\\":\\"[redacted]\\"');
      expect(leaks(await watch.places(), ['wh-tok-777', 'wh-signing-secret-3'])).toEqual([]);
    });
  });
});
