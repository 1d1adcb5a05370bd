import { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  DataSource,
  EventSubscriber,
  QueryFailedError,
  type AfterQueryEvent,
  type BeforeQueryEvent,
  type EntitySubscriberInterface,
  type Logger as TypeOrmLogger,
} from 'typeorm';
import {
  OutboxDedupeConflictError,
  OutboxHandler,
  OutboxModule,
  OutboxOperations,
  OutboxPayloadTooLargeError,
  OutboxTransactionRequiredError,
  OutboxService,
  OutboxValidationError,
  OutboxWorker,
  type OutboxMessage,
} from '../../../lib';
import {
  backends,
  describeOn,
  describeEachServer,
  isSqlite,
  removeSqliteFile,
  sql,
  sqliteFile,
  uniqueName,
} from '../../fixtures/backends';
import { deferred, eventually } from '../../fixtures/eventually';
import {
  clsImports,
  createTestApp,
  emptyTestApp,
  outboxRows,
  typeOrmOptions,
  type TestApp,
} from '../../fixtures/test-app';

@Injectable()
class Recorder {
  readonly seen: OutboxMessage[] = [];
  @OutboxHandler('order.placed')
  onPlaced(message: OutboxMessage) {
    this.seen.push(message);
  }
}

describe.each(backends())('publish on %s', (backend) => {
  let app: TestApp;
  let recorder: Recorder;
  // One app for the suite; each test starts on an empty table and with nothing seen.
  beforeAll(async () => {
    app = await createTestApp({ backend, providers: [Recorder] });
    recorder = app.module.get(Recorder);
  });
  beforeEach(async () => {
    await emptyTestApp(app);
    recorder.seen.length = 0;
  });
  afterAll(() => app.dispose());

  const insertOrder = (id: string) =>
    app.txHost.tx.query(app.sql(`INSERT INTO "${app.ordersTable}" ("id", "note") VALUES (?, ?)`), [id, 'x']);
  const orderCount = async () =>
    Number((await app.raw.query<{ n: number }>(`SELECT count(*) AS n FROM "${app.ordersTable}"`))[0].n);

  it('commits the business row and the event together', async () => {
    const { id } = await app.txHost.withTransaction(async () => {
      await insertOrder('o-1');
      return app.outbox.publish('order.placed', { orderId: 'o-1' }, { key: 'o-1', headers: { 'x-trace': 't1' } });
    });
    expect(await orderCount()).toBe(1);
    const rows = await outboxRows(app);
    expect(rows).toHaveLength(1);
    expect(rows[0].id).toBe(id);
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7/);

    await app.worker.drain();
    expect(recorder.seen).toHaveLength(1);
    const [message] = recorder.seen;
    expect(message).toMatchObject({
      id,
      topic: 'order.placed',
      key: 'o-1',
      payload: { orderId: 'o-1' },
      headers: { 'x-trace': 't1' },
      attempt: 1,
    });
    expect(message.createdAt).toBeInstanceOf(Date);
  });

  it('rolls back the business row and the event together: nothing is delivered', async () => {
    await expect(
      app.txHost.withTransaction(async () => {
        await insertOrder('o-2');
        await app.outbox.publish('order.placed', { orderId: 'o-2' });
        throw new Error('business rule failed');
      }),
    ).rejects.toThrow('business rule failed');
    expect(await orderCount()).toBe(0);
    expect(await outboxRows(app)).toHaveLength(0);
    expect(await app.worker.drain()).toMatchObject({ delivered: 0 });
    expect(recorder.seen).toHaveLength(0);
  });

  it('refuses to publish without a transaction and writes nothing', async () => {
    await expect(app.outbox.publish('order.placed', { a: 1 })).rejects.toThrow(OutboxTransactionRequiredError);
    // The CLS fallback manager is outside any transaction: passing it explicitly is refused too.
    await expect(app.outbox.publish('order.placed', { a: 1 }, { manager: app.dataSource.manager })).rejects.toThrow(
      /not inside a transaction/,
    );
    await expect(app.outbox.publish('order.placed', { a: 1 }, { manager: app.txHost.tx })).rejects.toThrow(
      OutboxTransactionRequiredError,
    );
    expect(await outboxRows(app)).toHaveLength(0);
  });

  it('says whose manager is outside a transaction: the one passed, or the resolver’s', async () => {
    const passed = (await app.outbox
      .publish('quick', {}, { manager: app.dataSource.manager })
      .catch((e: unknown) => e)) as Error;
    expect(passed).toBeInstanceOf(OutboxTransactionRequiredError);
    expect(passed.message).toMatch(/the EntityManager passed as \{ manager \} is not inside a transaction/);

    let resolved: unknown;
    const other = await createTestApp({ backend, outbox: { transactionResolver: () => resolved as never } });
    try {
      resolved = other.dataSource.manager;
      const fromResolver = (await other.outbox.publish('quick', {}).catch((e: unknown) => e)) as Error;
      expect(fromResolver).toBeInstanceOf(OutboxTransactionRequiredError);
      expect(fromResolver.message).toMatch(
        /the transaction resolver returned an EntityManager that is not inside a transaction/,
      );
      resolved = null;
      await expect(other.outbox.publish('quick', {})).rejects.toThrow(OutboxTransactionRequiredError);
      // The resolver is the only way in: CLS's transaction is not looked at.
      await expect(other.txHost.withTransaction(() => other.outbox.publish('quick', {}))).rejects.toThrow(
        OutboxTransactionRequiredError,
      );
      expect(await outboxRows(other)).toHaveLength(0);
    } finally {
      await other.dispose();
    }
  });

  it('joins an explicit manager of a TypeORM transaction', async () => {
    await app.dataSource.transaction(async (manager) => {
      await manager.query(app.sql(`INSERT INTO "${app.ordersTable}" ("id") VALUES (?)`), ['o-3']);
      await app.outbox.publish('order.placed', { orderId: 'o-3' }, { manager });
    });
    await expect(
      app.dataSource.transaction(async (manager) => {
        await app.outbox.publish('order.placed', { orderId: 'o-4' }, { manager });
        throw new Error('abort');
      }),
    ).rejects.toThrow('abort');
    expect((await outboxRows(app)).map((r) => JSON.parse(JSON.stringify(r.payload)) as unknown)).toHaveLength(1);
  });

  it('refuses a transaction of another DataSource', async () => {
    const path = isSqlite(backend) ? sqliteFile() : undefined;
    const other = new DataSource({
      ...typeOrmOptions(backend, app.table, path),
      migrations: [],
      migrationsRun: false,
    } as never);
    await other.initialize();
    try {
      const error = (await other
        .transaction((manager) => app.outbox.publish('quick', {}, { manager }))
        .catch((e: unknown) => e)) as Error;
      expect(error).toBeInstanceOf(OutboxTransactionRequiredError);
      expect(error.message).toMatch(/belongs to another DataSource than the outbox table/);
    } finally {
      await other.destroy();
      if (path) removeSqliteFile(path);
    }
    expect(await outboxRows(app)).toHaveLength(0);
  });

  // @nestjs/observe, which the current `nest new` wires into NestJS 12 apps, wraps every provider in a proxy this way.
  it("joins the transaction when an instrumentation wraps the app's providers, the DataSource's too, in proxies", async () => {
    const path = isSqlite(backend) ? sqliteFile() : undefined;
    const table = uniqueName();
    @Module({
      imports: [
        TypeOrmModule.forRoot(typeOrmOptions(backend, table, path)),
        ...clsImports(),
        OutboxModule.forRoot({ tableName: table, worker: { enabled: false } }),
      ],
      providers: [Recorder],
    })
    class InstrumentedApp {}
    const proxied = new Set<unknown>();
    const context = await NestFactory.createApplicationContext(InstrumentedApp, {
      logger: false,
      instrument: {
        instanceDecorator: (instance: unknown) => {
          // As it does: not the built-ins whose methods need the real object (Nest's own Map-based providers).
          if (typeof instance !== 'object' || instance === null || instance instanceof Map) return instance;
          const proxy = new Proxy(instance, {});
          proxied.add(proxy);
          return proxy;
        },
      },
    });
    try {
      const dataSource = context.get(DataSource);
      expect(proxied.has(dataSource)).toBe(true);
      const txHost = context.get<TransactionHost<TransactionalAdapterTypeOrm>>(TransactionHost);
      const { id } = await txHost.withTransaction(() => context.get(OutboxService).publish('order.placed', { n: 1 }));
      expect(await context.get(OutboxWorker).drain()).toMatchObject({ delivered: 1 });
      expect(context.get(Recorder).seen.map((m) => m.id)).toEqual([id]);
    } finally {
      const dataSource = context.get(DataSource);
      if (!path) {
        await dataSource.query(sql(backend, `DROP TABLE IF EXISTS "${table}", "${table}_migrations", "${table}_keys"`));
      }
      await context.close();
      if (path) removeSqliteFile(path);
    }
  });

  it('publishMany inserts all events of one call, or none', async () => {
    const results = await app.txHost.withTransaction(() =>
      app.outbox.publishMany(Array.from({ length: 25 }, (_, i) => ({ topic: 'order.placed', payload: { i } }))),
    );
    expect(results).toHaveLength(25);
    expect(new Set(results.map((r) => r.id)).size).toBe(25);
    await expect(
      app.txHost.withTransaction(() =>
        app.outbox.publishMany([
          { topic: 'order.placed', payload: { i: 100 } },
          { topic: 'bad topic', payload: {} },
        ]),
      ),
    ).rejects.toThrow(/publishMany item 1/);
    expect(await outboxRows(app)).toHaveLength(25);
    await app.worker.drain();
    expect(recorder.seen.map((m) => (m.payload as { i: number }).i).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 25 }, (_, i) => i),
    );
  });

  it('names the item of a publishMany call that is invalid, and only when there are several', async () => {
    const many = (await app.txHost
      .withTransaction(() =>
        app.outbox.publishMany([
          { topic: 'quick', payload: {} },
          { topic: '', payload: {} },
        ]),
      )
      .catch((e: unknown) => e)) as Error;
    expect(many).toBeInstanceOf(OutboxValidationError);
    expect(many.message).toMatch(/ \(publishMany item 1\)$/);
    const one = (await app.txHost
      .withTransaction(() => app.outbox.publishMany([{ topic: '', payload: {} }]))
      .catch((e: unknown) => e)) as Error;
    expect(one).toBeInstanceOf(OutboxValidationError);
    expect(one.message).not.toMatch(/publishMany item/);
    const single = (await app.txHost
      .withTransaction(() => app.outbox.publish('', {}))
      .catch((e: unknown) => e)) as Error;
    expect(single.message).not.toMatch(/publishMany item/);
    expect(await outboxRows(app)).toHaveLength(0);
  });

  it('returns nothing and writes nothing for an empty publishMany, inside a transaction', async () => {
    const committed = jest.fn();
    app.store.onCommitted(committed);
    expect(await app.txHost.withTransaction(() => app.outbox.publishMany([]))).toEqual([]);
    await expect(app.outbox.publishMany([])).rejects.toThrow(OutboxTransactionRequiredError);
    expect(await outboxRows(app)).toHaveLength(0);
    // Nothing was published, so the commit wakes no worker.
    expect(committed).not.toHaveBeenCalled();
    await app.txHost.withTransaction(() => app.outbox.publish('quick', {}));
    expect(committed).toHaveBeenCalledTimes(1);
  });

  describe('dedupeKey', () => {
    it('returns the first id for the same content, delivers once, and never overwrites', async () => {
      const first = await app.txHost.withTransaction(() =>
        app.outbox.publish('order.placed', { a: 1, b: [1, 2] }, { dedupeKey: 'order-7' }),
      );
      // Same content with keys in another order is the same event.
      const again = await app.txHost.withTransaction(() =>
        app.outbox.publish('order.placed', { b: [1, 2], a: 1 }, { dedupeKey: 'order-7' }),
      );
      expect(first.inserted).toBe(true);
      expect(again).toEqual({ id: first.id, inserted: false });

      await expect(
        app.txHost.withTransaction(() => app.outbox.publish('order.placed', { a: 2 }, { dedupeKey: 'order-7' })),
      ).rejects.toThrow(OutboxDedupeConflictError);
      await expect(
        app.txHost.withTransaction(() =>
          app.outbox.publish('order.placed', { a: 1, b: [1, 2] }, { dedupeKey: 'order-7', key: 'other' }),
        ),
      ).rejects.toThrow(/already exists \(id/);

      const rows = await outboxRows(app);
      expect(rows).toHaveLength(1);
      await app.worker.drain();
      expect(recorder.seen).toHaveLength(1);
      expect(recorder.seen[0].payload).toEqual({ a: 1, b: [1, 2] });
    });

    it('resolves repeats within one publishMany call', async () => {
      const results = await app.txHost.withTransaction(() =>
        app.outbox.publishMany([
          { topic: 'order.placed', payload: { n: 1 }, dedupeKey: 'k' },
          { topic: 'order.placed', payload: { n: 1 }, dedupeKey: 'k' },
          { topic: 'order.placed', payload: { n: 2 } },
        ]),
      );
      expect(results[0].inserted).toBe(true);
      expect(results[1]).toEqual({ id: results[0].id, inserted: false });
      expect(results[2].inserted).toBe(true);
      expect(await outboxRows(app)).toHaveLength(2);
    });

    it('refuses a conflict anywhere in a publishMany call before writing any of it', async () => {
      await app.txHost.withTransaction(() => app.outbox.publish('order.placed', { n: 1 }, { dedupeKey: 'k' }));
      const error = await app.txHost.withTransaction(async () => {
        // The caller swallows the error and commits: the batch must still have written nothing.
        try {
          await app.outbox.publishMany([
            { topic: 'order.placed', payload: { n: 10 } },
            { topic: 'order.placed', payload: { n: 2 }, dedupeKey: 'k' },
          ]);
        } catch (e) {
          return e;
        }
      });
      expect(error).toBeInstanceOf(OutboxDedupeConflictError);
      expect(await outboxRows(app)).toHaveLength(1);
    });

    describe('a dedupe key repeated in one publishMany call with other content', () => {
      it.each([
        ['topic', { topic: 'other.topic' }],
        ['key', { key: 'k2' }],
        ['payload', { payload: { n: 2 } }],
        ['headers', { headers: { h: '2' } }],
      ])('differs in its %s: refused, nothing written', async (_field, change) => {
        const first = { topic: 'quick', payload: { n: 1 }, key: 'k1', headers: { h: '1' }, dedupeKey: 'same' };
        const error = (await app.txHost
          .withTransaction(() => app.outbox.publishMany([first, { ...first, ...change }]))
          .catch((e: unknown) => e)) as Error;
        expect(error).toBeInstanceOf(OutboxDedupeConflictError);
        expect(error.message).toMatch(/earlier in the same publishMany call/);
        expect(await outboxRows(app)).toHaveLength(0);
      });
    });

    describe('a dedupe key already stored with other content', () => {
      it.each([
        ['topic', { topic: 'other.topic' }],
        ['headers', { headers: { h: '2' } }],
      ])('differs in its %s: refused', async (_field, change) => {
        const first = { topic: 'quick', payload: { n: 1 }, key: 'k1', headers: { h: '1' }, dedupeKey: 'same' };
        const { id } = (await app.txHost.withTransaction(() => app.outbox.publishMany([first])))[0];
        const error = (await app.txHost
          .withTransaction(() => app.outbox.publishMany([{ ...first, ...change }]))
          .catch((e: unknown) => e)) as Error;
        expect(error).toBeInstanceOf(OutboxDedupeConflictError);
        expect(error.message).toContain(id);
        expect(await outboxRows(app)).toHaveLength(1);
      });
    });

    it('takes keys and dedupe keys that differ only by trailing spaces for two (PAD SPACE collations)', async () => {
      const first = await app.txHost.withTransaction(() =>
        app.outbox.publish('order.placed', { n: 1 }, { dedupeKey: 'order-1', key: 'k1' }),
      );
      const second = await app.txHost.withTransaction(() =>
        app.outbox.publish('order.placed', { n: 2 }, { dedupeKey: 'order-1 ', key: 'k1 ' }),
      );
      expect(first.inserted && second.inserted).toBe(true);
      expect(second.id).not.toBe(first.id);
      const rows = await outboxRows(app);
      expect(rows.map((r) => [r.id, r.dedupe_key, r.key]).sort()).toEqual(
        [
          [first.id, 'order-1', 'k1'],
          [second.id, 'order-1 ', 'k1 '],
        ].sort(),
      );
      // Each spelling resolves to its own event.
      const again = await app.txHost.withTransaction(() =>
        app.outbox.publishMany([
          { topic: 'order.placed', payload: { n: 2 }, dedupeKey: 'order-1 ', key: 'k1 ' },
          { topic: 'order.placed', payload: { n: 1 }, dedupeKey: 'order-1', key: 'k1' },
        ]),
      );
      expect(again).toEqual([
        { id: second.id, inserted: false },
        { id: first.id, inserted: false },
      ]);
      const operations = app.module.get(OutboxOperations);
      expect((await operations.find({ key: 'k1' })).items.map((e) => e.id)).toEqual([first.id]);
      expect((await operations.find({ key: 'k1 ' })).items.map((e) => e.id)).toEqual([second.id]);
    });

    it('finds several stored dedupe keys in one lookup, and inserts only the new one', async () => {
      const event = (n: number, dedupeKey: string) => ({ topic: 'quick', payload: { n }, dedupeKey });
      const [a] = await app.txHost.withTransaction(() => app.outbox.publishMany([event(1, 'a')]));
      const [b] = await app.txHost.withTransaction(() => app.outbox.publishMany([event(2, 'b')]));
      const again = await app.txHost.withTransaction(() =>
        app.outbox.publishMany([event(2, 'b'), event(1, 'a'), event(3, 'c')]),
      );
      expect(again).toEqual([
        { id: b.id, inserted: false },
        { id: a.id, inserted: false },
        { id: expect.any(String) as string, inserted: true },
      ]);
      expect(await outboxRows(app)).toHaveLength(3);
    });
  });

  it('defers delivery with delayMs and availableAt', async () => {
    await app.txHost.withTransaction(async () => {
      await app.outbox.publish('order.placed', { when: 'later' }, { delayMs: 60_000 });
      await app.outbox.publish('order.placed', { when: 'future' }, { availableAt: new Date(Date.now() + 3_600_000) });
      await app.outbox.publish('order.placed', { when: 'past' }, { availableAt: new Date(Date.now() - 1000) });
      await app.outbox.publish('order.placed', { when: 'now' });
    });
    await app.worker.drain();
    expect(recorder.seen.map((m) => (m.payload as { when: string }).when).sort()).toEqual(['now', 'past']);
    expect((await app.outbox.counts()).pending).toBe(2);
  });

  describe('bad input: a typed error, and the table unchanged', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    it.each([
      ['invalid topic', () => ['', {}], OutboxValidationError, /topic: expected 1 to 128/],
      ['topic with spaces', () => ['order placed', {}], OutboxValidationError, /topic/],
      ['invalid key', () => ['t', {}, { key: 'ü' }], OutboxValidationError, /key: expected 1 to 255 printable ASCII/],
      ['BigInt payload', () => ['t', { n: BigInt(10) }], OutboxValidationError, /BigInt/],
      ['circular payload', () => ['t', cyclic], OutboxValidationError, /circular/],
      ['undefined payload', () => ['t', undefined], OutboxValidationError, /expected a JSON value/],
      [
        'oversized payload',
        () => ['t', 'x'.repeat(1024 * 1024)],
        OutboxPayloadTooLargeError,
        /over the limit of 1048576/,
      ],
      ['non-string header', () => ['t', {}, { headers: { a: 1 } }], OutboxValidationError, /header "a"/],
      ['negative delay', () => ['t', {}, { delayMs: -5 }], OutboxValidationError, /delayMs/],
      ['unknown option', () => ['t', {}, { delay: 5 }], OutboxValidationError, /unknown option "delay"/],
    ])('%s', async (_name, args, type, message) => {
      const [topic, payload, options] = args() as [string, unknown, object?];
      const error = (await app.txHost
        .withTransaction(() => app.outbox.publish(topic, payload, options as never))
        .catch((e: unknown) => e)) as Error;
      expect(error).toBeInstanceOf(type);
      expect(error.message).toMatch(message);
      expect(await outboxRows(app)).toHaveLength(0);
    });

    it.each([
      ['a string', 'fast', 'string'],
      ['null', null, 'null'],
      ['an array', ['key'], 'object'],
    ])('refuses %s as the options of publish or publishMany, or as an event', async (_name, value, got) => {
      const attempts: Array<() => Promise<unknown>> = [
        () => app.outbox.publish('quick', {}, value as never),
        () => app.outbox.publishMany([{ topic: 'quick', payload: {} }], value as never),
        () => app.outbox.publishMany([value as never]),
      ];
      for (const attempt of attempts) {
        const error = await app.txHost.withTransaction(attempt).catch((e: Error) => e);
        expect(error).toBeInstanceOf(OutboxValidationError);
        expect((error as Error).message).toMatch(
          new RegExp(`^Invalid outbox (options|event): expected an object, got ${got}$`),
        );
      }
      expect(await outboxRows(app)).toHaveLength(0);
    });

    it('refuses what is not an array of events, and unknown options of publishMany', async () => {
      const notArray = (await app.txHost
        .withTransaction(() => app.outbox.publishMany({} as never))
        .catch((e: unknown) => e)) as Error;
      expect(notArray).toBeInstanceOf(OutboxValidationError);
      expect(notArray.message).toBe('Invalid outbox items: publishMany expects an array of events, got object');
      const unknown = (await app.txHost
        .withTransaction(() => app.outbox.publishMany([{ topic: 'quick', payload: {} }], { delay: 5 } as never))
        .catch((e: unknown) => e)) as Error;
      expect(unknown).toBeInstanceOf(OutboxValidationError);
      expect(unknown.message).toMatch(/unknown option "delay"/);
      // The lists of what is allowed, in full: each name missing from one would refuse that option.
      const unknownOption = (await app.txHost
        .withTransaction(() => app.outbox.publish('quick', {}, { delay: 5 } as never))
        .catch((e: unknown) => e)) as Error;
      expect(unknownOption.message).toBe(
        'Invalid outbox options: unknown option "delay"; allowed: key, dedupeKey, headers, delayMs, availableAt, manager',
      );
      const unknownField = (await app.txHost
        .withTransaction(() => app.outbox.publishMany([{ topic: 'quick', payload: {}, priority: 1 } as never]))
        .catch((e: unknown) => e)) as Error;
      expect(unknownField.message).toBe(
        'Invalid outbox event: unknown option "priority"; allowed: topic, payload, key, dedupeKey, headers, delayMs, availableAt',
      );
      expect(await outboxRows(app)).toHaveLength(0);
    });
  });

  it('round-trips unicode, nested JSON and large numbers exactly', async () => {
    const payload = { text: 'zürich 東京 🚀', n: 12345678901234, f: 0.1, nested: { list: [null, true, 'a'] } };
    await app.txHost.withTransaction(() => app.outbox.publish('order.placed', payload));
    await app.worker.drain();
    expect(recorder.seen[0].payload).toEqual(payload);
  });
});

/** A TypeORM logger that keeps the statements it is given, and the failures. */
function recordingLogger() {
  const queries: Array<{ sql: string; params: unknown[] }> = [];
  const failures: Array<{ error: unknown; sql: string }> = [];
  const logger: TypeOrmLogger = {
    logQuery: (sql, params) => void queries.push({ sql, params: params ?? [] }),
    logQueryError: (error, sql) => void failures.push({ error, sql }),
    logQuerySlow: () => undefined,
    logSchemaBuild: () => undefined,
    logMigration: () => undefined,
    log: () => undefined,
  };
  return { logger, queries, failures };
}

/** A subscriber of every query of its DataSource, before and after. */
const seenBySubscriber: { before: string[]; after: Array<{ sql: string; success: boolean }> } = {
  before: [],
  after: [],
};
@EventSubscriber()
class QuerySubscriber implements EntitySubscriberInterface {
  beforeQuery(event: BeforeQueryEvent<unknown>) {
    seenBySubscriber.before.push(event.query);
  }
  afterQuery(event: AfterQueryEvent<unknown>) {
    seenBySubscriber.after.push({ sql: event.query, success: event.success });
  }
}

// On PostgreSQL the outbox sends its statements by the transaction's client itself when nothing listens
// to queries: these pin that what TypeORM's query path promises stays true either way.
describe.each(backends())("the outbox's statements, as TypeORM's on %s", (backend) => {
  let logged: TestApp;
  let subscribed: TestApp;
  let log: ReturnType<typeof recordingLogger>;
  beforeAll(async () => {
    log = recordingLogger();
    logged = await createTestApp({ backend, typeormLogger: log.logger });
    subscribed = await createTestApp({ backend, extraTypeOrm: { subscribers: [QuerySubscriber] } });
  });
  beforeEach(async () => {
    await emptyTestApp(logged);
    await emptyTestApp(subscribed);
  });
  afterAll(async () => {
    await logged.dispose();
    await subscribed.dispose();
  });
  /** The statements of `sqls` that insert into the outbox table of `app`. */
  const outboxInserts = (sqls: string[], app = logged) =>
    sqls.filter((sql) => sql.startsWith('INSERT INTO') && sql.split(' VALUES')[0].includes(app.table));

  it("TypeORM's logger logs the insert, with its parameters", async () => {
    log.queries.length = 0;
    const { id } = await logged.txHost.withTransaction(() => logged.outbox.publish('order.placed', { n: 1 }));
    const inserts = log.queries.filter((q) => outboxInserts([q.sql]).length === 1);
    expect(inserts).toHaveLength(1);
    expect(inserts[0].params).toContain(id);
    expect(inserts[0].params).toContain('order.placed');
  });

  it('a subscriber of queries sees the insert before and after it ran', async () => {
    seenBySubscriber.before.length = 0;
    seenBySubscriber.after.length = 0;
    await subscribed.txHost.withTransaction(() => subscribed.outbox.publish('order.placed', { n: 1 }));
    const inserts = outboxInserts(seenBySubscriber.before, subscribed);
    expect(inserts).toHaveLength(1);
    expect(seenBySubscriber.after.filter((a) => outboxInserts([a.sql], subscribed).length === 1)).toEqual([
      { sql: inserts[0], success: true },
    ]);
    expect(await outboxRows(subscribed)).toHaveLength(1);
  });

  // A statement that fails inside the caller's transaction: the table is not on PostgreSQL's search path.
  // The other databases have no per-transaction setting that hides a table.
  (backend === 'postgres' ? it : it.skip)(
    "a failing statement is TypeORM's QueryFailedError with the driver's error, logged, and nothing is written",
    async () => {
      log.failures.length = 0;
      const failure = await logged.txHost
        .withTransaction(async () => {
          await logged.txHost.tx.query(`SET LOCAL search_path TO ${uniqueName('nowhere')}`);
          return logged.outbox.publish('order.placed', { n: 1 });
        })
        .catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(QueryFailedError);
      expect((failure as QueryFailedError & { driverError: { code: string } }).driverError.code).toBe('42P01');
      expect(outboxInserts(log.failures.map((f) => f.sql))).toHaveLength(1);
      expect(log.failures[0].error).toBe((failure as QueryFailedError & { driverError: unknown }).driverError);
      expect(await outboxRows(logged)).toHaveLength(0);
    },
  );
});

// SQLite serialises the two transactions at BEGIN (one connection, the gate), so the race exists on the servers only.
describeEachServer('one dedupe key published by two transactions at once on %s', (backend) => {
  let app: TestApp;
  afterEach(() => app?.dispose());

  it('the second waits for the first and resolves to its event: one row, both given its id', async () => {
    app = await createTestApp({ backend });
    const inserted = deferred();
    const commit = deferred();
    const first = app.txHost.withTransaction(async () => {
      const result = await app.outbox.publish('order.placed', { n: 1 }, { dedupeKey: 'same' });
      inserted.resolve();
      await commit.promise;
      return result;
    });
    await inserted.promise;
    // The first row is written but not committed: the second's lookup cannot see it, its insert must wait.
    let secondSettled = false;
    const second = app.txHost
      .withTransaction(() => app.outbox.publish('order.placed', { n: 1 }, { dedupeKey: 'same' }))
      .finally(() => (secondSettled = true));
    for (let i = 0; i < 5; i++) await app.raw.query('SELECT 1');
    expect(secondSettled).toBe(false);
    commit.resolve();
    const [a, b] = await Promise.all([first, second]);
    expect(a.inserted).toBe(true);
    expect(b).toEqual({ id: a.id, inserted: false });
    expect(await outboxRows(app)).toHaveLength(1);
  });
});

// A documented limit (docs/guarantees.md, guarantee 7): PostgreSQL's snapshot isolation cannot answer "inserted: false"
// for a row committed after the snapshot, so it refuses the second transaction instead. Still one row.
describeOn('postgres')('one dedupe key published at once by two REPEATABLE READ transactions on PostgreSQL', () => {
  let app: TestApp;
  afterEach(() => app?.dispose());

  it.each(['REPEATABLE READ', 'SERIALIZABLE'] as const)(
    'at %s the second fails with a serialization failure (40001), safe to retry: one row',
    async (isolationLevel) => {
      app = await createTestApp({ backend: 'postgres' });
      const inserted = deferred();
      const commit = deferred();
      const first = app.txHost.withTransaction({ isolationLevel }, async () => {
        const result = await app.outbox.publish('order.placed', { n: 1 }, { dedupeKey: 'same' });
        inserted.resolve();
        await commit.promise;
        return result;
      });
      await inserted.promise;
      const second = app.txHost
        .withTransaction({ isolationLevel }, () => app.outbox.publish('order.placed', { n: 1 }, { dedupeKey: 'same' }))
        .then(
          () => undefined,
          (error: { driverError?: { code?: string }; code?: string }) => error.driverError?.code ?? error.code,
        );
      // The second has taken its snapshot (the dedupe lookup) and waits on the first's row in its insert.
      await eventually(async () => {
        const waiting = await app.raw.query<{ n: string }>(
          `SELECT count(*) AS "n" FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`,
          [`INSERT INTO "${app.table}"%`],
        );
        return Number(waiting[0].n) === 1;
      });
      commit.resolve();
      expect((await first).inserted).toBe(true);
      expect(await second).toBe('40001');
      expect(await outboxRows(app)).toHaveLength(1);
    },
  );
});
