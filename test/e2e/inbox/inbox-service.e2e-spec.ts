import { randomUUID } from 'node:crypto';
import type { EntityManager } from 'typeorm';
import {
  createOutboxInboxMigrations,
  createOutboxMigrations,
  OutboxInboxMessageError,
  OutboxInboxModule,
  OutboxInboxService,
  OutboxTableMissingError,
} from '../../../lib';
import { InboxRetention } from '../../../lib/inbox/inbox-retention';
import { backends, isSqlite, uniqueName } from '../../fixtures/backends';
import { deferred, eventually } from '../../fixtures/eventually';
import { createTestApp, emptyTestApp, outboxRows, type TestApp } from '../../fixtures/test-app';
import { inboxTestApp } from '../../fixtures/inbox-app';

describe.each(backends())('the inbox service on %s', (backend) => {
  let app: TestApp;
  let inbox: OutboxInboxService;

  beforeAll(async () => {
    app = await inboxTestApp(backend, { retentionMs: 60_000 });
    inbox = app.module.get(OutboxInboxService);
  });
  afterAll(() => app.dispose());
  beforeEach(async () => {
    await emptyTestApp(app);
    await app.raw.query(`DELETE FROM "${app.table}_inbox"`);
  });

  const received = async () =>
    (
      await app.raw.query<{ consumer: string; message_id: string }>(
        `SELECT "consumer", "message_id" FROM "${app.table}_inbox" ORDER BY "consumer", "message_id"`,
      )
    ).map((r) => `${r.consumer}/${r.message_id}`);
  const orders = async () =>
    (await app.raw.query<{ id: string }>(`SELECT "id" FROM "${app.ordersTable}" ORDER BY "id"`)).map((r) => r.id);
  /** The work of a consumer: one order row, written in the inbox's transaction. */
  const writeOrder = (id: string) => async () => {
    await app.txHost.tx.query(app.sql(`INSERT INTO "${app.ordersTable}" ("id", "note") VALUES (?, ?)`), [id, 'x']);
    return id;
  };

  it('runs the work once per message and consumer, recording the id with its writes', async () => {
    const id = randomUUID();
    await expect(inbox.process('billing', id, writeOrder('o1'))).resolves.toEqual({ duplicate: false, result: 'o1' });
    await expect(inbox.process('billing', id, writeOrder('o2'))).resolves.toEqual({ duplicate: true });
    // Another consumer of the same message has an inbox of its own.
    await expect(inbox.process('shipping', id, writeOrder('o3'))).resolves.toEqual({ duplicate: false, result: 'o3' });
    // An id in capitals is the same message.
    await expect(inbox.process('billing', id.toUpperCase(), writeOrder('o4'))).resolves.toEqual({ duplicate: true });
    expect(await orders()).toEqual(['o1', 'o3']);
    expect(await received()).toEqual([`billing/${id}`, `shipping/${id}`]);
  });

  it('rolls the id back with the writes when the work fails, so the next copy runs it', async () => {
    const id = randomUUID();
    const failing = async () => {
      await writeOrder('o1')();
      throw new Error('declined');
    };
    await expect(inbox.process('billing', id, failing)).rejects.toThrow('declined');
    expect(await orders()).toEqual([]);
    expect(await received()).toEqual([]);
    await expect(inbox.process('billing', id, writeOrder('o2'))).resolves.toEqual({ duplicate: false, result: 'o2' });
    expect(await orders()).toEqual(['o2']);
  });

  it('commits what the work publishes through the outbox with the id, and hands it the manager', async () => {
    const id = randomUUID();
    await inbox.process('billing', id, async (manager) => {
      expect(inbox.manager).toBe(manager);
      expect(app.txHost.tx).toBe(manager);
      await app.outbox.publish('billing.charged', { id });
    });
    expect((await outboxRows(app)).map((r) => r.topic)).toEqual(['billing.charged']);
    await expect(inbox.process('billing', id, () => app.outbox.publish('billing.charged', { id }))).resolves.toEqual({
      duplicate: true,
    });
    expect(await outboxRows(app)).toHaveLength(1);
    expect(() => inbox.manager).toThrow('outside an inbox transaction');
  });

  it('makes a copy that arrives while the first is processed wait for it, then skips it', async () => {
    const id = randomUUID();
    const inside = deferred();
    const release = deferred();
    const first = inbox.process('billing', id, async () => {
      await writeOrder('first')();
      inside.resolve();
      await release.promise;
    });
    await inside.promise;
    let secondDone = false;
    const second = inbox.process('billing', id, writeOrder('second')).finally(() => (secondDone = true));
    // The copy cannot be decided while the first transaction is open: a turn of I/O later it still waits.
    await new Promise((resolve) => setImmediate(resolve));
    expect(secondDone).toBe(false);
    release.resolve();
    await expect(first).resolves.toEqual({ duplicate: false, result: undefined });
    await expect(second).resolves.toEqual({ duplicate: true });
    expect(await orders()).toEqual(['first']);
  });

  it('runs a copy that waited when the first one rolled back', async () => {
    const id = randomUUID();
    const inside = deferred();
    const release = deferred();
    const first = inbox.process('billing', id, async () => {
      await writeOrder('first')();
      inside.resolve();
      await release.promise;
      throw new Error('declined');
    });
    await inside.promise;
    const second = inbox.process('billing', id, writeOrder('second'));
    release.resolve();
    await expect(first).rejects.toThrow('declined');
    await expect(second).resolves.toEqual({ duplicate: false, result: 'second' });
    expect(await orders()).toEqual(['second']);
  });

  it.each([
    ['no id', 'billing', undefined, /carries no outbox message id/],
    ['an empty id', 'billing', '', /carries no outbox message id/],
    ['an id that is no UUID', 'billing', 'order-17', /must be a UUID, got the string "order-17"/],
    ['a consumer name over 100 characters', 'b'.repeat(101), randomUUID(), /consumer name must be 1 to 100/],
    ['a consumer name with a space', 'bill ing', randomUUID(), /consumer name must be 1 to 100/],
  ])('refuses %s with a typed error, writing nothing', async (_, consumer, id, message) => {
    let ran = false;
    const error = await inbox
      .process(consumer, id, () => {
        ran = true;
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxInboxMessageError);
    expect((error as OutboxInboxMessageError).message).toMatch(message);
    expect((error as OutboxInboxMessageError).statusCode).toBe(400);
    expect(ran).toBe(false);
    expect(await received()).toEqual([]);
  });

  it('forgets ids older than the retention, in batches, and keeps the newer ones', async () => {
    const old = Array.from({ length: 1_005 }, () => randomUUID());
    for (const id of old) await inbox.process('billing', id, () => undefined);
    const recent = randomUUID();
    await inbox.process('billing', recent, () => undefined);
    // Received two minutes ago, past the retention of one minute.
    const twoMinutesAgo = isSqlite(backend)
      ? `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-120 seconds')`
      : backend === 'postgres'
        ? `now() - interval '2 minutes'`
        : 'UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE';
    await app.raw.query(
      `UPDATE "${app.table}_inbox" SET "received_at" = ${twoMinutesAgo} WHERE "message_id" <> ${app.sql('?')}`,
      [recent],
    );
    expect(await app.module.get(InboxRetention).sweep()).toBe(1_005);
    expect(await received()).toEqual([`billing/${recent}`]);
  });
});

describe.each(backends())('the inbox at start-up on %s', (backend) => {
  it('refuses to start without its table, naming the migrations to add', async () => {
    const table = uniqueName();
    const error = await createTestApp({
      backend,
      table,
      imports: [OutboxInboxModule.forRoot({ tableName: `${table}_inbox` })],
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxTableMissingError);
    expect((error as Error).message).toContain(`...createOutboxInboxMigrations('${table}_inbox')`);
    // The refused app's tables, left behind by its migrations.
    if (!isSqlite(backend)) {
      const { rawDb } = await import('../../fixtures/backends');
      const raw = await rawDb(backend);
      await raw.query(`DROP TABLE IF EXISTS "${table}", "${table}_keys", "${table}_migrations"`);
      await raw.close();
    }
  });
});

describe.each(backends())('the inbox’s retention on %s', (backend) => {
  it('forgets old ids on its own, every retentionIntervalMs', async () => {
    const app = await inboxTestApp(backend, { retentionMs: 1_000, retentionIntervalMs: 100 });
    try {
      const inbox = app.module.get(OutboxInboxService);
      const id = randomUUID();
      await inbox.process('billing', id, () => undefined);
      const count = async () =>
        Number((await app.raw.query<{ n: number }>(`SELECT COUNT(*) AS "n" FROM "${app.table}_inbox"`))[0].n);
      expect(await count()).toBe(1);
      // The timer, not the test, deletes it once it is a second old.
      await eventually(async () => (await count()) === 0, 10_000, 'the retention to delete the id');
    } finally {
      await app.dispose();
    }
  });
});

describe.each(backends())('the inbox without nestjs-cls, configured by forRootAsync, on %s', (backend) => {
  it('opens its transactions on the DataSource and hands the work its manager', async () => {
    const table = uniqueName();
    const app = await createTestApp({
      backend,
      table,
      cls: false,
      extraTypeOrm: {
        migrations: [...createOutboxMigrations(table), ...createOutboxInboxMigrations(`${table}_inbox`)],
      },
      imports: [
        OutboxInboxModule.forRootAsync({
          // As a ConfigModule would give it.
          imports: [
            {
              module: class InboxConfig {},
              providers: [{ provide: 'INBOX_TABLE', useValue: `${table}_inbox` }],
              exports: ['INBOX_TABLE'],
            },
          ],
          inject: ['INBOX_TABLE'],
          useFactory: (tableName: string) => ({ tableName, retentionMs: false }),
        }),
      ],
    });
    try {
      const inbox = app.module.get(OutboxInboxService);
      const id = randomUUID();
      const write = (note: string) => async (manager: EntityManager) => {
        expect(inbox.manager).toBe(manager);
        await manager.query(app.sql(`INSERT INTO "${app.ordersTable}" ("id", "note") VALUES (?, ?)`), [note, note]);
      };
      expect(await inbox.process('billing', id, write('first'))).toEqual({ duplicate: false, result: undefined });
      expect(await inbox.process('billing', id, write('second'))).toEqual({ duplicate: true });
      const rows = await app.raw.query<{ id: string }>(`SELECT "id" FROM "${app.ordersTable}"`);
      expect(rows.map((r) => r.id)).toEqual(['first']);
    } finally {
      await app.dispose();
    }
  });
});
