import { Injectable } from '@nestjs/common';
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Client as PgClient } from 'pg';
import { OutboxHandler, type OutboxMessage } from '../../../lib';
import { backends, describeOn } from '../../fixtures/backends';
import { deferred, eventually } from '../../fixtures/eventually';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

const requestContext = new AsyncLocalStorage<string>();

@Injectable()
class Seen {
  messages: Array<{ message: OutboxMessage; context: string | undefined }> = [];
  @OutboxHandler('wake.me')
  handle(message: OutboxMessage) {
    this.messages.push({ message, context: requestContext.getStore() });
  }
}

/** Polling once an hour: only a wake-up can deliver within a test. */
const SLEEPY = { worker: { enabled: true, pollIntervalMs: 3_600_000 } };

describe.each(backends())('wake-up on %s', (backend) => {
  const apps: TestApp[] = [];
  afterEach(async () => {
    for (const app of apps.splice(0).reverse()) await app.dispose();
  });

  it('delivers right after the commit, in the worker’s own async context, not the request’s', async () => {
    const app = await createTestApp({ backend, providers: [Seen], outbox: SLEEPY });
    apps.push(app);
    const { id } = await requestContext.run('request-42', () =>
      app.txHost.withTransaction(() => app.outbox.publish('wake.me', {})),
    );
    const seen = app.module.get(Seen);
    await eventually(() => seen.messages.length === 1, 10_000, 'the wake-up');
    expect(seen.messages[0].message.id).toBe(id);
    expect(seen.messages[0].context).toBeUndefined();
  });

  it('does not wake on a rollback, and nothing is delivered', async () => {
    const app = await createTestApp({ backend, providers: [Seen], outbox: SLEEPY });
    apps.push(app);
    await expect(
      app.txHost.withTransaction(async () => {
        await app.outbox.publish('wake.me', {});
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    // A later commit wakes the worker; only its event arrives.
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish('wake.me', { second: true }));
    const seen = app.module.get(Seen);
    await eventually(() => seen.messages.length >= 1, 10_000, 'the wake-up');
    expect(seen.messages.map((m) => m.message.id)).toEqual([id]);
  });
});

describeOn('postgres')('wake-up across instances on PostgreSQL (LISTEN/NOTIFY)', () => {
  const apps: TestApp[] = [];
  afterEach(async () => {
    for (const app of apps.splice(0).reverse()) await app.dispose();
  });

  async function pair() {
    const publisher = await createTestApp({ backend: 'postgres' }); // worker off: publishes only
    const worker = await createTestApp({
      backend: 'postgres',
      table: publisher.table,
      providers: [Seen],
      outbox: SLEEPY,
    });
    apps.push(publisher, worker);
    return { publisher, worker, seen: worker.module.get(Seen), store: worker.store };
  }

  it('runs on a pool of one connection: LISTEN has a connection of its own', async () => {
    // Before, LISTEN kept the pool's only connection and the first transaction waited forever.
    const app = await createTestApp({
      backend: 'postgres',
      providers: [Seen],
      outbox: SLEEPY,
      extraTypeOrm: { extra: { max: 1 } },
    });
    apps.push(app);
    const store = app.store;
    await eventually(() => store.wakeUp!.listenerPid, 10_000, 'the listener');
    const { id } = await app.txHost.withTransaction(() => app.outbox.publish('wake.me', {}));
    await eventually(() => app.module.get(Seen).messages.some((m) => m.message.id === id), 10_000, 'the delivery');
  }, 20_000);

  it('sends NOTIFY in one round trip whose synchronous_commit ends with it (safe behind PgBouncer)', async () => {
    const publisher = await createTestApp({ backend: 'postgres' }); // worker off: no listener, only the notifier
    apps.push(publisher);
    // Watch the connections the wake-up opens of its own (with the pool's client class and settings).
    const pool = (publisher.dataSource.driver as unknown as { master: { Client: new (o: unknown) => PgClient } })
      .master;
    const notified = deferred<{ client: PgClient; queries: string[] }>();
    const Base = pool.Client;
    pool.Client = class extends Base {
      constructor(options: unknown) {
        super(options);
        const seen = { client: this as PgClient, queries: [] as string[] };
        const query = this.query.bind(this) as (text: string) => Promise<unknown>;
        (this as { query: unknown }).query = (text: string) => {
          seen.queries.push(text);
          const result = query(text);
          if (/NOTIFY/.test(text)) void result.finally(() => notified.resolve(seen));
          return result;
        };
      }
    };
    const [{ synchronous_commit: serverDefault }] = await publisher.raw.query<{ synchronous_commit: string }>(
      'SHOW synchronous_commit',
    );
    expect(serverDefault).not.toBe('off'); // else the check below could not tell
    await publisher.txHost.withTransaction(() => publisher.outbox.publish('wake.me', {}));
    const notifier = await notified.promise;
    expect(notifier.queries).toEqual([
      expect.stringMatching(/^BEGIN; SET LOCAL synchronous_commit TO off; NOTIFY "[^"]+", '[0-9a-f-]{36}'; COMMIT$/),
    ]);
    const { rows } = await notifier.client.query<{ synchronous_commit: string }>('SHOW synchronous_commit');
    expect(rows[0].synchronous_commit).toBe(serverDefault);
  });

  it('delivers in another instance right after the commit', async () => {
    const { publisher, seen } = await pair();
    const { id } = await publisher.txHost.withTransaction(() => publisher.outbox.publish('wake.me', {}));
    await eventually(() => seen.messages.some((m) => m.message.id === id), 10_000, 'the notification');
  });

  it('delivers a payload far over the 8,000-byte NOTIFY limit: the notification carries none of it', async () => {
    const { publisher, seen } = await pair();
    const payload = { text: 'x'.repeat(64 * 1024), list: Array.from({ length: 500 }, (_, i) => ({ i })) };
    const { id } = await publisher.txHost.withTransaction(() => publisher.outbox.publish('wake.me', payload));
    const delivered = await eventually(
      () => seen.messages.find((m) => m.message.id === id),
      10_000,
      'the notification',
    );
    expect(delivered.message.payload).toEqual(payload);
  });

  it('reconnects a listener whose connection was killed, and misses nothing sent meanwhile', async () => {
    const { publisher, seen, store } = await pair();
    const killed = await eventually(() => store.wakeUp!.listenerPid, 10_000, 'the listener');
    await publisher.raw.query('SELECT pg_terminate_backend(?)', [killed]);
    // Published while the listener may be down: its NOTIFY can be lost, the catch-up poll is not.
    const during = await publisher.txHost.withTransaction(() => publisher.outbox.publish('wake.me', { during: true }));
    const again = await eventually(
      () => (store.wakeUp!.listenerPid && store.wakeUp!.listenerPid !== killed ? store.wakeUp!.listenerPid : undefined),
      10_000,
      'a new listener',
    );
    expect(again).not.toBe(killed);
    const after = await publisher.txHost.withTransaction(() => publisher.outbox.publish('wake.me', { after: true }));
    await eventually(
      () => [during.id, after.id].every((id) => seen.messages.some((m) => m.message.id === id)),
      10_000,
      'both events',
    );
  });
});
