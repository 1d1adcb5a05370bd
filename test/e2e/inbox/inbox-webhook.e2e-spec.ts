import { randomUUID } from 'node:crypto';
import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  type NestInterceptor,
  Post,
  UseInterceptors,
} from '@nestjs/common';
import { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { type Observable, tap } from 'rxjs';
import { OutboxInbox, WebhookTransport, type WebhookEnvelope } from '../../../lib';
import { signWebhookBody } from '../../../lib/transports/webhook/webhook-signature';
import { backends, type BackendName, sql, uniqueName } from '../../fixtures/backends';
import { createTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';
import { inboxTestApp } from '../../fixtures/inbox-app';

const SECRET = 'wh-inbox-secret-1';

/** What the receiver did, read by the tests. */
@Injectable()
class Received {
  orders = '';
  backend: BackendName = 'better-sqlite3';
  calls: string[] = [];
  /** Answer 500 after the handler's transaction committed, this many more times. */
  failAfterCommit = 0;
}

/** Outside the inbox: fails a request after the inbox's transaction committed, as a lost response would. */
@Injectable()
class FailAfterCommit implements NestInterceptor {
  constructor(private readonly received: Received) {}
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      tap(() => {
        if (this.received.failAfterCommit > 0) {
          this.received.failAfterCommit--;
          throw new Error('the response was lost after the commit');
        }
      }),
    );
  }
}

@Controller('hooks')
@UseInterceptors(FailAfterCommit)
class Hooks {
  constructor(
    private readonly received: Received,
    private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
  ) {}

  private async write(envelope: WebhookEnvelope, note: string) {
    this.received.calls.push(envelope.id);
    await this.txHost.tx.query(
      sql(this.received.backend, `INSERT INTO "${this.received.orders}" ("id", "note") VALUES (?, ?)`),
      [envelope.id, note],
    );
    return { charged: envelope.id };
  }

  @Post('billing')
  @OutboxInbox('billing')
  charge(@Body() envelope: WebhookEnvelope) {
    return this.write(envelope, 'billing');
  }

  @Post('open')
  @OutboxInbox('open', { signature: false })
  open(@Body() envelope: WebhookEnvelope) {
    return this.write(envelope, 'open');
  }
}

describe.each(backends())('an @OutboxInbox() route receiving the outbox’s webhooks on %s', (backend) => {
  let receiver: TestApp;
  let sender: TestApp;
  let received: Received;

  beforeAll(async () => {
    receiver = await createTestAppWithInbox(backend);
    received = receiver.module.get(Received);
    sender = await createTestApp({
      backend,
      outbox: {
        retry: { initialDelayMs: 0, maxDelayMs: 0 },
        transports: [new WebhookTransport('hooks', { url: `${receiver.url}/hooks/billing`, secret: SECRET })],
        routes: [{ topic: 'billing.charged', transport: 'hooks' }],
      },
    });
  });
  afterAll(async () => {
    await sender?.dispose();
    await receiver?.dispose();
  });
  beforeEach(async () => {
    await receiver.raw.query(`DELETE FROM "${receiver.ordersTable}"`);
    await receiver.raw.query(`DELETE FROM "${receiver.table}_inbox"`);
    Object.assign(received, { calls: [], failAfterCommit: 0, orders: receiver.ordersTable, backend });
  });

  const orders = async () =>
    (await receiver.raw.query<{ id: string }>(`SELECT "id" FROM "${receiver.ordersTable}"`)).map((r) => r.id);
  const post = (path: string, body: string, headers: Record<string, string>) =>
    fetch(`${receiver.url}/hooks/${path}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...headers },
      body,
    });
  const envelope = (id: string) =>
    JSON.stringify({
      id,
      topic: 'billing.charged',
      key: null,
      createdAt: new Date().toISOString(),
      attempt: 1,
      headers: {},
      payload: {},
    });

  it('applies an event once when the receiver answered 500 after writing and the outbox retried', async () => {
    received.failAfterCommit = 1;
    const [{ id }] = await sender.txHost.withTransaction(() =>
      sender.outbox.publishMany([{ topic: 'billing.charged', payload: { amount: 5 } }]),
    );
    expect(await sender.worker.drain()).toMatchObject({ delivered: 1, failed: 1 });
    // The first request wrote and committed, then got a 500; the retry was recognised and skipped.
    expect(received.calls).toEqual([id]);
    expect(await orders()).toEqual([id]);
    const [row] = await outboxRows(sender);
    expect(row).toMatchObject({ status: 'delivered' });
    expect(Number(row.attempts)).toBe(2);
  });

  it('refuses a request without a valid signature with 401, writing nothing', async () => {
    const id = randomUUID();
    const body = envelope(id);
    const unsigned = await post('billing', body, { 'Idempotency-Key': id });
    expect(unsigned.status).toBe(401);
    expect(((await unsigned.json()) as { message: string }).message).toContain('no x-outbox-signature header');
    const forged = await post('billing', body, {
      'Idempotency-Key': id,
      'X-Outbox-Signature': signWebhookBody(body, 'another-secret'),
    });
    expect(forged.status).toBe(401);
    // Signed over other bytes than those sent.
    const altered = await post('billing', body.replace('{}}', '{"amount":1}}'), {
      'Idempotency-Key': id,
      'X-Outbox-Signature': signWebhookBody(body, SECRET),
    });
    expect(altered.status).toBe(401);
    expect(received.calls).toEqual([]);
    expect(await orders()).toEqual([]);
    expect(await receiver.raw.query(`SELECT * FROM "${receiver.table}_inbox"`)).toEqual([]);
  });

  it.each([
    ['no Idempotency-Key', undefined, /carries no outbox message id/],
    ['an Idempotency-Key that is no UUID', 'order-17', /must be a UUID/],
  ])('answers a signed request with %s 400, writing nothing', async (_, key, message) => {
    const body = envelope(randomUUID());
    const response = await post('billing', body, {
      ...(key === undefined ? {} : { 'Idempotency-Key': key }),
      'X-Outbox-Signature': signWebhookBody(body, SECRET),
    });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { message: string }).message).toMatch(message);
    expect(received.calls).toEqual([]);
    expect(await receiver.raw.query(`SELECT * FROM "${receiver.table}_inbox"`)).toEqual([]);
  });

  it('deduplicates without the signature where the route says so', async () => {
    const id = randomUUID();
    const first = await post('open', envelope(id), { 'Idempotency-Key': id });
    const second = await post('open', envelope(id), { 'Idempotency-Key': id });
    expect([first.status, second.status]).toEqual([201, 201]);
    expect(await first.json()).toEqual({ charged: id });
    // The copy's handler was skipped: an empty answer.
    expect(await second.text()).toBe('');
    expect(received.calls).toEqual([id]);
  });
});

function createTestAppWithInbox(backend: BackendName) {
  return inboxTestApp(backend, { webhook: { secret: SECRET } }, uniqueName(), {
    controllers: [Hooks],
    providers: [Received, FailAfterCommit],
    rawBody: true,
  });
}

describe('an @OutboxInbox() route without a configured secret', () => {
  it('refuses every request with 500, saying why in the log, rather than accept it unsigned', async () => {
    const backend = backends()[0];
    const app = await inboxTestApp(backend, {}, uniqueName(), {
      controllers: [Hooks],
      providers: [Received, FailAfterCommit],
      rawBody: true,
    });
    try {
      Object.assign(app.module.get(Received), { orders: app.ordersTable, backend });
      const id = randomUUID();
      const response = await fetch(`${app.url}/hooks/billing`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Idempotency-Key': id },
        body: JSON.stringify({ id }),
      });
      expect(response.status).toBe(500);
      expect(app.logger.lines.some((l) => l.level === 'error' && l.message.includes('inbox.webhook.secret'))).toBe(
        true,
      );
      expect(app.module.get(Received).calls).toEqual([]);
      expect(await app.raw.query(`SELECT * FROM "${app.table}_inbox"`)).toEqual([]);
    } finally {
      await app.dispose();
    }
  });
});
