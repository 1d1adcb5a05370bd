/** The resolved options of `OutboxInboxModule`. */
export const OUTBOX_INBOX_OPTIONS = Symbol('OUTBOX_INBOX_OPTIONS');
/** The DataSource of the inbox table. */
export const OUTBOX_INBOX_DATA_SOURCE = Symbol('OUTBOX_INBOX_DATA_SOURCE');
/** The consumer and options `@OutboxInbox()` put on a method. */
export const OUTBOX_INBOX_METADATA = 'nestjs-typeorm-outbox:inbox';

/** A consumer's name: what the inbox keeps ids apart by. */
export const CONSUMER_NAME = /^[A-Za-z0-9._:-]{1,100}$/;
/** An outbox message id: a UUID (stored in lower case). */
export const MESSAGE_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
