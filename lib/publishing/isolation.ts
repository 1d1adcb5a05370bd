import { OutboxConfigurationError } from '../errors/outbox.errors';
import type { OutboxIsolationLevel } from '../interfaces/outbox-message.interface';

const ISOLATION_LEVELS: readonly OutboxIsolationLevel[] = [
  'READ UNCOMMITTED',
  'READ COMMITTED',
  'REPEATABLE READ',
  'SERIALIZABLE',
];

/**
 * The isolation level the outbox's own transactions (a transactional handler's, an inbox's) set on the
 * database `dialect` names: `chosen` when given; else READ COMMITTED on MySQL and MariaDB (whose default
 * is REPEATABLE READ) and none on PostgreSQL (READ COMMITTED is its default: naming it again costs a
 * statement per transaction) and SQLite (serializable, and takes no level). `path` names the option in errors.
 */
export function isolationFor(dialect: string, path: string, chosen: unknown): OutboxIsolationLevel | undefined {
  if (chosen === undefined) return dialect === 'mysql' ? 'READ COMMITTED' : undefined;
  if (!ISOLATION_LEVELS.includes(chosen as OutboxIsolationLevel)) {
    throw new OutboxConfigurationError(path, `expected one of ${ISOLATION_LEVELS.join(', ')}`);
  }
  if (dialect !== 'sqlite') return chosen as OutboxIsolationLevel;
  if (chosen === 'SERIALIZABLE') return undefined;
  throw new OutboxConfigurationError(
    path,
    'SQLite transactions are serializable and take no other level: leave it out',
  );
}
