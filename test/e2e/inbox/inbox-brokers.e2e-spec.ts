import { randomBytes, randomUUID } from 'node:crypto';
import {
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  type NestInterceptor,
  UseInterceptors,
} from '@nestjs/common';
import {
  ClientProxyFactory,
  type ClientProvider,
  EventPattern,
  type MicroserviceOptions,
  Payload,
  Transport,
} from '@nestjs/microservices';
import { Test, type TestingModule } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import { TransactionHost } from '@nestjs-cls/transactional';
import type { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { type Observable, tap } from 'rxjs';
import {
  ClientProxyTransport,
  createOutboxInboxMigrations,
  OutboxInbox,
  OutboxInboxMessageError,
  OutboxInboxModule,
  type OutboxClientProxy,
  type OutboxMessage,
} from '../../../lib';
import { backends, isSqlite, rawDb, removeSqliteFile, sql, sqliteFile, uniqueName } from '../../fixtures/backends';
import { deferred } from '../../fixtures/eventually';
import { clsImports, typeOrmOptions } from '../../fixtures/test-app';

/** The pattern (queue message pattern, subject, channel, topic) of this file's messages: its own on shared brokers. */
const PATTERN = `inbox-${randomBytes(4).toString('hex')}`;
const RABBITMQ = 'amqp://guest:guest@127.0.0.1:5672';
const backend = backends()[0];

/** What the consumer did: the handler's calls, and each message's outcome as it left the inbox. */
@Injectable()
class Seen {
  effects = '';
  calls: string[] = [];
  outcomes: Array<{ id: string | undefined; result?: unknown; error?: unknown }> = [];
  private waiters: Array<() => void> = [];
  record(outcome: Seen['outcomes'][number]) {
    this.outcomes.push(outcome);
    for (const wake of this.waiters.splice(0)) wake();
  }
  /** Resolves once `count` messages have left the inbox. */
  async settled(count: number) {
    while (this.outcomes.length < count) {
      const next = deferred();
      this.waiters.push(next.resolve);
      await next.promise;
    }
  }
}

/** Outside the inbox: records what each message came to. */
@Injectable()
class Outcomes implements NestInterceptor {
  constructor(private readonly seen: Seen) {}
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const data = context.switchToRpc().getData<{ id?: string; payload?: { id?: string } } | undefined>();
    const id = data?.payload?.id ?? data?.id;
    return next
      .handle()
      .pipe(
        tap({ next: (result) => this.seen.record({ id, result }), error: (error) => this.seen.record({ id, error }) }),
      );
  }
}

function consumerFor(acknowledge: boolean) {
  @Controller()
  @UseInterceptors(Outcomes)
  class Billing {
    constructor(
      private readonly seen: Seen,
      private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
    ) {}

    @EventPattern(PATTERN)
    @OutboxInbox('billing', { acknowledge })
    async charge(@Payload() data: { id?: string; payload?: { id?: string } }) {
      const id = data.payload?.id ?? data.id!;
      this.seen.calls.push(id);
      await this.txHost.tx.query(sql(backend, `INSERT INTO "${this.seen.effects}" ("id", "note") VALUES (?, ?)`), [
        id,
        'charged',
      ]);
      return 'charged';
    }
  }
  return Billing;
}

interface BrokerCase {
  name: string;
  server: (channel: string) => MicroserviceOptions;
  client: (channel: string) => ClientProvider;
  /** Acknowledged by the inbox (RabbitMQ with `noAck: false`). */
  acknowledge?: boolean;
}

const CASES: BrokerCase[] = [
  {
    name: 'RabbitMQ (noAck: false, acknowledged by the inbox)',
    acknowledge: true,
    server: (queue) => ({
      transport: Transport.RMQ,
      options: { urls: [RABBITMQ], queue, queueOptions: { durable: true }, noAck: false, prefetchCount: 5 },
    }),
    client: (queue) => ({
      transport: Transport.RMQ,
      options: { urls: [RABBITMQ], queue, queueOptions: { durable: true }, persistent: true },
    }),
  },
  {
    name: 'NATS',
    server: () => ({ transport: Transport.NATS, options: { servers: ['nats://127.0.0.1:4222'] } }),
    client: () => ({ transport: Transport.NATS, options: { servers: ['nats://127.0.0.1:4222'] } }),
  },
  {
    name: 'MQTT 5',
    server: () => ({ transport: Transport.MQTT, options: { url: 'mqtt://127.0.0.1:1883', protocolVersion: 5 } }),
    client: () => ({ transport: Transport.MQTT, options: { url: 'mqtt://127.0.0.1:1883', protocolVersion: 5 } }),
  },
  {
    name: 'Redis (the envelope)',
    server: () => ({ transport: Transport.REDIS, options: { host: '127.0.0.1', port: 6379 } }),
    client: () => ({ transport: Transport.REDIS, options: { host: '127.0.0.1', port: 6379 } }),
  },
];

/** A message as the outbox hands it to a transport. */
function outboxMessage(id: string): OutboxMessage {
  return {
    id,
    topic: 'billing.charged',
    key: null,
    payload: { id },
    headers: {},
    attempt: 1,
    createdAt: new Date(),
    signal: new AbortController().signal,
  };
}

describe.each(CASES.map((c) => [c.name, c] as const))('@OutboxInbox() on a Nest microservice over %s', (_, spec) => {
  const table = uniqueName();
  const channel = `${PATTERN}-${table}`;
  const sqlitePath = isSqlite(backend) ? sqliteFile() : undefined;
  let consumer: TestingModule;
  let server: ReturnType<TestingModule['createNestMicroservice']>;
  let client: OutboxClientProxy & { close(): unknown };
  let transport: ClientProxyTransport;
  let seen: Seen;

  beforeAll(async () => {
    consumer = await Test.createTestingModule({
      imports: [
        TypeOrmModule.forRoot({
          ...typeOrmOptions(backend, table, sqlitePath),
          migrations: createOutboxInboxMigrations(`${table}_inbox`),
        }),
        ...clsImports(),
        OutboxInboxModule.forRoot({ tableName: `${table}_inbox` }),
      ],
      controllers: [consumerFor(spec.acknowledge ?? false)],
      providers: [Seen, Outcomes],
    }).compile();
    consumer.useLogger(false);
    server = consumer.createNestMicroservice(spec.server(channel));
    await server.listen();
    seen = consumer.get(Seen);
    seen.effects = `${table}_effects`;
    const db = await rawDb(backend, sqlitePath);
    await db.query(sql(backend, `CREATE TABLE "${seen.effects}" ("id" varchar(64) NOT NULL, "note" varchar(255))`));
    await db.close();
    client = ClientProxyFactory.create(spec.client(channel));
    transport = new ClientProxyTransport('broker', client, { pattern: () => PATTERN });
  });
  afterAll(async () => {
    await client?.close();
    await server?.close();
    const db = await rawDb(backend, sqlitePath);
    if (!isSqlite(backend)) {
      await db.query(`DROP TABLE IF EXISTS "${table}_effects", "${table}_inbox", "${table}_migrations"`);
    }
    await db.close();
    if (sqlitePath) removeSqliteFile(sqlitePath);
    if (spec.acknowledge) await deleteQueue(channel);
  });

  const effects = async () => {
    const db = await rawDb(backend, sqlitePath);
    try {
      return (await db.query<{ id: string }>(`SELECT "id" FROM "${seen.effects}" ORDER BY "id"`)).map((r) => r.id);
    } finally {
      await db.close();
    }
  };

  it('applies a message once, skipping the copies the outbox sends again', async () => {
    const id = randomUUID();
    const message = outboxMessage(id);
    const route = { topic: '#', transport: 'broker' };
    const before = seen.outcomes.length;
    await transport.send(message, route);
    await seen.settled(before + 1);
    // The same message again, as after a crash between the send and the outbox's acknowledgement.
    await transport.send(message, route);
    await transport.send(message, route);
    await seen.settled(before + 3);
    expect(seen.outcomes.slice(before)).toEqual([
      { id, result: 'charged' },
      { id, result: undefined },
      { id, result: undefined },
    ]);
    expect(seen.calls).toEqual([id]);
    expect(await effects()).toEqual([id]);
  });

  if (spec.acknowledge) {
    it('acknowledges every message, and sends one without an id to the dead letters, not round again', async () => {
      const before = seen.outcomes.length;
      await publishRaw(channel, { pattern: PATTERN, data: { payload: { id: 'no-id' } } });
      await seen.settled(before + 1);
      const [outcome] = seen.outcomes.slice(before);
      expect(outcome.error).toBeInstanceOf(OutboxInboxMessageError);
      expect(seen.calls).not.toContain('no-id');
      // Stopped, the consumer gives back every message it had not acknowledged: none is left.
      await server.close();
      expect(await queueDepth(channel)).toBe(0);
    });
  }
});

async function withChannel<T>(work: (channel: import('amqplib').Channel) => Promise<T>): Promise<T> {
  const amqp = await import('amqplib');
  const connection = await amqp.connect(RABBITMQ);
  try {
    return await work(await connection.createChannel());
  } finally {
    await connection.close();
  }
}

const publishRaw = (queue: string, packet: unknown) =>
  withChannel(async (channel) => {
    channel.sendToQueue(queue, Buffer.from(JSON.stringify(packet)), { persistent: true });
    await channel.close();
  });
const queueDepth = (queue: string) => withChannel(async (channel) => (await channel.checkQueue(queue)).messageCount);
const deleteQueue = (queue: string) => withChannel(async (channel) => void (await channel.deleteQueue(queue)));
