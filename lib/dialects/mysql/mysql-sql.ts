import type { OutboxTable } from '../shared/outbox-table';

/** The database clock, in UTC: every stored time is a UTC DATETIME(6). */
export const NOW = 'UTC_TIMESTAMP(6)';

export function q(name: string): string {
  return `\`${name.replace(/`/g, '``')}\``;
}

/** The table in the connection's database: TypeORM's `schema` option is PostgreSQL's alone. */
export const qt = (table: OutboxTable) => q(table.name);
