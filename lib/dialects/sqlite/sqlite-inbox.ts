import { quoteIdent, quoteTable } from '../shared/dialect.util';
import { deleteFirstByKey, inboxReceivedIndex, inboxStatements } from '../shared/inbox-sql';
import { sqliteFlavor } from './sqlite-flavor';

export const sqliteInbox = inboxStatements(sqliteFlavor, {
  create: (table) => [
    `CREATE TABLE ${quoteTable(table)} (
      "consumer" varchar(100) NOT NULL,
      "message_id" varchar(36) NOT NULL,
      "received_at" varchar(24) NOT NULL,
      PRIMARY KEY ("consumer", "message_id")
    ) WITHOUT ROWID`,
    `CREATE INDEX ${quoteIdent(inboxReceivedIndex(table))} ON ${quoteTable(table)} ("received_at")`,
  ],
  // It must start with "INSERT ": TypeORM's sqlite3 runner reports affected rows only for statements that do.
  insertUnlessPresent: (table, columns, values) =>
    `INSERT INTO ${table} (${columns}) VALUES (${values}) ON CONFLICT DO NOTHING`,
  deleteFirst: deleteFirstByKey(sqliteFlavor),
});
