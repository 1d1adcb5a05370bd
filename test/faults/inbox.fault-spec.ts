import { ClientsModule, Transport } from '@nestjs/microservices';
import {
  ClientProxyTransport,
  createOutboxInboxMigrations,
  createOutboxMigrations,
  OutboxModule,
  type OutboxClientProxy,
} from '../../lib';
import { rawDb, type BackendName, uniqueName } from '../fixtures/backends';
import { eventually } from '../fixtures/eventually';
import { createTestApp, type TestApp } from '../fixtures/test-app';
import { faultBackends } from './fixtures/fault-backends';
import { publishEvents } from './fixtures/harness';
import { ConsumerFleet, INBOX_TOPIC, RABBITMQ_URL, RabbitQueue } from './fixtures/inbox-fleet';
import { record } from './fixtures/report';

const EVENTS = Number(process.env.OUTBOX_FAULT_INBOX_EVENTS ?? 300);
const MIN_KILLS = Number(process.env.OUTBOX_FAULT_INBOX_KILLS ?? 3);
/** The control needs one kill to show a doubled effect. */
const CONTROL_EVENTS = 60;
const CONSUMERS = 2;
const SETTLE_TIMEOUT_MS = 120_000;

interface Scenario {
  app: TestApp;
  queue: RabbitQueue;
  fleet: ConsumerFleet;
  events: number;
  minKills: number;
}

/** What a test opened, closed after it (last opened, first closed), however far it got. */
const opened: Array<() => Promise<void>> = [];
afterEach(async () => {
  const failures: unknown[] = [];
  for (const close of opened.splice(0).reverse()) await close().catch((error: unknown) => failures.push(error));
  if (failures.length > 0) throw failures[0];
});

/**
 * The publisher — an outbox sending through a ClientProxy registered with ClientsModule, as a service
 * would — with the consumers' tables, their queue, and `CONSUMERS` consumers of it (with the inbox or
 * without), consuming.
 */
async function openScenario(backend: BackendName, inbox: boolean, events: number, minKills: number): Promise<Scenario> {
  const table = uniqueName();
  const queue = await RabbitQueue.declare(`${table}_billing`);
  opened.push(() => queue.delete());
  const app = await createTestApp({
    backend,
    table,
    extraTypeOrm: { migrations: [...createOutboxMigrations(table), ...createOutboxInboxMigrations(`${table}_inbox`)] },
    outboxModule: OutboxModule.forRootAsync({
      tableName: table,
      imports: [
        ClientsModule.register([
          {
            name: 'BROKER',
            transport: Transport.RMQ,
            options: { urls: [RABBITMQ_URL], queue: queue.name, queueOptions: { durable: true }, persistent: true },
          },
        ]),
      ],
      inject: ['BROKER'],
      useFactory: (client: OutboxClientProxy) => ({
        worker: { enabled: false },
        transports: [new ClientProxyTransport('rabbitmq', client)],
        routes: [{ topic: INBOX_TOPIC, transport: 'rabbitmq' }],
      }),
    }),
  });
  opened.push(() => app.dispose());
  const fleet = new ConsumerFleet(
    { backend, table, sqlitePath: app.sqlitePath, queue: queue.name, inbox },
    { minKills, firstCommit: 2, lastCommit: 20 },
  );
  opened.push(() => fleet.stop());
  await app.dataSource.query(
    app.sql(`CREATE TABLE "${table}_effects" ("event_id" varchar(36) NOT NULL, "pid" integer NOT NULL)`),
  );
  // Both consume before the first message comes: the broker shares the messages out between them.
  await fleet.start(CONSUMERS);
  return { app, queue, fleet, events, minKills };
}

/** Publishes `count` events, 50 per transaction, and has the outbox send them to RabbitMQ. */
async function send(app: TestApp, count: number): Promise<string[]> {
  const ids = await publishEvents(app, count, 50, undefined, undefined, INBOX_TOPIC);
  const sent = await app.worker.drain();
  if (sent.delivered !== count) throw new Error(`the outbox sent ${JSON.stringify(sent)} of ${count} events`);
  return ids;
}

/**
 * Sends the scenario's events, and resolves with the ids of all it sent once the fleet was killed
 * `minKills` times, every message has an effect, and nothing is in flight: the queue is empty and every
 * consumer the broker counts has finished what it took. (A killed consumer leaves the broker's count
 * when its unacknowledged messages go back to the queue, so none can hide in a dead one; a replacement
 * still booting holds none.) Should the messages run out before the kills — the consumer that was to
 * die got too few — it sends 50 more whenever all consumers are up and idle.
 */
async function run({ app, queue, fleet, events, minKills }: Scenario): Promise<string[]> {
  const ids = await send(app, events);
  let progress = '';
  try {
    await eventually(
      async () => {
        const [{ n }] = await app.raw.query<{ n: number | string }>(
          `SELECT count(DISTINCT "event_id") AS "n" FROM "${app.table}_effects"`,
        );
        const idle = fleet.idleConsumers();
        const depth = await queue.depth();
        progress = `${n} of ${ids.length} applied, ${JSON.stringify(depth)}, ${fleet.kills} kills`;
        const quiet = Number(n) === ids.length && depth.messageCount === 0 && depth.consumerCount === idle;
        if (quiet && fleet.kills < minKills && !fleet.booting) ids.push(...(await send(app, 50)));
        return quiet && fleet.kills >= minKills && fleet.idleConsumers() === idle;
      },
      SETTLE_TIMEOUT_MS,
      `every message applied after ${minKills} kills, and nothing in flight`,
    );
  } catch (error) {
    throw new Error(`${(error as Error).message}; last seen: ${progress}; ${fleet.describe()}`);
  }
  return ids;
}

/** The effect rows of each message id, read on a fresh connection: the pid of the process that wrote each. */
async function effects(app: TestApp): Promise<Map<string, number[]>> {
  const db = await rawDb(app.backend, app.sqlitePath);
  try {
    const rows = await db.query<{ event_id: string; pid: number }>(
      `SELECT "event_id", "pid" FROM "${app.table}_effects"`,
    );
    const byId = new Map<string, number[]>();
    for (const row of rows) byId.set(row.event_id, [...(byId.get(row.event_id) ?? []), Number(row.pid)]);
    return byId;
  } finally {
    await db.close();
  }
}

/**
 * A service's consumers on RabbitMQ (`noAck: false`), two at once on one queue, each killed (SIGKILL)
 * once the transaction of a message's effect has committed and before the message is acknowledged,
 * and restarted; the broker gives the message to the other one (or to the replacement). With the
 * inbox, each message's effect exists exactly once; without it (the control), some twice.
 */
describe.each(faultBackends())('RabbitMQ consumers killed between their commit and the ack, on %s', (backend) => {
  it(`with @OutboxInbox: ${CONSUMERS} consumers take ${EVENTS} messages while killed at least ${MIN_KILLS} times: each effect exactly once`, async () => {
    const started = Date.now();
    const scenario = await openScenario(backend, true, EVENTS, MIN_KILLS);
    const { app, queue, fleet } = scenario;
    const ids = await run(scenario);
    const settleMs = Date.now() - started;
    await fleet.stop();
    // Every message acknowledged: stopped, the consumers gave nothing back.
    expect(await queue.depth()).toEqual({ messageCount: 0, consumerCount: 0 });

    const byId = await effects(app);
    const problems = ids.filter((id) => byId.get(id)?.length !== 1).map((id) => `${id}: ${byId.get(id)?.length ?? 0}`);
    const published = new Set(ids);
    problems.push(...[...byId.keys()].filter((id) => !published.has(id)).map((id) => `${id}: never published`));
    expect(problems).toEqual([]);

    // Each kill came after its commit (the killed process's effect is there) and before the broker had
    // the acknowledgement (it delivered the message again), and the inbox skipped the copy.
    const log = fleet.log();
    expect(log.kills.length).toBeGreaterThanOrEqual(MIN_KILLS);
    expect(new Set(log.kills.map((k) => k.pid))).toEqual(fleet.killedPids);
    for (const kill of log.kills) {
      expect(byId.get(kill.id)).toEqual([kill.pid]);
      const copies = log.handled.filter((h) => h.id === kill.id && h.pid !== kill.pid);
      expect(copies).toContainEqual(expect.objectContaining({ redelivered: true, outcome: 'duplicate' }));
      expect(copies.filter((h) => h.outcome === 'applied')).toEqual([]);
    }
    expect(log.failed).toEqual([]);
    expect(fleet.unexpectedExits).toEqual([]);
    record({
      scenario: `inbox: ${CONSUMERS} RabbitMQ consumers killed after commit, before ack`,
      backend,
      events: ids.length,
      kills: fleet.kills,
      duplicates: { killed: 0, leaseExpired: 0 },
      lost: 0,
      dead: 0,
      drainMs: settleMs,
    });
  });

  it('the control, without @OutboxInbox: the same kill leaves a message’s effect twice', async () => {
    const started = Date.now();
    const scenario = await openScenario(backend, false, CONTROL_EVENTS, 1);
    const { app, fleet } = scenario;
    const ids = await run(scenario);
    const settleMs = Date.now() - started;
    await fleet.stop();

    const byId = await effects(app);
    expect(ids.filter((id) => !byId.has(id))).toEqual([]);
    const doubled = ids.filter((id) => byId.get(id)!.length > 1);
    const log = fleet.log();
    expect(log.kills.length).toBeGreaterThan(0);
    // The message whose effect committed just before the kill was applied again when delivered again.
    for (const kill of log.kills) {
      expect(doubled).toContain(kill.id);
      const copies = log.handled.filter((h) => h.id === kill.id && h.pid !== kill.pid);
      expect(copies).toContainEqual(expect.objectContaining({ redelivered: true, outcome: 'applied' }));
    }
    expect(doubled.length).toBeGreaterThan(0);
    expect(fleet.unexpectedExits).toEqual([]);
    record({
      scenario: 'inbox control: the same consumers without @OutboxInbox',
      backend,
      events: ids.length,
      kills: fleet.kills,
      duplicates: { killed: doubled.length, leaseExpired: 0 },
      lost: 0,
      dead: 0,
      drainMs: settleMs,
    });
  });
});
