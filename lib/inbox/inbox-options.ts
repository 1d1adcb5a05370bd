import type { DataSource } from 'typeorm';
import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { OutboxIsolationLevel } from '../interfaces/outbox-message.interface';
import { DEFAULT_INBOX_TABLE_NAME } from '../schema/inbox-migrations';
import { validateTableName } from '../schema/table-name';
import { WEBHOOK_DEFAULT_SIGNATURE_HEADER } from '../transports/webhook/webhook-options';
import { describeValue } from '../utils/describe-value';
import { integerOption, isPlainObject, optionSection, rejectUnknownOptions } from '../utils/option-checks';

const DAY_MS = 86_400_000;

/** The options of `OutboxInboxModule.forRoot()` (and what `forRootAsync`'s factory returns). */
export interface OutboxInboxModuleOptions {
  /**
   * The DataSource of the inbox table — the one the receiving handlers write with, so their writes and
   * the received id commit together — or the name it was registered under. Default: the default DataSource.
   */
  dataSource?: DataSource | string;
  /** Default `outbox_inbox`. Its migrations: `createOutboxInboxMigrations(tableName)`. */
  tableName?: string;
  /** The `connectionName` of the nestjs-cls transactional plugin registered for that DataSource, when not the default. */
  transactionConnectionName?: string;
  /**
   * The isolation level of the inbox's transactions. Default: READ COMMITTED on MySQL/MariaDB, the
   * database's default (READ COMMITTED) on PostgreSQL, none on SQLite (serializable).
   */
  isolation?: OutboxIsolationLevel;
  /**
   * How long a received id is remembered, in ms: a copy of a message that arrives later is processed
   * again. Keep it longer than the sender's retries and the broker's redeliveries can take. Default 7
   * days; `false` keeps every id.
   */
  retentionMs?: number | false;
  /** How often retention deletes ids older than `retentionMs` (1,000 rows a statement). Default 60,000. */
  retentionIntervalMs?: number;
  /**
   * Webhooks received by `@OutboxInbox()` routes: the `WebhookTransport`'s secret (or several, while it is
   * rotated), the header it signs in, and how far its timestamp may be from now. A route with no secret
   * configured refuses requests unless its decorator says `{ signature: false }`.
   */
  webhook?: { secret: string | readonly string[]; signatureHeader?: string; toleranceSeconds?: number };
}

export interface ResolvedInboxOptions {
  tableName: string;
  transactionConnectionName?: string;
  /** As given: checked against the database at start-up (see `isolationFor`). */
  isolation?: unknown;
  retentionMs: number | false;
  retentionIntervalMs: number;
  webhook?: { secrets: readonly string[]; signatureHeader: string; toleranceSeconds: number };
}

const OPTION_KEYS = [
  'dataSource',
  'tableName',
  'transactionConnectionName',
  'isolation',
  'retentionMs',
  'retentionIntervalMs',
  'webhook',
];

/** Checks the inbox's options; the isolation level is checked against the database once it is known. */
export function resolveInboxOptions(options: OutboxInboxModuleOptions | undefined): ResolvedInboxOptions {
  const given = options ?? {};
  if (!isPlainObject(given)) {
    throw new OutboxConfigurationError('inbox', `expected an options object, got ${describeValue(given)}`);
  }
  rejectUnknownOptions('inbox', given, OPTION_KEYS);
  const connection = given.transactionConnectionName;
  if (connection !== undefined && typeof connection !== 'string') {
    throw new OutboxConfigurationError(
      'inbox.transactionConnectionName',
      `expected a string, got ${describeValue(connection)}`,
    );
  }
  return {
    tableName: validateTableName(given.tableName ?? DEFAULT_INBOX_TABLE_NAME, 'inbox.tableName'),
    transactionConnectionName: connection,
    isolation: given.isolation,
    retentionMs:
      given.retentionMs === false
        ? false
        : integerOption('inbox.retentionMs', given.retentionMs, 7 * DAY_MS, 1_000, 3_650 * DAY_MS),
    retentionIntervalMs: integerOption('inbox.retentionIntervalMs', given.retentionIntervalMs, 60_000, 100, DAY_MS),
    webhook: given.webhook === undefined ? undefined : webhookOptions(given.webhook),
  };
}

function webhookOptions(value: unknown): NonNullable<ResolvedInboxOptions['webhook']> {
  const section = optionSection('inbox.webhook', value, ['secret', 'signatureHeader', 'toleranceSeconds']);
  const secrets = typeof section.secret === 'string' ? [section.secret] : section.secret;
  if (
    !Array.isArray(secrets) ||
    secrets.length === 0 ||
    secrets.some((secret) => typeof secret !== 'string' || secret.length === 0)
  ) {
    throw new OutboxConfigurationError(
      'inbox.webhook.secret',
      "expected the webhook transport's secret: a non-empty string, or a non-empty array of them while it is rotated",
    );
  }
  const header = section.signatureHeader ?? WEBHOOK_DEFAULT_SIGNATURE_HEADER;
  if (typeof header !== 'string' || !/^[A-Za-z0-9-]{1,100}$/.test(header)) {
    throw new OutboxConfigurationError(
      'inbox.webhook.signatureHeader',
      `expected a header name, got ${describeValue(header)}`,
    );
  }
  return {
    secrets: secrets as string[],
    signatureHeader: header.toLowerCase(),
    toleranceSeconds: integerOption('inbox.webhook.toleranceSeconds', section.toleranceSeconds, 300, 1, 86_400),
  };
}
