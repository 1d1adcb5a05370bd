import { Injectable } from '@nestjs/common';
import { ClientsModule, Transport, type ClientProviderOptions } from '@nestjs/microservices';
import Redis from 'ioredis';
import {
  ClientProxyWakeUp,
  OutboxConfigurationError,
  OutboxEvents,
  OutboxHandler,
  OutboxModule,
  type OutboxLifecycleEvent,
  type OutboxMessage,
  type OutboxModuleOptions,
} from '../../../lib';
import { backends, serverBackends, sqliteBackends, uniqueName, type BackendName } from '../../fixtures/backends';
import { BROKERS } from '../../fixtures/brokers';
import { eventually } from '../../fixtures/eventually';
import { createTestApp, type TestApp } from '../../fixtures/test-app';

@Injectable()
class Seen {
  ids: string[] = [];
  @OutboxHandler('wake.me')
  handle(message: OutboxMessage) {
    this.ids.push(message.id);
  }
}

/** Polling once an hour: within a test, only a wake-up delivers. */
const SLEEPY = { worker: { enabled: true, pollIntervalMs: 3_600_000 } };

const CLIENTS: Record<'redis' | 'nats', (port?: number) => ClientProviderOptions> = {
  redis: (port = BROKERS.redis.port) => ({
    name: 'WAKE',
    transport: Transport.REDIS,
    options: { host: '127.0.0.1', port },
  }),
  nats: (port = BROKERS.nats.port) => ({
    name: 'WAKE',
    transport: Transport.NATS,
    options: { servers: [`nats://127.0.0.1:${port}`] },
  }),
};

/** An instance whose wake-up goes through the broker client it registered with ClientsModule. */
function brokerInstance(
  backend: BackendName,
  client: ClientProviderOptions,
  channel: string,
  outbox: Omit<OutboxModuleOptions, 'tableName'>,
  table: string,
  providers = [Seen],
): Promise<TestApp> {
  return createTestApp({
    backend,
    table,
    providers,
    outboxModule: OutboxModule.forRootAsync({
      tableName: table,
      imports: [ClientsModule.register([client])],
      inject: ['WAKE'],
      useFactory: (proxy: object) => ({ ...outbox, wakeUp: new ClientProxyWakeUp(proxy, { channel }) }),
    }),
  });
}

// The wake-up does not depend on the database: MariaDB, which has no channel of its own, carries it.
const backend = serverBackends().find((b) => b === 'mariadb') ?? backends()[0];
const brokers = (['redis', 'nats'] as const).filter((b) => process.env[`OUTBOX_TEST_${b.toUpperCase()}`] !== 'down');
// A broker that is down on a developer machine is skipped with a notice from global-setup; CI fails instead.
const describeBrokers = brokers.length > 0 ? describe.each(brokers) : describe.skip.each(['none']);

describeBrokers('wake-up across instances through %s (ClientProxyWakeUp)', (broker) => {
  const apps: TestApp[] = [];
  afterEach(async () => {
    for (const app of apps.splice(0).reverse()) await app.dispose();
  });

  async function pair() {
    const channel = uniqueName('wake');
    const table = uniqueName();
    const client = CLIENTS[broker as 'redis' | 'nats']();
    const publisher = await brokerInstance(backend, client, channel, { worker: { enabled: false } }, table, []);
    const worker = await brokerInstance(backend, client, channel, SLEEPY, table);
    apps.push(publisher, worker);
    return { publisher, seen: worker.module.get(Seen) };
  }

  it('delivers in another instance right after the commit', async () => {
    // The worker subscribed during its bootstrap, before pair() returns.
    const { publisher, seen } = await pair();
    for (let i = 0; i < 3; i++) {
      const { id } = await publisher.txHost.withTransaction(() => publisher.outbox.publish('wake.me', { i }));
      await eventually(() => seen.ids.includes(id), 10_000, `the wake-up of event ${i}`);
    }
  });

  it('publishes while the broker cannot be reached, reports it, and the poll delivers', async () => {
    const table = uniqueName();
    const channel = uniqueName('wake');
    // Nothing listens on port 1: every notification fails.
    const publisher = await brokerInstance(
      backend,
      CLIENTS[broker as 'redis' | 'nats'](1),
      channel,
      { worker: { enabled: false } },
      table,
      [],
    );
    apps.push(publisher);
    const events: OutboxLifecycleEvent[] = [];
    publisher.module.get(OutboxEvents).events$.subscribe((e) => events.push(e));
    const worker = await createTestApp({
      backend,
      table,
      providers: [Seen],
      outbox: { worker: { enabled: true, pollIntervalMs: 200 } },
    });
    apps.push(worker);
    const { id } = await publisher.txHost.withTransaction(() => publisher.outbox.publish('wake.me', {}));
    await eventually(() => events.some((e) => e.type === 'wake-up.lost' && e.side === 'notify'), 10_000, 'the report');
    await eventually(() => worker.module.get(Seen).ids.includes(id), 10_000, 'the poll');
  });
});

const redis = brokers.includes('redis') ? describe : describe.skip;
// Skipped only when Redis is down on a developer machine (global-setup fails CI instead).
redis('wake-up through Redis after its subscription is lost', () => {
  const apps: TestApp[] = [];
  afterEach(async () => {
    for (const app of apps.splice(0).reverse()) await app.dispose();
  });

  it('subscribes again, looks for work once, and misses nothing sent meanwhile', async () => {
    const channel = uniqueName('wake');
    const table = uniqueName();
    const publisher = await brokerInstance(
      backend,
      CLIENTS.redis(),
      channel,
      { worker: { enabled: false } },
      table,
      [],
    );
    const worker = await brokerInstance(backend, CLIENTS.redis(), channel, SLEEPY, table);
    apps.push(publisher, worker);
    const events: OutboxLifecycleEvent[] = [];
    worker.module.get(OutboxEvents).events$.subscribe((e) => events.push(e));
    const admin = new Redis({ host: '127.0.0.1', port: BROKERS.redis.port, lazyConnect: true });
    await admin.connect();
    try {
      const subscribed = async () => Number((await admin.pubsub('NUMSUB', channel))[1]);
      await eventually(async () => (await subscribed()) === 1, 10_000, 'the subscription');
      await admin.client('KILL', 'TYPE', 'pubsub');
      // Published while the subscriber may be gone: its message can be lost, the catch-up claim is not.
      const during = await publisher.txHost.withTransaction(() =>
        publisher.outbox.publish('wake.me', { during: true }),
      );
      await eventually(async () => (await subscribed()) === 1, 10_000, 'the new subscription');
      const after = await publisher.txHost.withTransaction(() => publisher.outbox.publish('wake.me', { after: true }));
      const seen = worker.module.get(Seen);
      await eventually(() => [during.id, after.id].every((id) => seen.ids.includes(id)), 10_000, 'both events');
      expect(events).toContainEqual(expect.objectContaining({ type: 'wake-up.lost', side: 'listen' }));
      expect(events).toContainEqual(expect.objectContaining({ type: 'wake-up.restored', side: 'listen' }));
    } finally {
      admin.disconnect();
    }
  });
});

describe('the wakeUp option', () => {
  it('refuses what is not a wake-up channel, before anything connects', () => {
    expect(() => OutboxModule.forRoot({ wakeUp: {} as never })).toThrow(OutboxConfigurationError);
    expect(() => OutboxModule.forRoot({ wakeUp: {} as never })).toThrow(/wakeUp.*without start\(\)/);
    expect(() => OutboxModule.forRoot({ wakeUp: true as never })).toThrow(/expected false or a wake-up channel/);
    expect(() => new ClientProxyWakeUp({ connect: () => Promise.resolve() })).toThrow(/ClientRedis or ClientNats/);
    expect(() => new ClientProxyWakeUp(null as never)).toThrow(OutboxConfigurationError);
  });
});

const sqlite = sqliteBackends().length > 0 ? describe.each(sqliteBackends()) : describe.skip.each(['none']);
// Skipped only when no SQLite driver is installed (never in this repository's CI).
sqlite('wake-up across processes sharing an SQLite file on %s', (backend) => {
  const apps: TestApp[] = [];
  afterEach(async () => {
    for (const app of apps.splice(0).reverse()) await app.dispose();
  });

  it('wakes a worker on the same file when another instance commits', async () => {
    const publisher = await createTestApp({ backend: backend as BackendName });
    const worker = await createTestApp({
      backend: backend as BackendName,
      sqlitePath: publisher.sqlitePath,
      table: publisher.table,
      providers: [Seen],
      outbox: SLEEPY,
    });
    apps.push(publisher, worker);
    const seen = worker.module.get(Seen);
    for (let i = 0; i < 3; i++) {
      const { id } = await publisher.txHost.withTransaction(() => publisher.outbox.publish('wake.me', { i }));
      await eventually(() => seen.ids.includes(id), 10_000, `the wake-up of event ${i}`);
    }
  });

  it('has no channel with wakeUp: false', async () => {
    const off = await createTestApp({ backend: backend as BackendName, outbox: { wakeUp: false } });
    apps.push(off);
    expect(off.store.wakeUp).toBeUndefined();
  });
});
