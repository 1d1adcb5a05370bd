import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { OutboxWakeUpChannel } from '../interfaces/outbox-wake-up.interface';
import { brokerOf } from '../transports/client-proxy/client-broker';
import { reconnectDelay } from './notify-window';
import { HintSendingChannel } from './wake-up-channel-base';

export interface ClientProxyWakeUpOptions {
  /**
   * The Redis channel or NATS subject. Default `outbox.wake-up`. Outboxes that share one wake each
   * other needlessly (an empty claim each): give each outbox table its own.
   */
  channel?: string;
}

/** The parts of ioredis the channel uses (kept structural: optional peers). */
interface RedisConnection {
  publish(channel: string, message: string): Promise<number>;
  subscribe(channel: string): Promise<unknown>;
  on(event: string, listener: (...args: never[]) => void): unknown;
  connect(): Promise<void>;
  disconnect(): void;
  duplicate(override: Record<string, unknown>): RedisConnection;
}
/** The parts of a nats.js connection the channel uses. */
interface NatsConnection {
  publish(subject: string, data: Uint8Array): void;
  subscribe(
    subject: string,
    options: { callback: (error: unknown, message: { data: Uint8Array }) => void },
  ): { unsubscribe(): void };
  status(): AsyncIterable<{ type: string }> & { stop(): void };
  flush(): Promise<void>;
}
interface Client {
  connect(): Promise<unknown>;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** One broker's publish and subscribe, as the channel needs them. */
interface BrokerLink {
  send(message: string): Promise<void>;
  /** Subscribes; `onMessage` for every message, `reconnected` after the link came back on its own. */
  subscribe(
    onMessage: (message: string) => void,
    reconnected: () => void,
    lost: (error: unknown) => void,
  ): Promise<void>;
  close(): void;
}

/**
 * A wake-up channel over the Redis or NATS client the application already registered with
 * `ClientsModule` (`ClientRedis`, `ClientNats`): after a commit that published, a tiny message on
 * `channel` (at most one per 10 ms per instance); every instance whose worker runs subscribes and
 * claims at once. For MySQL/MariaDB and SQLite, whose databases cannot notify; on PostgreSQL it
 * replaces LISTEN/NOTIFY (say behind a transaction-mode pooler, where LISTEN does not work).
 *
 * Hints only: Redis pub/sub and core NATS keep nothing, so a message sent while an instance was
 * disconnected is lost, and costs that instance one poll interval. It also claims once after each
 * reconnection.
 */
export class ClientProxyWakeUp extends HintSendingChannel implements OutboxWakeUpChannel {
  private readonly channel: string;
  private readonly link: BrokerLink;
  private retry: NodeJS.Timeout | undefined;

  constructor(client: object, options: ClientProxyWakeUpOptions = {}) {
    super();
    this.channel = options.channel ?? 'outbox.wake-up';
    if (typeof this.channel !== 'string' || this.channel.length === 0 || this.channel.length > 255) {
      throw new OutboxConfigurationError('wakeUp.channel', 'expected a channel (subject) name of 1-255 characters');
    }
    const broker = client && typeof (client as Client).connect === 'function' ? brokerOf(client) : 'other';
    if (broker === 'redis') this.link = redisLink(client as Client, this.channel);
    else if (broker === 'nats') this.link = natsLink(client as Client, this.channel);
    else {
      throw new OutboxConfigurationError(
        'wakeUp',
        'ClientProxyWakeUp needs a ClientRedis or ClientNats of @nestjs/microservices (inject the client registered with ClientsModule)',
      );
    }
  }

  protected send(): Promise<void> {
    return this.link.send(this.sender);
  }

  /** Never rejects: a broker that cannot be reached is reported, and tried again with a growing delay. */
  async listen(wake: () => void): Promise<void> {
    await this.subscribe(wake, 0);
  }

  private async subscribe(wake: () => void, attempt: number): Promise<void> {
    if (this.closed) return;
    const back = () => this.listening(wake);
    try {
      await this.link.subscribe(
        (message) => message !== this.sender && wake(),
        back,
        (error) => this.failed(error, 'listen'),
      );
    } catch (error) {
      this.failed(error, 'listen');
      if (!this.closed)
        this.retry = setTimeout(() => void this.subscribe(wake, attempt + 1), reconnectDelay(attempt)).unref();
      return;
    }
    back();
  }

  close(): Promise<void> {
    this.stopSending();
    clearTimeout(this.retry);
    this.link.close();
    return Promise.resolve();
  }
}

/** Connects the Nest client (once; later calls share it) and returns the driver connection it keeps in `field`. */
async function connected<T>(client: Client, field: 'pubClient' | 'natsClient', broker: string): Promise<T> {
  await client.connect();
  const connection = (client as unknown as Record<typeof field, T | null>)[field];
  if (!connection) throw new Error(`the ${broker} client is not connected`);
  return connection;
}

/**
 * Redis: PUBLISH on the client's own publishing connection; SUBSCRIBE on a connection of our own (a
 * duplicate of it, which retries for ever and subscribes again after each reconnection).
 */
function redisLink(client: Client, channel: string): BrokerLink {
  let subscriber: RedisConnection | undefined;
  let closing = false;
  const publisher = () => connected<RedisConnection>(client, 'pubClient', 'Redis');
  return {
    async send(message) {
      await (await publisher()).publish(channel, message);
    },
    async subscribe(onMessage, reconnected, lost) {
      subscriber?.disconnect();
      const sub = (await publisher()).duplicate({
        lazyConnect: true,
        retryStrategy: reconnectDelay,
        maxRetriesPerRequest: null,
      });
      subscriber = sub;
      let ready = false;
      sub.on('message', (from: string, message: string) => from === channel && onMessage(message));
      sub.on('error', (error: unknown) => lost(error));
      // A connection the server closed says nothing on 'error'.
      sub.on(
        'close',
        () => ready && !closing && sub === subscriber && lost(new Error('the Redis subscription connection closed')),
      );
      sub.on('ready', () => {
        if (ready) reconnected();
      });
      try {
        await sub.connect();
        await sub.subscribe(channel);
      } catch (error) {
        sub.disconnect();
        throw error;
      }
      ready = true;
    },
    close() {
      closing = true;
      subscriber?.disconnect();
      subscriber = undefined;
    },
  };
}

/** NATS: publish and subscribe on the client's connection, which reconnects and resubscribes by itself. */
function natsLink(client: Client, channel: string): BrokerLink {
  let subscription: { unsubscribe(): void } | undefined;
  let status: { stop(): void } | undefined;
  const connection = () => connected<NatsConnection>(client, 'natsClient', 'NATS');
  return {
    async send(message) {
      (await connection()).publish(channel, encoder.encode(message));
    },
    async subscribe(onMessage, reconnected, lost) {
      const nc = await connection();
      subscription = nc.subscribe(channel, {
        callback: (error, message) => (error ? lost(error) : onMessage(decoder.decode(message.data))),
      });
      // The server has the subscription once a round trip after it is done.
      await nc.flush();
      const updates = nc.status();
      status = updates;
      void (async () => {
        for await (const update of updates) {
          if (update.type === 'reconnect') reconnected();
          else if (update.type === 'disconnect') lost(new Error('the NATS connection was lost'));
        }
      })().catch(lost);
    },
    close() {
      subscription?.unsubscribe();
      status?.stop();
      subscription = status = undefined;
    },
  };
}
