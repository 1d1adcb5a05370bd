import { TransactionHost } from '@nestjs-cls/transactional';
import { Injectable } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  OutboxConfigurationError,
  OutboxHandler,
  OutboxModule,
  OutboxNonRetryableError,
  OutboxService,
  OutboxTesting,
  WebhookTransport,
  type OutboxMessage,
} from '../../../lib';
import { backends, removeSqliteFile, sqliteBackends, sqliteFile, uniqueName } from '../../fixtures/backends';
import { clsImports, createTestApp, outboxRows, typeOrmOptions, type TestApp } from '../../fixtures/test-app';
import { drained } from '../../fixtures/drain-result';

@Injectable()
class OrderHandlers {
  readonly mailed: string[] = [];
  failuresLeft = 0;

  // A production-like backoff: a minute before the first retry.
  @OutboxHandler('order.placed', { retry: { initialDelayMs: 60_000, maxDelayMs: 60_000 } })
  mail(message: OutboxMessage<{ orderId: string }>) {
    if (this.failuresLeft > 0) {
      this.failuresLeft--;
      throw new Error('mail server said 451');
    }
    this.mailed.push(message.payload.orderId);
  }

  @OutboxHandler('order.edited')
  edit(message: OutboxMessage<{ lines: string[] }>) {
    message.payload.lines.push('added by the handler');
  }

  /** Set by the test: `<table>_orders` and its dialect. */
  orders?: { table: string; sql: (text: string) => string };

  @OutboxHandler('order.booked', { transactional: true })
  async book(message: OutboxMessage<{ orderId: string }>) {
    const { table, sql } = this.orders!;
    await message.manager!.query(sql(`INSERT INTO "${table}" ("id", "note") VALUES (?, ?)`), [
      message.payload.orderId,
      'booked',
    ]);
    if (this.failuresLeft > 0) {
      this.failuresLeft--;
      throw new Error('booking refused');
    }
  }

  @OutboxHandler('order.poisoned')
  refuse() {
    throw new OutboxNonRetryableError('malformed order');
  }
}

describe.each(backends())('OutboxTesting on %s', (backend) => {
  let app: TestApp;
  let handlers: OrderHandlers;

  beforeEach(async () => {
    app = await createTestApp({
      backend,
      withSchedule: true,
      providers: [OrderHandlers],
      outbox: {
        // What an application configures for production: a scheduled worker polling often, a long
        // backoff, and a route to a webhook nobody listens on.
        worker: { enabled: true, pollIntervalMs: 10 },
        retry: { initialDelayMs: 30_000, maxAttempts: 3 },
        transports: [new WebhookTransport('hooks', { secret: 'shh', timeoutMs: 1000 })],
        routes: [{ topic: 'order.*', transport: 'hooks', options: { url: 'http://127.0.0.1:9/nobody' } }],
      },
      build: (builder) => OutboxTesting.override(builder),
    });
    handlers = app.module.get(OrderHandlers);
  });
  afterEach(() => app.dispose());

  const publish = (topic: string, payload: unknown) =>
    app.txHost.withTransaction(() => app.outbox.publish(topic, payload));

  it('schedules no worker and no retention: nothing is delivered until drain()', async () => {
    const outbox = OutboxTesting.from(app.module);
    expect(app.module.get(SchedulerRegistry).getIntervals()).toEqual([]);

    const { id } = await publish('order.placed', { orderId: 'o-1' });
    expect(outbox.handled()).toEqual([]);
    expect((await outboxRows(app)).map((row) => row.status)).toEqual(['pending']);

    expect(await outbox.drain()).toEqual(drained({ delivered: 1 }));
    expect(outbox.handled('order.placed')).toEqual([
      {
        id,
        topic: 'order.placed',
        key: null,
        payload: { orderId: 'o-1' },
        headers: {},
        attempt: 1,
        createdAt: expect.any(Date) as Date,
        handler: 'OrderHandlers.mail',
      },
    ]);
    expect(handlers.mailed).toEqual(['o-1']);
  });

  it('retries at once: one drain() takes a failing handler through its retries', async () => {
    const outbox = OutboxTesting.from(app.module);
    handlers.failuresLeft = 1;
    const { id } = await publish('order.placed', { orderId: 'o-2' });

    expect(await outbox.drain()).toEqual(drained({ delivered: 1, failed: 1 }));
    expect(outbox.failed('order.placed')).toEqual([
      expect.objectContaining({ id, handler: 'OrderHandlers.mail', attempt: 1, error: 'Error: mail server said 451' }),
    ]);
    expect(outbox.handled<{ orderId: string }>('order.placed')).toEqual([
      expect.objectContaining({ id, handler: 'OrderHandlers.mail', attempt: 2, payload: { orderId: 'o-2' } }),
    ]);
    expect(outbox.handled()[0]).not.toHaveProperty('error');
  });

  it('runs a transactional handler in its transaction, and records its calls as any other', async () => {
    const outbox = OutboxTesting.from(app.module);
    handlers.orders = { table: app.ordersTable, sql: (text) => app.sql(text) };
    handlers.failuresLeft = 1;
    const { id } = await publish('order.booked', { orderId: 'o-9' });
    expect(await outbox.drain()).toEqual(drained({ delivered: 1, failed: 1 }));
    expect(outbox.failed('order.booked')).toEqual([
      expect.objectContaining({ id, handler: 'OrderHandlers.book', attempt: 1, error: 'Error: booking refused' }),
    ]);
    const [handled] = outbox.handled('order.booked');
    expect(handled).toMatchObject({ id, handler: 'OrderHandlers.book', attempt: 2 });
    expect(handled).not.toHaveProperty('manager');
    // The first attempt's insert was rolled back with it: the second could insert the same id.
    expect(await app.raw.query(`SELECT "id" FROM "${app.ordersTable}"`)).toEqual([{ id: 'o-9' }]);
  });

  it('dead-letters after the last attempt within one drain(), and records it', async () => {
    const outbox = OutboxTesting.from(app.module);
    handlers.failuresLeft = 3;
    const { id } = await app.txHost.withTransaction(() =>
      app.outbox.publish('order.placed', { orderId: 'o-3' }, { key: 'o-3', headers: { 'x-trace': 't3' } }),
    );

    expect(await outbox.drain()).toEqual(drained({ failed: 2, deadLettered: 1 }));
    expect(outbox.failed().map((run) => run.attempt)).toEqual([1, 2, 3]);
    expect(outbox.deadLettered<{ orderId: string }>()).toEqual([
      {
        id,
        topic: 'order.placed',
        key: 'o-3',
        payload: { orderId: 'o-3' },
        headers: { 'x-trace': 't3' },
        attempt: 3,
        error: expect.stringContaining('451') as string,
      },
    ]);
    expect((await outboxRows(app))[0].status).toBe('dead');
  });

  it('records a non-retryable failure as a dead letter at the first attempt', async () => {
    const outbox = OutboxTesting.from(app.module);
    const { id } = await publish('order.poisoned', {});
    expect((await outbox.drain()).deadLettered).toBe(1);
    expect(outbox.deadLettered('order.poisoned')).toEqual([
      expect.objectContaining({
        id,
        topic: 'order.poisoned',
        payload: {},
        attempt: 1,
        error: expect.stringContaining('malformed order') as string,
      }),
    ]);
  });

  it('routes to an in-memory stand-in of each transport, under its name, and can make it fail', async () => {
    const outbox = OutboxTesting.from(app.module);
    const hooks = outbox.transport('hooks');
    hooks.failNext(1);
    const { id } = await publish('order.placed', { orderId: 'o-4' });

    const result = await outbox.drain();
    expect(result).toEqual(drained({ delivered: 1, failed: 1 }));
    expect(outbox.sent('order.placed')).toEqual([
      expect.objectContaining({ id, topic: 'order.placed', payload: { orderId: 'o-4' }, attempt: 2 }),
    ]);
    expect(hooks.messages()).toEqual(outbox.sent());
    // The handler succeeded on attempt 1 and was not called again for the route's retry.
    expect(handlers.mailed).toEqual(['o-4']);
  });

  it('records the message as the handler was given it, not as the handler left it', async () => {
    const outbox = OutboxTesting.from(app.module);
    await publish('order.edited', { lines: ['first'] });
    await outbox.drain();
    expect(outbox.handled('order.edited')).toEqual([expect.objectContaining({ payload: { lines: ['first'] } })]);
  });

  it('forgets its records on clear()', async () => {
    const outbox = OutboxTesting.from(app.module);
    await publish('order.placed', { orderId: 'o-5' });
    await outbox.drain();
    expect(outbox.handled()).toHaveLength(1);
    expect(outbox.sent()).toHaveLength(1);
    outbox.clear();
    expect(outbox.handled()).toEqual([]);
    expect(outbox.sent()).toEqual([]);
  });

  it('names the transports it has when asked for another', () => {
    const error = (() => {
      try {
        OutboxTesting.from(app.module).transport('rabbit');
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(OutboxConfigurationError);
    expect((error as Error).message).toMatch(/no transport "rabbit"; the module has "hooks"/);
  });
});

// What these check does not depend on the database (the loop above covers every one): one SQLite file.
describe.each(sqliteBackends().slice(0, 1))('OutboxTesting with forRootAsync and without override (%s)', (backend) => {
  const file = sqliteFile();
  afterAll(() => removeSqliteFile(file));

  it('applies to the options a forRootAsync factory returns', async () => {
    const table = uniqueName();
    const moduleRef = await OutboxTesting.override(
      Test.createTestingModule({
        imports: [
          TypeOrmModule.forRoot(typeOrmOptions(backend, table, file)),
          ...clsImports(),
          OutboxModule.forRootAsync({ tableName: table, useFactory: () => ({ retry: { initialDelayMs: 50_000 } }) }),
        ],
        providers: [OrderHandlers],
      }),
    ).compile();
    await moduleRef.init();
    try {
      const outbox = OutboxTesting.from(moduleRef);
      moduleRef.get(OrderHandlers).failuresLeft = 1;
      await moduleRef
        .get(TransactionHost)
        .withTransaction(() => moduleRef.get(OutboxService).publish('order.placed', { orderId: 'async' }));
      expect(await outbox.drain()).toMatchObject({ delivered: 1, failed: 1 });
      expect(OutboxTesting.from(moduleRef, table)).toBe(outbox);
    } finally {
      await moduleRef.close();
    }
  });

  it('refuses from() on a module built without override(), saying what to do', async () => {
    const table = uniqueName();
    const moduleRef = await Test.createTestingModule({
      imports: [
        TypeOrmModule.forRoot(typeOrmOptions(backend, table, file)),
        ...clsImports(),
        OutboxModule.forRoot({ tableName: table, worker: { enabled: false } }),
      ],
    }).compile();
    try {
      expect(() => OutboxTesting.from(moduleRef)).toThrow(/build the testing module with OutboxTesting.override/);
      expect(() => OutboxTesting.from(moduleRef, 'elsewhere')).toThrow(/no OutboxModule with table "elsewhere"/);
    } finally {
      await moduleRef.close();
    }
  });
});
