import { quoteIdent, quoteTable } from '../shared/dialect.util';
import { deleteFirstByKey, inboxReceivedIndex, inboxStatements } from '../shared/inbox-sql';
import { postgresFlavor } from './postgres-flavor';

export const postgresInbox = inboxStatements(postgresFlavor, {
  create: (table) => [
    `CREATE TABLE ${quoteTable(table)} (
      "consumer" varchar(100) NOT NULL,
      "message_id" uuid NOT NULL,
      "received_at" timestamptz NOT NULL,
      PRIMARY KEY ("consumer", "message_id")
    )`,
    `CREATE INDEX ${quoteIdent(inboxReceivedIndex(table))} ON ${quoteTable(table)} ("received_at")`,
  ],
  insertUnlessPresent: (table, columns, values) =>
    `INSERT INTO ${table} (${columns}) VALUES (${values}) ON CONFLICT DO NOTHING`,
  deleteFirst: deleteFirstByKey(postgresFlavor),
});
