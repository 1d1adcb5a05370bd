/** Options of `@OutboxInbox()`. */
export interface OutboxInboxOptions {
  /**
   * RabbitMQ consumers with `noAck: false`: the inbox acknowledges the message once its transaction has
   * committed, or at once for a duplicate; a failure hands it back to be delivered again (`nack`, requeued),
   * a message without a usable id to the queue's dead-letter exchange (`nack`, not requeued). Leave it off
   * with `noAck: true` (the default of Nest's RabbitMQ server), where there is nothing to acknowledge.
   */
  acknowledge?: boolean;
  /**
   * HTTP routes: verify the `WebhookTransport`'s signature with the module's `webhook` options before
   * anything is written (401 when it does not match). Default true; false when something else verifies
   * the requests.
   */
  signature?: boolean;
}

/** What `@OutboxInbox()` records on a method or controller. */
export interface OutboxInboxMetadata extends OutboxInboxOptions {
  consumer: string;
}
