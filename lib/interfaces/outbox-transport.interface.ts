import type { OutboxMessage } from './outbox-message.interface';

/**
 * Delivers a message somewhere outside the process (a broker, a webhook). Resolving means the
 * destination accepted the message; rejecting means "retry later"; rejecting with
 * `OutboxNonRetryableError` dead-letters it.
 */
export interface OutboxTransport {
  readonly name: string;
  send(message: OutboxMessage): Promise<void>;
  /** Optional batch delivery; the default is `send()` for each message. */
  sendMany?(messages: OutboxMessage[]): Promise<PromiseSettledResult<void>[]>;
  onApplicationBootstrap?(): Promise<void> | void;
  beforeApplicationShutdown?(): Promise<void> | void;
}
