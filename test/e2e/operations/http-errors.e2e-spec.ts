import { Body, Controller, Get, Injectable, Param, ParseUUIDPipe, Post, Query } from '@nestjs/common';
import { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { randomUUID } from 'node:crypto';
import { OutboxHandler, OutboxNonRetryableError, OutboxOperations, OutboxService, requireChanged } from '../../../lib';
import { backends } from '../../fixtures/backends';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

/** The admin controller of docs/operations.md, as it stands there. */
@Controller('admin/outbox')
class OutboxAdminController {
  constructor(private readonly operations: OutboxOperations) {}

  @Get('dead')
  deadLetters(@Query('cursor') cursor?: string) {
    return this.operations.find({ status: 'dead' }, { limit: 50, cursor });
  }

  @Get('events/:id')
  event(@Param('id', ParseUUIDPipe) id: string) {
    return this.operations.getOrFail(id);
  }

  @Post('events/:id/redrive')
  async redrive(@Param('id', ParseUUIDPipe) id: string) {
    return requireChanged(await this.operations.redrive({ ids: [id] }));
  }
}

/** An application's own endpoints that reach the library's errors. */
@Controller('app')
class AppController {
  constructor(
    private readonly operations: OutboxOperations,
    private readonly outbox: OutboxService,
    private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
  ) {}

  @Post('redrive-delivered')
  redriveDelivered() {
    return this.operations.redrive({ filter: { status: 'delivered' } });
  }

  @Post('publish')
  publish(@Body() body: { dedupeKey: string; payload: unknown }) {
    return this.txHost.withTransaction(() =>
      this.outbox.publish('order.placed', body.payload, { dedupeKey: body.dedupeKey }),
    );
  }
}

@Injectable()
class Handlers {
  @OutboxHandler('order.placed')
  placed() {}

  @OutboxHandler('order.doomed')
  doomed() {
    throw new OutboxNonRetryableError('warehouse gone');
  }
}

describe.each(backends())('operations over HTTP on %s', (backend) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await createTestApp({ backend, providers: [Handlers], controllers: [OutboxAdminController, AppController] });
  });
  afterAll(() => app.dispose());

  const call = async (method: 'GET' | 'POST', path: string, body?: unknown) => {
    const response = await fetch(`${app.url}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const published = (topic: string) => app.txHost.withTransaction(() => app.outbox.publish(topic, { n: 1 }));

  it('answers 404 for an unknown id, 200 with the event for a known one', async () => {
    const unknown = randomUUID();
    expect(await call('GET', `/admin/outbox/events/${unknown}`)).toEqual({
      status: 404,
      body: { statusCode: 404, message: `No outbox event has the id ${unknown}` },
    });
    const { id } = await published('order.placed');
    const found = await call('GET', `/admin/outbox/events/${id}`);
    expect(found.status).toBe(200);
    expect(found.body).toMatchObject({ id, topic: 'order.placed', state: 'due' });
  });

  it('answers 400 for a bad filter, and changes nothing', async () => {
    const { id } = await published('order.doomed');
    await app.worker.drain();
    expect(await call('POST', '/app/redrive-delivered')).toEqual({
      status: 400,
      body: {
        statusCode: 400,
        message:
          'Invalid outbox selection.filter.status: redrive applies to dead events only: ' +
          'leave status out or set it to "dead"',
      },
    });
    expect((await app.module.get(OutboxOperations).get(id))?.state).toBe('dead');
  });

  it('redrives a dead letter (201), then answers 409 for it: no longer a dead letter; 404 for an unknown id', async () => {
    const { id } = await published('order.doomed');
    await app.worker.drain();
    const first = await call('POST', `/admin/outbox/events/${id}/redrive`);
    expect(first).toMatchObject({ status: 201, body: { matched: 1, changed: 1, skipped: [] } });
    const again = await call('POST', `/admin/outbox/events/${id}/redrive`);
    expect(again).toEqual({
      status: 409,
      body: {
        statusCode: 409,
        message: `The outbox event ${id} is due: the operation did not apply to it, nothing changed`,
      },
    });
    const unknown = randomUUID();
    expect(await call('POST', `/admin/outbox/events/${unknown}/redrive`)).toEqual({
      status: 404,
      body: { statusCode: 404, message: `No outbox event has the id ${unknown}` },
    });
  });

  it('answers 409 when a dedupe key is published again with other content, and writes nothing', async () => {
    const dedupeKey = `order-${randomUUID()}`;
    expect((await call('POST', '/app/publish', { dedupeKey, payload: { n: 1 } })).status).toBe(201);
    const conflict = await call('POST', '/app/publish', { dedupeKey, payload: { n: 2 } });
    expect(conflict).toEqual({
      status: 409,
      body: { statusCode: 409, message: expect.stringMatching(/already exists .* with different content/) as string },
    });
    expect((await app.module.get(OutboxOperations).find({ dedupeKey })).items.map((e) => e.payload)).toEqual([
      { n: 1 },
    ]);
  });
});
