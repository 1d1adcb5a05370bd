import { quoteTable } from '../shared/dialect.util';
import { auditStatements } from '../shared/audit-sql';
import { postgresFlavor } from './postgres-flavor';

export const postgresAudit = auditStatements(postgresFlavor, (table) => [
  `CREATE TABLE ${quoteTable(table)} (
      "id" uuid PRIMARY KEY,
      "started_at" timestamptz NOT NULL,
      "finished_at" timestamptz,
      "actor" varchar(255),
      "action" varchar(32) NOT NULL,
      "selection" text NOT NULL,
      "options" text NOT NULL,
      "matched" integer,
      "changed" integer,
      "skipped" integer,
      "outcome" varchar(16) NOT NULL,
      "error" text
    )`,
]);
