import type { OutboxTable } from '../shared/outbox-table';

/** The database clock, in UTC: every stored time is a UTC DATETIME(6). */
export const NOW = 'UTC_TIMESTAMP(6)';

export function q(name: string): string {
  return `\`${name.replace(/`/g, '``')}\``;
}

/** The table in the connection's database: TypeORM's `schema` option is PostgreSQL's alone. */
export const qt = (table: OutboxTable) => q(table.name);

/** A JavaScript Date as a DATETIME(6) literal in UTC. */
export function utcDatetime(date: Date): string {
  return date.toISOString().replace('T', ' ').replace('Z', '');
}

/**
 * A DATETIME(6) expression as UTC ISO-8601 text: times leave the server this way, so neither mysql2's
 * `timezone` nor the session's matters.
 */
export const utcText = (expression: string) => `DATE_FORMAT(${expression}, '%Y-%m-%dT%H:%i:%s.%fZ')`;
const utc = (column: string) => `${utcText(q(column))} AS ${q(column)}`;
export const COLUMNS = [
  '`id`',
  '`topic`',
  '`key`',
  '`dedupe_key`',
  '`payload`',
  '`headers`',
  '`status`',
  '`attempts`',
  utc('available_at'),
  '`claim_token`',
  '`completed_handlers`',
  '`last_error`',
  '`expired_attempts`',
  '`last_expired_attempt`',
  '`note`',
  utc('created_at'),
  utc('processed_at'),
  utc('claimed_at'),
  '`attempt_log`',
  '`redrive_count`',
].join(', ');
