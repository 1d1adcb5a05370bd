import { OUTBOX_COLUMNS, type OutboxColumn } from '../shared/outbox-columns';
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
/** A column as a SELECT reads it: a time as UTC text (see `utcText`). */
export const selected = ({ name, kind }: OutboxColumn) =>
  kind === 'time' ? `${utcText(q(name))} AS ${q(name)}` : q(name);

/** Every column, as `decode` reads them. */
export const COLUMNS = OUTBOX_COLUMNS.map(selected).join(', ');
