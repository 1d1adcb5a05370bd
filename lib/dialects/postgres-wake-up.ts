import { randomUUID } from 'node:crypto';
import type { DataSource } from 'typeorm';
import type { WakeUpChannel } from './outbox-dialect.interface';

interface PoolClient {
  query(sql: string, params?: unknown[]): Promise<unknown>;
  on(event: string, listener: (...args: never[]) => void): void;
  off(event: string, listener: (...args: never[]) => void): void;
  release(error?: Error | boolean): void;
  processID?: number;
}
interface Pool {
  connect(): Promise<PoolClient>;
  query(sql: string, params?: unknown[]): Promise<unknown>;
  /** node-postgres keeps the client class and the connection settings of its pool. */
  Client: new (options: unknown) => PoolClient & { connect(): Promise<void>; end(): Promise<void> };
  options: unknown;
}

const RECONNECT_MS = [100, 250, 500, 1000, 2000, 5000];
/**
 * At most one NOTIFY per window per instance: the first commit after a quiet spell notifies at once,
 * later ones in the window share one sent at its end. Bounds the cost under load to a few hundred
 * tiny transactions a second, and the added delay to the window.
 */
const NOTIFY_WINDOW_MS = 10;

/**
 * Cross-instance wake-up on PostgreSQL. Notifications are hints, never the delivery path: they are
 * sent after commit, carry no payload but the sender's id, and a listener that lost its connection
 * polls once it is back, since nothing is replayed.
 *
 * Cost: instead of a NOTIFY inside every publishing transaction (which serialises commits on the
 * notification queue), an instance sends NOTIFY after its commits, at most one per window (see
 * NOTIFY_WINDOW_MS), on a connection of its own rather than one of the application's pool, whose
 * commits do not wait for the WAL to reach the disk.
 */
export class PostgresWakeUp implements WakeUpChannel {
  private readonly sender = randomUUID();
  private readonly channel: string;
  private sending = false;
  private dirty = false;
  private lastSent = 0;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private client: PoolClient | undefined;
  private notifier: Promise<PoolClient & { end(): Promise<void> }> | undefined;
  private detach: (() => void) | undefined;

  constructor(
    private readonly dataSource: DataSource,
    table: string,
    private readonly onError: (error: unknown) => void,
  ) {
    this.channel = `outbox_${table}`;
    // The table name is an identifier (validated) and the sender a UUID: nothing here needs escaping.
    this.notifySql = `NOTIFY "${this.channel}", '${this.sender}'`;
  }

  private readonly notifySql: string;

  private pool(): Pool {
    return (this.dataSource.driver as unknown as { master: Pool }).master;
  }

  notify(): void {
    if (this.closed) return;
    this.dirty = true;
    if (this.sending || this.timer) return;
    const wait = this.lastSent + NOTIFY_WINDOW_MS - Date.now();
    if (wait > 0) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        void this.send();
      }, wait);
      this.timer.unref();
      return;
    }
    void this.send();
  }

  /** Sends one NOTIFY for every commit since the last one; then, if more came meanwhile, schedules again. */
  private async send(): Promise<void> {
    if (this.closed || !this.dirty) return;
    this.dirty = false;
    this.sending = true;
    this.lastSent = Date.now();
    try {
      const connection = await (this.notifier ??= this.openNotifier());
      // A simple-protocol statement with no parameters: one message, nothing to parse or bind.
      await connection.query(this.notifySql);
    } catch (error) {
      this.notifier = undefined; // reconnect on the next commit
      this.onError(error); // the pollers still find the events
    } finally {
      this.sending = false;
    }
    if (this.dirty) this.notify();
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
    // NOTIFY takes a transaction id, so each one commits through the WAL; a hint need not wait for
    // the disk (lost in a crash, it costs one poll interval). Only this connection's commits are async.
    await client.query('SET synchronous_commit TO off');
    return client;
  }

  async listen(wake: () => void): Promise<void> {
    await this.connect(wake, 0);
  }

  /** The backend process id of the listening connection (for operations and tests). */
  get listenerPid(): number | undefined {
    return this.client?.processID;
  }

  private async connect(wake: () => void, attempt: number): Promise<void> {
    if (this.closed) return;
    try {
      const client = await this.pool().connect();
      const onNotification = (message: { channel: string; payload?: string }) => {
        if (message.channel === this.channel && message.payload !== this.sender) wake();
      };
      const onLost = (error?: Error) => {
        detach();
        if (this.client === client) this.client = undefined;
        client.release(error ?? true);
        if (this.closed) return;
        this.onError(error ?? new Error('the LISTEN connection ended'));
        setTimeout(() => void this.connect(wake, 0), RECONNECT_MS[0]).unref();
      };
      const detach = () => {
        client.off('notification', onNotification);
        client.off('error', onLost);
        client.off('end', onLost);
      };
      client.on('notification', onNotification);
      client.on('error', onLost);
      client.on('end', onLost);
      this.detach = detach;
      await client.query(`LISTEN "${this.channel}"`);
      this.client = client;
      // Notifications sent while no one listened are gone: look for work once now.
      wake();
    } catch (error) {
      this.onError(error);
      const delay = RECONNECT_MS[Math.min(attempt, RECONNECT_MS.length - 1)];
      setTimeout(() => void this.connect(wake, attempt + 1), delay).unref();
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    const notifier = this.notifier;
    this.notifier = undefined;
    await notifier?.then((c) => c.end()).catch(() => undefined);
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    this.detach?.();
    try {
      await client.query(`UNLISTEN "${this.channel}"`);
      client.release();
    } catch (error) {
      client.release(error as Error);
    }
  }
}
