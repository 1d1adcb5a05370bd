import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { OutboxDrainResult } from '../delivery/drain-result';
import type { OutboxWorker } from '../delivery/outbox.worker';
import type { OutboxTestingHooks } from '../interfaces/outbox-options.interface';
import type { OutboxErrorText } from '../interfaces/outbox-error-text.interface';
import type { OutboxDeadLetterRecord } from '../interfaces/outbox-message.interface';
import type { InMemoryTransport, RecordedOutboxMessage } from '../transports/in-memory.transport';
import { ErrorText } from '../utils/error-text';

/** One call of an `@OutboxHandler()` method: the message it was given, and how it ended. */
export interface OutboxHandlerRecord<T = unknown> extends RecordedOutboxMessage {
  payload: T;
  /** The handler's recorded name (`Class.method`, or `options.name`). */
  handler: string;
  /** The error's name and message, when the call threw, rejected or timed out. */
  error?: string;
}

/**
 * What a test sees of one outbox built with `OutboxTesting.override()`: `drain()` delivers, and the
 * records say what handlers were given and what routes would have sent. Records start when the module
 * is created and stay until `clear()`.
 */
export class OutboxTestHarness implements OutboxTestingHooks {
  private readonly calls: OutboxHandlerRecord[] = [];
  private readonly deaths: OutboxDeadLetterRecord[] = [];

  constructor(
    private readonly transports: InMemoryTransport[],
    private readonly worker: () => OutboxWorker,
    /** The module's, which writes a failed call's error as the outbox writes every error. */
    private readonly errorText: OutboxErrorText = new ErrorText(),
  ) {}

  /** For the worker: an event was dead-lettered. */
  eventDeadLettered(record: OutboxDeadLetterRecord): void {
    this.deaths.push(record);
  }

  /** For the worker: a handler call ended. */
  handlerCalled(handler: string, message: RecordedOutboxMessage, error: unknown): void {
    this.calls.push(
      error === undefined ? { ...message, handler } : { ...message, handler, error: this.errorText.describe(error) },
    );
  }

  /**
   * Delivers every event that is due, claim after claim, retries included (they are due at once), and
   * resolves with what it did. Events published with a delay wait for it, as they would in production.
   */
  drain(): Promise<OutboxDrainResult> {
    return this.worker().drain();
  }

  /**
   * The messages handlers returned from, in order, each with the handler's name; only those of exactly
   * `topic` when it is given (type the payload with `handled<OrderPlaced>('order.placed')`).
   */
  handled<T = unknown>(topic?: string): Array<OutboxHandlerRecord<T>> {
    return this.calls.filter(
      (call) => call.error === undefined && (topic === undefined || call.topic === topic),
    ) as Array<OutboxHandlerRecord<T>>;
  }

  /** The messages whose handler threw, rejected or timed out, in order, each with the error. */
  failed<T = unknown>(topic?: string): Array<OutboxHandlerRecord<T>> {
    return this.calls.filter(
      (call) => call.error !== undefined && (topic === undefined || call.topic === topic),
    ) as Array<OutboxHandlerRecord<T>>;
  }

  /**
   * The events dead-lettered since the module was created (or the last `clear()`), in order, each with
   * its payload, key, headers, the attempt it died at and the error; only those of exactly `topic` when
   * it is given.
   */
  deadLettered<T = unknown>(topic?: string): Array<OutboxDeadLetterRecord<T>> {
    return this.deaths.filter((event) => topic === undefined || event.topic === topic) as Array<
      OutboxDeadLetterRecord<T>
    >;
  }

  /**
   * What the routes sent, transport by transport (in the order of the module's `transports`), each in
   * sending order; only messages of exactly `topic` when it is given.
   */
  sent(topic?: string): RecordedOutboxMessage[] {
    return this.transports.flatMap((transport) => transport.messages(topic));
  }

  /**
   * The in-memory stand-in of the application's transport `name`: its `messages()`, and `failNext()`
   * to make its next sends fail.
   */
  transport(name: string): InMemoryTransport {
    const transport = this.transports.find((t) => t.name === name);
    if (!transport) {
      const known = this.transports.map((t) => `"${t.name}"`).join(', ') || '(none)';
      throw new OutboxConfigurationError(
        'OutboxTestHarness.transport',
        `no transport "${name}"; the module has ${known}`,
      );
    }
    return transport;
  }

  /** Forgets every record and what the transports sent (with their pending `failNext()`). */
  clear(): void {
    this.calls.length = 0;
    this.deaths.length = 0;
    for (const transport of this.transports) transport.clear();
  }
}
