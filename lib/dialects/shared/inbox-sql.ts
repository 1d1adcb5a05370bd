import type { InboxStatements, SqlFlavor, Statement } from './outbox-dialect.interface';
import type { OutboxTable } from './outbox-table';
import { StatementBuilder } from './statement-builder';

/** The inbox's index on when pairs were received, read by its retention. */
export const inboxReceivedIndex = (table: OutboxTable) => `${table.name}_received_idx`;

/** How one database writes what differs in the inbox's statements. */
export interface InboxSqlParts {
  create: (table: OutboxTable) => string[];
  /** An insert of `columns` and `values` that leaves an existing pair as it is, reporting 0 rows. */
  insertUnlessPresent: (table: string, columns: string, values: string) => string;
  /** A delete of the first `limit` rows matching `where` in `order`. */
  deleteFirst: (table: OutboxTable, where: string, order: string, limit: string) => string;
}

/** The inbox's statements on a database: its flavor of SQL and what it writes its own way. */
export function inboxStatements(f: SqlFlavor, parts: InboxSqlParts): InboxStatements {
  const c = f.ident;
  return {
    create: parts.create,
    drop: (table) => [`DROP TABLE ${f.table(table)}`],
    receive(table, consumer, messageId): Statement {
      const b = new StatementBuilder(f.placeholder);
      const p = b.named({ consumer, messageId });
      return b.statement(
        parts.insertUnlessPresent(
          f.table(table),
          `${c('consumer')}, ${c('message_id')}, ${c('received_at')}`,
          `${p.consumer}, ${p.messageId}, ${f.now}`,
        ),
      );
    },
    purge(table, keepMs, limit): Statement {
      const b = new StatementBuilder(f.placeholder);
      const where = `${c('received_at')} < ${f.ago(b.bind, keepMs)}`;
      return b.statement(parts.deleteFirst(table, where, c('received_at'), f.integer(b.bind(limit))));
    },
  };
}

/**
 * A delete of the first rows by a subquery on the primary key, where DELETE takes no LIMIT (PostgreSQL,
 * SQLite as usually built).
 */
export const deleteFirstByKey = (f: SqlFlavor) => (table: OutboxTable, where: string, order: string, limit: string) => {
  const key = `${f.ident('consumer')}, ${f.ident('message_id')}`;
  return (
    `DELETE FROM ${f.table(table)} WHERE (${key}) IN ` +
    `(SELECT ${key} FROM ${f.table(table)} WHERE ${where} ORDER BY ${order} LIMIT ${limit})`
  );
};
