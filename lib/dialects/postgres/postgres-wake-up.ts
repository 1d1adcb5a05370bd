import type { DataSource } from 'typeorm';
import type { WakeUpChannel } from '../shared/outbox-dialect.interface';
import { reconnectDelay } from '../../wake-up/notify-window';
import { HintSendingChannel } from '../../wake-up/wake-up-channel-base';

/** A node-postgres client of our own, outside the application's pool. */
interface OwnClient {
  query(sql: string): Promise<unknown>;
  on(event: string, listener: (...args: never[]) => void): void;
  off(event: string, listener: (...args: never[]) => void): void;
  connect(): Promise<void>;
  end(): Promise<void>;
  processID?: number;
}
interface Pool {
  /** node-postgres keeps the client class and the connection settings of its pool. */
  Client: new (options: unknown) => OwnClient;
  options: unknown;
}

/**
 * Cross-instance wake-up on PostgreSQL. Notifications are hints, never the delivery path: they are
 * sent after commit, carry no payload but the sender's id, and a listener that lost its connection
 * polls once it is back, since nothing is replayed.
 *
 * Cost: instead of a NOTIFY inside every publishing transaction (which serialises commits on the
 * notification queue), an instance sends NOTIFY after its commits, at most one per window (see
 * NotifyWindow), on a connection of its own rather than one of the application's pool, whose
 * commits do not wait for the WAL to reach the disk.
 *
 * LISTEN holds its connection for the life of the application, so it has one of its own too: taken
 * from the application's pool, it would leave a pool of one with nothing for the application.
 */
export class PostgresWakeUp extends HintSendingChannel implements WakeUpChannel {
  private readonly channel: string;
  private client: OwnClient | undefined;
  /** The listener being opened, and its connection: close() must not wait for a server that does not answer. */
  private connecting: Promise<void> | undefined;
  private starting: OwnClient | undefined;
  private notifier: Promise<OwnClient> | undefined;
  private detach: (() => void) | undefined;

  constructor(
    private readonly dataSource: DataSource,
    table: string,
  ) {
    super();
    this.channel = `outbox_${table}`;
    // The table name is an identifier (validated) and the sender a UUID: nothing here needs escaping.
    // NOTIFY takes a transaction id, so each one commits through the WAL; a hint need not wait for
    // the disk (lost in a crash, it costs one poll interval). SET LOCAL, not SET: behind a
    // transaction-mode pooler (PgBouncer) a session setting would stay on a server connection that
    // other clients get next.
    this.notifySql = `BEGIN; SET LOCAL synchronous_commit TO off; NOTIFY "${this.channel}", '${this.sender}'; COMMIT`;
  }

  private readonly notifySql: string;

  private pool(): Pool {
    return (this.dataSource.driver as unknown as { master: Pool }).master;
  }

  /** One NOTIFY for the commits of a window. */
  protected async send(): Promise<void> {
    const connection = await (this.notifier ??= this.openNotifier());
    // Simple protocol, no parameters: the whole transaction is one message and one round trip.
    await connection.query(this.notifySql);
  }

  protected override sendFailed(): void {
    this.notifier = undefined; // reconnect on the next commit
  }

  private async openNotifier() {
    const pool = this.pool();
    const client = new pool.Client(pool.options);
    client.on('error', () => (this.notifier = undefined));
    await client.connect();
    if (this.closed) {
      await client.end();
      throw new Error('the wake-up channel closed while connecting');
    }
    return client;
  }

  async listen(wake: () => void): Promise<void> {
    await this.connect(wake, 0);
  }

  /** The backend process id of the listening connection (for operations and tests). */
  get listenerPid(): number | undefined {
    return this.client?.processID;
  }

  private connect(wake: () => void, attempt: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    const connecting = this.openListener(wake, attempt).finally(() => {
      if (this.connecting === connecting) this.connecting = undefined;
    });
    this.connecting = connecting;
    return connecting;
  }

  private async openListener(wake: () => void, attempt: number): Promise<void> {
    const pool = this.pool();
    const client = new pool.Client(pool.options);
    let gone = false;
    // Once per client, whichever comes first: a failed start, an error, or the end of the connection.
    const retire = (error: unknown, nextAttempt: number) => {
      if (gone) return;
      gone = true;
      detach();
      if (this.client === client) this.client = undefined;
      client.end().catch(() => undefined);
      if (this.closed) return;
      this.failed(error, 'listen');
      setTimeout(() => void this.connect(wake, nextAttempt), reconnectDelay(nextAttempt)).unref();
    };
    const onNotification = (message: { channel: string; payload?: string }) => {
      if (message.channel === this.channel && message.payload !== this.sender) wake();
    };
    const onLost = (error?: Error) => retire(error ?? new Error('the LISTEN connection ended'), 0);
    const detach = () => {
      client.off('notification', onNotification);
      client.off('error', onLost);
      client.off('end', onLost);
      // A socket error after we let go of the client must not crash the process.
      client.on('error', () => undefined);
    };
    client.on('notification', onNotification);
    client.on('error', onLost);
    client.on('end', onLost);
    this.starting = client;
    try {
      await client.connect();
      await client.query(`LISTEN "${this.channel}"`);
    } catch (error) {
      retire(error, attempt + 1);
      return;
    } finally {
      this.starting = undefined;
    }
    if (gone) return;
    if (this.closed) {
      gone = true;
      detach();
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    this.detach = detach;
    this.listening(wake);
  }

  async close(): Promise<void> {
    this.stopSending();
    const notifier = this.notifier;
    this.notifier = undefined;
    await notifier?.then((c) => c.end()).catch(() => undefined);
    // A listener still starting sees `closed` and ends its own connection.
    this.starting?.end().catch(() => undefined);
    await this.connecting;
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    this.detach?.();
    // Ending the session ends its LISTEN.
    await client.end().catch(() => undefined);
  }
}
