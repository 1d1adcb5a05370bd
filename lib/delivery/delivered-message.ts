import type { OutboxMessage } from '../interfaces/outbox-message.interface';
import type { ClaimedEvent } from '../interfaces/claimed-event.interface';
import type { EntityManager } from 'typeorm';
import type { LazyAbort } from './lazy-abort';

/**
 * The message a handler receives. A class, not a literal with a getter, so every message has the same
 * shape (a literal with an accessor is kept as a slow dictionary object); `signal` is built on first read.
 */
export class DeliveredMessage implements OutboxMessage {
  readonly id: string;
  readonly topic: string;
  readonly key: string | null;
  payload: unknown;
  headers: Record<string, string>;
  readonly attempt: number;
  readonly createdAt: Date;
  /** The event and this call's abort, private to the class: a spread or JSON of the message shows only its data. */
  readonly #event: ClaimedEvent;
  readonly #abort: LazyAbort;
  /** The claim's token: what a transactional handler's record of its success is fenced by. */
  readonly #token: string;
  /** The transaction a transactional handler runs in, once it is open. */
  #manager: EntityManager | undefined;

  /** The claimed event the message was built from: what the run reports, whatever the handler changed. */
  static eventOf(message: DeliveredMessage): ClaimedEvent {
    return message.#event;
  }

  /** The abort of the one handler call the message is for (see `HandlerInvoker`). */
  static abortOf(message: DeliveredMessage): LazyAbort {
    return message.#abort;
  }

  /** The token of the claim the message was delivered under. */
  static tokenOf(message: DeliveredMessage): string {
    return message.#token;
  }

  /** The handler's call runs in the transaction of `manager` (see `transactionalTarget`). */
  static joined(message: DeliveredMessage, manager: EntityManager): void {
    message.#manager = manager;
  }

  constructor(
    event: ClaimedEvent,
    abort: LazyAbort,
    /** A handler after the first gets copies, so one cannot change what the next one sees. */
    copy: boolean,
    token: string,
  ) {
    this.id = event.id;
    this.topic = event.topic;
    this.key = event.key;
    this.payload = copy ? structuredClone(event.payload) : event.payload;
    this.headers = copy ? { ...event.headers } : event.headers;
    this.attempt = event.attempts;
    this.createdAt = event.createdAt;
    this.#event = event;
    this.#abort = abort;
    this.#token = token;
  }

  get manager(): EntityManager | undefined {
    return this.#manager;
  }

  get signal(): AbortSignal {
    return this.#abort.signal;
  }
}
