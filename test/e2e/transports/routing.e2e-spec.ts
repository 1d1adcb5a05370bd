import { Injectable } from '@nestjs/common';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  InMemoryTransport,
  OutboxConfigurationError,
  OutboxHandler,
  verifyWebhookSignature,
  WebhookTransport,
  type OutboxMessage,
  type OutboxModuleOptions,
} from '../../../lib';
import { backends } from '../../fixtures/backends';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';
import { RETRY_TOMORROW } from '../../fixtures/retry';

@Injectable()
class Local {
  seen: OutboxMessage[] = [];
  @OutboxHandler('order.placed')
  handle(m: OutboxMessage) {
    this.seen.push(m);
  }
}

/** A real HTTP receiver whose answers the test scripts, one per request. */
class Receiver {
  readonly requests: Array<{ headers: IncomingMessage['headers']; body: string }> = [];
  answers: Array<{ status: number; headers?: Record<string, string> }> = [];
  private server: Server | undefined;
  url = '';

  async start() {
    this.server = createServer((req: IncomingMessage, res: ServerResponse) => {
      let body = '';
      req.on('data', (chunk) => (body += chunk));
      req.on('end', () => {
        this.requests.push({ headers: req.headers, body });
        const answer = this.answers.shift() ?? { status: 204 };
        res.writeHead(answer.status, answer.headers).end();
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hooks/orders`;
  }

  stop() {
    return new Promise<void>((resolve) => {
      this.server?.closeAllConnections();
      this.server?.close(() => resolve());
    });
  }
}

// Routing does not depend on the database: once per TypeORM line, on its first backend.
describe('routes to transports, beside handlers', () => {
  let app: TestApp;
  let receiver: Receiver;
  let memory: InMemoryTransport;

  beforeEach(async () => {
    receiver = new Receiver();
    await receiver.start();
    memory = new InMemoryTransport('audit');
  });
  afterEach(async () => {
    await app?.dispose();
    app = undefined as unknown as TestApp;
    await receiver.stop();
  });

  async function start(extra: Partial<OutboxModuleOptions> = {}) {
    app = await createTestApp({
      backend: backends()[0],
      providers: [Local],
      outbox: {
        transports: [memory, new WebhookTransport('hooks', { secret: 'shh', timeoutMs: 2000 })],
        routes: [
          { topic: 'order.*', transport: 'hooks', options: { url: receiver.url } },
          { topic: '#', transport: 'audit' },
        ],
        retry: { maxAttempts: 5, initialDelayMs: 0, maxDelayMs: 0 },
        ...extra,
      },
    });
  }

  it('sends an event to every matching route and handler, each tracked on its own', async () => {
    await start();
    receiver.answers = [{ status: 503 }];
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish('order.placed', { n: 1 }, { key: 'o-1' }));
    await app.txHost.withTransaction(() => app.outbox.publish('invoice.sent', { n: 2 }));

    const result = await app.worker.drain();
    expect(result).toMatchObject({ delivered: 2, failed: 1 });
    // The webhook failed once; the retry went to it alone.
    expect(receiver.requests).toHaveLength(2);
    expect(app.module.get(Local).seen).toHaveLength(1);
    expect(
      memory
        .messages()
        .map((m) => m.topic)
        .sort(),
    ).toEqual(['invoice.sent', 'order.placed']);
    const row = (await outboxRows(app)).find((r) => r.id === id)!;
    const completed = (
      typeof row.completed_handlers === 'string' ? JSON.parse(row.completed_handlers) : row.completed_handlers
    ) as string[];
    // Recorded when the first attempt failed: the two targets that the retry then skipped.
    expect([...completed].sort()).toEqual(['Local.handle', 'transport:audit']);
    expect(row.status).toBe('delivered');

    const [, delivered] = receiver.requests;
    expect(delivered.headers['idempotency-key']).toBe(id);
    expect(verifyWebhookSignature(delivered.body, String(delivered.headers['x-outbox-signature']), 'shh')).toBe(true);
    expect(JSON.parse(delivered.body)).toMatchObject({
      id,
      topic: 'order.placed',
      key: 'o-1',
      attempt: 2,
      payload: { n: 1 },
    });
  });

  it('waits as long as Retry-After asks, by the database clock', async () => {
    await start();
    receiver.answers = [{ status: 429, headers: { 'Retry-After': '120' } }];
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish('order.placed', {}));
    expect(await app.worker.drain()).toMatchObject({ failed: 1 });
    const [{ due }] = await app.raw.query<{ due: number }>(
      app.backend === 'postgres'
        ? `SELECT extract(epoch FROM ("available_at" - now())) AS due FROM "${app.table}" WHERE "id" = ?`
        : app.backend === 'mariadb'
          ? `SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), "available_at") AS due FROM "${app.table}" WHERE "id" = ?`
          : `SELECT (julianday("available_at") - julianday('now')) * 86400 AS due FROM "${app.table}" WHERE "id" = ?`,
      [id],
    );
    expect(Number(due)).toBeGreaterThan(110);
    expect(Number(due)).toBeLessThanOrEqual(120);
  });

  it('dead-letters at once on a 4xx the receiver will always answer', async () => {
    await start();
    receiver.answers = [{ status: 410 }];
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish('order.placed', {}));
    expect(await app.worker.drain()).toMatchObject({ deadLettered: 1 });
    const row = (await outboxRows(app)).find((r) => r.id === id)!;
    expect(row.status).toBe('dead');
    expect(String(row.last_error)).toMatch(/transport:hooks: .*410/);
  });

  it('hands the events it delivers together to sendMany in one call, each judged on its own', async () => {
    const calls: string[][] = [];
    const batching = {
      name: 'bulk',
      send: () => Promise.reject(new Error('send() must not be used when sendMany() exists')),
      sendMany: (items: Array<{ message: OutboxMessage }>) => {
        calls.push(items.map((i) => (i.message.payload as { n: number }).n.toString()));
        return Promise.resolve(
          items.map((i) =>
            (i.message.payload as { n: number }).n === 3
              ? ({ status: 'rejected', reason: new Error('broker refused item 3') } as const)
              : ({ status: 'fulfilled', value: undefined } as const),
          ),
        );
      },
    };
    await start({
      transports: [batching],
      routes: [{ topic: 'bulk.*', transport: 'bulk' }],
      worker: { enabled: false, batchSize: 10, concurrency: 10 },
      retry: { maxAttempts: 5, ...RETRY_TOMORROW },
    });
    await app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: 6 }, (_, n) => ({ topic: 'bulk.item', payload: { n } }))),
    );
    expect(await app.worker.drain()).toMatchObject({ delivered: 5, failed: 1 });
    expect(calls).toHaveLength(1);
    expect([...calls[0]].sort()).toEqual(['0', '1', '2', '3', '4', '5']);
    const failed = (await outboxRows(app)).filter((r) => r.status === 'pending');
    expect(failed).toHaveLength(1);
    expect(String(failed[0].last_error)).toContain('transport:bulk: Error: broker refused item 3');
  });

  it.each([
    ['a route naming an unknown transport', { routes: [{ topic: '#', transport: 'kafka' }] }, 'routes[0].transport'],
    [
      'a webhook route without a usable URL',
      { routes: [{ topic: '#', transport: 'hooks', options: { url: 'ftp://x' } }] },
      'routes[0].options',
    ],
  ])('refuses to start with %s', async (_name, extra, option) => {
    const error = (await start(extra as Partial<OutboxModuleOptions>).catch(
      (e: unknown) => e,
    )) as OutboxConfigurationError;
    expect(error).toBeInstanceOf(OutboxConfigurationError);
    expect(error.option).toBe(option);
  });
});
