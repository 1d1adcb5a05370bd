import { quoteTable } from '../shared/dialect.util';
import { auditStatements } from '../shared/audit-sql';
import { sqliteFlavor } from './sqlite-flavor';

export const sqliteAudit = auditStatements(sqliteFlavor, (table) => [
  `CREATE TABLE ${quoteTable(table)} (
      "id" varchar(36) NOT NULL PRIMARY KEY,
      "started_at" varchar(24) NOT NULL,
      "finished_at" varchar(24),
      "actor" varchar(255),
      "action" varchar(32) NOT NULL,
      "selection" text NOT NULL,
      "options" text NOT NULL,
      "matched" integer,
      "changed" integer,
      "skipped" integer,
      "outcome" varchar(16) NOT NULL,
      "error" text
    ) WITHOUT ROWID`,
]);
