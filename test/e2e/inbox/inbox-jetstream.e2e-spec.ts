import { Transport } from '@nestjs/microservices';
import {
  AckPolicy,
  connect,
  type ConsumerMessages,
  DeliverPolicy,
  type JetStreamManager,
  type JsMsg,
  nanos,
  type NatsConnection,
} from 'nats';
import type { Logger as TypeOrmLogger } from 'typeorm';
import { ClientProxyTransport, OutboxInboxMessageError, OutboxInboxService } from '../../../lib';
import { backends, type BackendName, isSqlite, uniqueName } from '../../fixtures/backends';
import { brokerApp } from '../../fixtures/brokers';
import { deferred, eventually } from '../../fixtures/eventually';
import { inboxTestApp } from '../../fixtures/inbox-app';
import type { TestApp } from '../../fixtures/test-app';

const NATS = 'nats://127.0.0.1:4222';
/** The consumer's ack wait: a delivery not acknowledged within it is delivered again. */
const ACK_WAIT_MS = 1_000;
/** How long a consumer waits before a message whose processing failed is delivered again. */
const RETRY_DELAY_MS = 100;

/** The packet `ClientProxyTransport` publishes (a Nest NATS client's), with the billing payload. */
interface Packet {
  pattern: string;
  data: { order: string };
}

/** What one delivery of a message came to at a consumer instance. */
interface Delivery {
  instance: string;
  order: string;
  deliveryCount: number;
  redelivered: boolean;
  /** The inbox's answer; `failed`: process() threw (nak'd); `terminated`: the message has no usable id. */
  result?: 'processed' | 'duplicate' | 'failed' | 'terminated';
  error?: unknown;
  acked: boolean;
}

/** Hears the statements a DataSource sends, to know when one has gone to the database. */
class StatementWatch implements TypeOrmLogger {
  private waiters: Array<{ pattern: RegExp; resolve: () => void }> = [];
  /** Resolves when a statement matching `pattern` is sent; fails after `timeoutMs` instead of hanging the test. */
  sent(pattern: RegExp, timeoutMs = 5_000): Promise<void> {
    const { promise, resolve, reject } = deferred();
    const timer = setTimeout(
      () => reject(new Error(`no statement matching ${pattern} within ${timeoutMs} ms`)),
      timeoutMs,
    );
    this.waiters.push({
      pattern,
      resolve: () => {
        clearTimeout(timer);
        resolve();
      },
    });
    return promise;
  }
  logQuery(query: string) {
    for (const waiter of this.waiters.filter((w) => w.pattern.test(query))) {
      this.waiters.splice(this.waiters.indexOf(waiter), 1);
      waiter.resolve();
    }
  }
  logQueryError() {}
  logQuerySlow() {}
  logSchemaBuild() {}
  logMigration() {}
  log() {}
}

/**
 * One instance of the billing service: a plain JetStream consumer, no decorators. Each message is
 * processed through the inbox with its `Nats-Msg-Id`, its business row written in the inbox's
 * transaction, then acknowledged.
 */
class BillingInstance {
  readonly deliveries: Delivery[] = [];
  /** Runs in the inbox's transaction once the business row is written: tests hold the transaction open here. */
  inWork: (delivery: Delivery) => Promise<void> | void = () => undefined;
  /** Runs between process() and the ack; false withholds the ack, as an instance that dies in between would. */
  beforeAck: (delivery: Delivery) => Promise<boolean> | boolean = () => true;
  private readonly inbox: OutboxInboxService;
  private readonly waiters: Array<{ match: (d: Delivery) => boolean; resolve: (d: Delivery) => void }> = [];
  private readonly subscriptions: ConsumerMessages[] = [];
  private readonly loops: Array<Promise<void>> = [];

  constructor(
    readonly name: string,
    readonly app: TestApp,
    readonly watch: StatementWatch,
    private readonly nats: NatsConnection,
    private readonly stream: string,
    private readonly effects: string,
    /** When each instance's process() came back, and what with, across instances. */
    private readonly timeline: string[],
  ) {
    this.inbox = app.module.get(OutboxInboxService);
  }

  /** One message of the durable consumer: the first it has, or the next one delivered again. */
  async receive(durable: string): Promise<JsMsg> {
    const consumer = await this.nats.jetstream().consumers.get(this.stream, durable);
    const message = await consumer.next({ expires: 5_000 });
    if (!message) throw new Error(`${this.name}: no message of ${durable} within 5 s`);
    return message;
  }

  /** Receives until a delivery of the durable consumer is acknowledged or terminated here. */
  async receiveUntilSettled(durable: string): Promise<Delivery> {
    for (;;) {
      const delivery = await this.handle(await this.receive(durable));
      if (delivery.acked || delivery.result === 'terminated') return delivery;
    }
  }

  /** Takes every message of the durable consumer, a few at a time, until stopped. */
  async consume(durable: string): Promise<void> {
    const consumer = await this.nats.jetstream().consumers.get(this.stream, durable);
    const messages = await consumer.consume({ max_messages: 5 });
    this.subscriptions.push(messages);
    this.loops.push(
      (async () => {
        for await (const message of messages) await this.handle(message);
      })(),
    );
  }

  async stop(): Promise<void> {
    for (const messages of this.subscriptions.splice(0)) messages.stop();
    await Promise.all(this.loops.splice(0));
  }

  /** Stops consuming, closes the NATS connection and the application, and drops what it made. */
  async dispose(): Promise<void> {
    await this.stop();
    await this.nats.close();
    await this.app.dispose();
  }

  async handle(message: JsMsg): Promise<Delivery> {
    const delivery: Delivery = {
      instance: this.name,
      order: message.json<Packet>().data.order,
      deliveryCount: message.info.deliveryCount,
      redelivered: message.info.redelivered,
      acked: false,
    };
    try {
      const outcome = await this.inbox.process('billing', message.headers?.get('Nats-Msg-Id'), async () => {
        await this.app.txHost.tx.query(this.app.sql(`INSERT INTO "${this.effects}" ("id", "note") VALUES (?, ?)`), [
          delivery.order,
          this.name,
        ]);
        await this.inWork(delivery);
      });
      delivery.result = outcome.duplicate ? 'duplicate' : 'processed';
    } catch (error) {
      delivery.error = error;
      if (error instanceof OutboxInboxMessageError) {
        // No copy of this message will ever carry a usable id: delivered again, it fails again. Terminate
        // it (after keeping it somewhere to look at, if it matters) rather than nak it round forever. No
        // reason given: nats-server 2.9 ignores a +TERM that carries one.
        delivery.result = 'terminated';
        message.term();
      } else {
        // Rolled back, the id with it: a later copy runs the work.
        delivery.result = 'failed';
        message.nak(RETRY_DELAY_MS);
      }
    }
    this.timeline.push(`${this.name} ${delivery.result}`);
    if (delivery.result === 'processed' || delivery.result === 'duplicate') {
      if (await this.beforeAck(delivery)) {
        message.ack();
        delivery.acked = true;
      }
    }
    this.deliveries.push(delivery);
    for (const waiter of this.waiters.filter((w) => w.match(delivery))) {
      this.waiters.splice(this.waiters.indexOf(waiter), 1);
      waiter.resolve(delivery);
    }
    return delivery;
  }

  /** The first delivery handled here (before or after the call) that `match` accepts. */
  settled(match: (d: Delivery) => boolean): Promise<Delivery> {
    const done = this.deliveries.find(match);
    if (done) return Promise.resolve(done);
    const { promise, resolve } = deferred<Delivery>();
    this.waiters.push({ match, resolve });
    return promise;
  }
}

/**
 * The statement of a second transaction on the same message that has to wait for the first one's
 * commit: the inbox's insert of the id, or on SQLite already the BEGIN IMMEDIATE that takes the
 * write lock.
 */
const waitingStatement = (backend: BackendName) =>
  isSqlite(backend) ? /^BEGIN IMMEDIATE/ : /^INSERT (IGNORE )?INTO \S*_inbox\b/;

const natsUp = process.env.OUTBOX_TEST_NATS !== 'down';
// Skipped only when NATS is down on a developer machine (global-setup reports it; CI fails instead).
(natsUp ? describe : describe.skip).each(backends())(
  'a NATS JetStream consumer whose acknowledgement times out, on %s — each message’s effect exactly once, across two consumer instances',
  (backend) => {
    const stream = uniqueName('INBOX').toUpperCase();
    const table = uniqueName();
    const effects = `${table}_effects`;
    const timeline: string[] = [];
    let admin: NatsConnection;
    let jsm: JetStreamManager;
    let publisher: TestApp;
    let a: BillingInstance;
    let b: BillingInstance;

    /**
     * An instance: an application context of its own, its own DataSource on the shared database (on
     * SQLite the same file), and its own NATS connection. better-sqlite3 waits for a lock synchronously,
     * which would stop the other instance's transaction in this same process from ever committing: there
     * a busy database fails at once instead (busy timeout 0), as the consumer's retry handles.
     */
    async function instance(name: string, sqlitePath?: string): Promise<BillingInstance> {
      const watch = new StatementWatch();
      const app = await inboxTestApp(backend, { retentionMs: false }, table, {
        sqlitePath,
        typeormLogger: watch,
        extraTypeOrm: backend === 'better-sqlite3' ? { timeout: 0 } : {},
      });
      return new BillingInstance(name, app, watch, await connect({ servers: NATS }), stream, effects, timeline);
    }

    beforeAll(async () => {
      admin = await connect({ servers: NATS });
      jsm = await admin.jetstreamManager();
      await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
      publisher = await brokerApp(
        { name: 'BROKER', transport: Transport.NATS, options: { servers: [NATS] } },
        (client) => ({
          transports: [
            new ClientProxyTransport('js', client, { jetstream: true, pattern: (m) => `${stream}.${m.topic}` }),
          ],
          routes: [{ topic: '#', transport: 'js' }],
        }),
      );
      a = await instance('A');
      b = await instance('B', a.app.sqlitePath);
      await a.app.raw.query(`CREATE TABLE "${effects}" ("id" varchar(64) NOT NULL, "note" varchar(255))`);
    });
    afterAll(async () => {
      // B first: A's disposal removes the SQLite file they share.
      await b?.dispose();
      await a?.dispose();
      await publisher?.dispose();
      // The stream takes its durable consumers with it.
      await jsm?.streams.delete(stream);
      await admin?.close();
    });
    beforeEach(async () => {
      await a.app.raw.query(`DELETE FROM "${effects}"`);
      await a.app.raw.query(`DELETE FROM "${table}_inbox"`);
      timeline.length = 0;
      for (const consumer of [a, b]) {
        consumer.inWork = () => undefined;
        consumer.beforeAck = () => true;
      }
    });

    /** A durable consumer of the messages of `billing.<tag>`, with explicit acks and the short ack wait. */
    async function durableFor(tag: string): Promise<string> {
      const durable = uniqueName(`billing_${tag}`);
      await jsm.consumers.add(stream, {
        durable_name: durable,
        filter_subject: `${stream}.billing.${tag}`,
        ack_policy: AckPolicy.Explicit,
        ack_wait: nanos(ACK_WAIT_MS),
        deliver_policy: DeliverPolicy.All,
      });
      return durable;
    }

    /** Publishes `count` billing orders through the outbox and has its worker forward them to JetStream. */
    async function publish(tag: string, count: number): Promise<string[]> {
      const events = await publisher.txHost.withTransaction(() =>
        publisher.outbox.publishMany(
          Array.from({ length: count }, (_, i) => ({ topic: `billing.${tag}`, payload: { order: `${tag}-${i}` } })),
        ),
      );
      expect(await publisher.worker.drain()).toMatchObject({ delivered: count, failed: 0 });
      return events.map((e) => e.id);
    }

    const effectRows = async () =>
      a.app.raw.query<{ id: string; note: string }>(`SELECT "id", "note" FROM "${effects}" ORDER BY "id", "note"`);
    const inboxIds = async () =>
      (await a.app.raw.query<{ message_id: string }>(`SELECT "message_id" FROM "${table}_inbox"`)).map(
        (r) => r.message_id,
      );
    /** Waits until JetStream holds nothing of the consumer unacknowledged or undelivered. */
    const allAcknowledged = (durable: string) =>
      eventually(
        async () => {
          const info = await jsm.consumers.info(stream, durable);
          return info.num_ack_pending === 0 && info.num_pending === 0;
        },
        5_000,
        `every message of ${durable} acknowledged`,
      );

    it('skips the copy JetStream delivers to B while A, its work committed, has not acknowledged yet', async () => {
      const durable = await durableFor('slowack');
      const [id] = await publish('slowack', 1);
      const bDone = deferred();
      // A's ack is late: JetStream gives up on it after the ack wait and delivers the message to B.
      a.beforeAck = async () => {
        await bDone.promise;
        return true;
      };
      const atA = a.handle(await a.receive(durable));
      let atB: Delivery;
      try {
        atB = await b.receiveUntilSettled(durable);
      } finally {
        bDone.resolve();
      }

      expect(await atA).toMatchObject({ deliveryCount: 1, redelivered: false, result: 'processed', acked: true });
      expect(atB).toMatchObject({
        order: 'slowack-0',
        deliveryCount: 2,
        redelivered: true,
        result: 'duplicate',
        acked: true,
      });
      expect(timeline).toEqual(['A processed', 'B duplicate']);
      expect(await effectRows()).toEqual([{ id: 'slowack-0', note: 'A' }]);
      expect(await inboxIds()).toEqual([id]);
      await allAcknowledged(durable);
    });

    it('makes B, given the message while A’s transaction is still open, wait for A’s commit, then skip it', async () => {
      const durable = await durableFor('open');
      const [id] = await publish('open', 1);
      const inside = deferred();
      /** Lets A's transaction commit. */
      const release = deferred();
      /** Lets A acknowledge. */
      const bDone = deferred();
      a.inWork = async () => {
        inside.resolve();
        await release.promise;
      };
      a.beforeAck = async () => {
        await bDone.promise;
        return true;
      };
      const atA = a.handle(await a.receive(durable));
      let atB: Delivery;
      // Whatever fails here, A's transaction must not stay open: it would hold its locks past the test.
      try {
        await inside.promise;
        // A's transaction is open, its business row written but not committed, past the ack wait.
        const redelivery = await b.receive(durable);
        expect(redelivery.info).toMatchObject({ deliveryCount: 2, redelivered: true });
        if (backend === 'better-sqlite3') {
          // Refused at once (see instance()): B naks it, and the copy after A's commit is skipped.
          expect(await b.handle(redelivery)).toMatchObject({ result: 'failed', acked: false });
          release.resolve();
          atB = await b.receiveUntilSettled(durable);
        } else {
          const waiting = b.watch.sent(waitingStatement(backend));
          let undecided = true;
          const settling = b.handle(redelivery).finally(() => (undecided = false));
          await waiting;
          // B's statement is at the database, and stays undecided while A's transaction is open.
          await a.app.raw.query('SELECT 1');
          expect(undecided).toBe(true);
          release.resolve();
          atB = await settling;
        }
      } finally {
        release.resolve();
        bDone.resolve();
      }

      expect(atB).toMatchObject({ order: 'open-0', result: 'duplicate', acked: true });
      expect(await atA).toMatchObject({ deliveryCount: 1, result: 'processed', acked: true });
      // On better-sqlite3 B was refused (once, or again if its retry came before A's commit), nowhere else.
      const refusals = timeline.filter((entry) => entry === 'B failed').length;
      expect(refusals > 0).toBe(backend === 'better-sqlite3');
      expect(timeline.slice(refusals).sort()).toEqual(['A processed', 'B duplicate']);
      expect(await effectRows()).toEqual([{ id: 'open-0', note: 'A' }]);
      expect(await inboxIds()).toEqual([id]);
      await allAcknowledged(durable);
    });

    it('applies each of 40 messages once when acks are withheld and JetStream delivers them again', async () => {
      const durable = await durableFor('run');
      const count = 40;
      const orders = Array.from({ length: count }, (_, i) => `run-${i}`);
      // The first ack of every fourth message is never sent, as when an instance dies after its commit.
      const withheld = (d: Delivery) => Number(d.order.split('-')[1]) % 4 === 0 && d.deliveryCount === 1;
      for (const consumer of [a, b]) consumer.beforeAck = (d) => !withheld(d);
      const before = { a: a.deliveries.length, b: b.deliveries.length };
      await Promise.all([a.consume(durable), b.consume(durable)]);

      const ids = await publish('run', count);
      await Promise.all(
        orders.map((order) => {
          const acked = (d: Delivery) => d.order === order && d.acked;
          return Promise.race([a.settled(acked), b.settled(acked)]);
        }),
      );
      await Promise.all([a.stop(), b.stop()]);

      const rows = await effectRows();
      expect(rows.map((r) => r.id).sort()).toEqual([...orders].sort());
      expect((await inboxIds()).sort()).toEqual([...ids].sort());
      const deliveries = [...a.deliveries.slice(before.a), ...b.deliveries.slice(before.b)];
      const redeliveries = deliveries.filter((d) => d.redelivered);
      expect(redeliveries.length).toBeGreaterThan(0);
      // Every commit whose ack was withheld came round again and was skipped.
      const unacked = deliveries.filter((d) => d.result === 'processed' && !d.acked);
      expect(unacked.length).toBeGreaterThan(0);
      for (const first of unacked) {
        expect(deliveries).toContainEqual(
          expect.objectContaining({ order: first.order, redelivered: true, result: 'duplicate', acked: true }),
        );
      }
      await allAcknowledged(durable);
    });

    it('refuses a message without Nats-Msg-Id with OutboxInboxMessageError, writing nothing; the consumer terminates it', async () => {
      const durable = await durableFor('noid');
      // Published straight to JetStream, not through the outbox: no message id.
      const packet: Packet = { pattern: `${stream}.billing.noid`, data: { order: 'noid-0' } };
      await admin.jetstream().publish(packet.pattern, new TextEncoder().encode(JSON.stringify(packet)));

      const delivery = await a.receiveUntilSettled(durable);
      expect(delivery).toMatchObject({ order: 'noid-0', result: 'terminated', acked: false });
      expect(delivery.error).toBeInstanceOf(OutboxInboxMessageError);
      expect((delivery.error as Error).message).toMatch(/carries no outbox message id/);
      expect(await effectRows()).toEqual([]);
      expect(await inboxIds()).toEqual([]);
      // Terminated, it is not delivered again.
      await allAcknowledged(durable);
    });
  },
);
