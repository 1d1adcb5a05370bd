import type { OutboxMessage, RecordedOutboxMessage } from '../interfaces/outbox-message.interface';
import type { OutboxRoute, OutboxTransport } from '../interfaces/outbox-transport.interface';
import { snapshotMessage } from '../utils/message-snapshot';

export type { RecordedOutboxMessage } from '../interfaces/outbox-message.interface';

/**
 * Records what it is asked to send instead of sending it, for applications' tests: assert on `sent`
 * or `messages(topic)`, and use `failNext()` to exercise retries.
 */
export class InMemoryTransport implements OutboxTransport {
  readonly sent: Array<{ message: RecordedOutboxMessage; route: OutboxRoute }> = [];
  private readonly failures: unknown[] = [];

  constructor(readonly name = 'memory') {}

  send(message: OutboxMessage, route: OutboxRoute): Promise<void> {
    // What the test queued, an Error or not: a transport may reject with anything.
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
    if (this.failures.length > 0) return Promise.reject(this.failures.shift());
    // The `signal` means nothing once the send is over; the rest is copied, so the record shows what was
    // sent even if the caller reuses objects.
    this.sent.push({ message: snapshotMessage(message), route });
    return Promise.resolve();
  }

  /** The recorded messages, in sending order; only those of exactly `topic` when it is given. */
  messages(topic?: string): RecordedOutboxMessage[] {
    return this.sent.filter((entry) => topic === undefined || entry.message.topic === topic).map((e) => e.message);
  }

  /** Forgets what was sent and any pending `failNext()`. */
  clear(): void {
    this.sent.length = 0;
    this.failures.length = 0;
  }

  /**
   * Makes the next `count` sends reject with `error` without recording them. Calls add up: the
   * failures are used in the order they were requested.
   */
  failNext(count = 1, error: unknown = new Error('InMemoryTransport: simulated failure')): void {
    if (!Number.isInteger(count) || count < 0) {
      throw new RangeError(`InMemoryTransport.failNext(count): expected a whole number of 0 or more, got ${count}`);
    }
    for (let i = 0; i < count; i++) this.failures.push(error);
  }
}
