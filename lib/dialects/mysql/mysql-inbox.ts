import { inboxReceivedIndex, inboxStatements } from '../shared/inbox-sql';
import { mysqlFlavor } from './mysql-flavor';
import { q, qt } from './mysql-sql';

export const mysqlInbox = inboxStatements(mysqlFlavor, {
  // Consumer names and ids are ASCII by their validation: compared as bytes, as the outbox's ids are.
  create: (table) => [
    `CREATE TABLE ${qt(table)} (
      \`consumer\` varchar(100) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
      \`message_id\` char(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
      \`received_at\` datetime(6) NOT NULL,
      PRIMARY KEY (\`consumer\`, \`message_id\`),
      KEY ${q(inboxReceivedIndex(table))} (\`received_at\`)
    ) ENGINE=InnoDB`,
  ],
  // IGNORE only passes over the duplicate here: the values are checked before they reach the statement.
  insertUnlessPresent: (table, columns, values) => `INSERT IGNORE INTO ${table} (${columns}) VALUES (${values})`,
  deleteFirst: (table, where, order, limit) =>
    `DELETE FROM ${qt(table)} WHERE ${where} ORDER BY ${order} LIMIT ${limit}`,
});
