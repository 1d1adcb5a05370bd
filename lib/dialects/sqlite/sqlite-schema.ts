import type { SchemaStatements, Statement } from '../shared/outbox-dialect.interface';
import {
  moveNoOutcomeNotes,
  partialIndexes,
  partialRetentionIndex,
  quoteIdent,
  quoteTable,
  NO_CHANGE,
  restoreV1Notes,
  schemaSteps,
  V1_CLAIM_NOTES,
} from '../shared/dialect.util';
import type { OutboxTable } from '../shared/outbox-table';
import { NOW } from './sqlite-flavor';

/** SQLite's DDL of every schema version, as released, and the catalogue reads of the start-up checks. */
export const sqliteSchema: SchemaStatements = {
  tableExists(table: OutboxTable): Statement {
    return {
      sql: `SELECT count(*) AS "found" FROM sqlite_master WHERE "type" = 'table' AND "name" = ?`,
      params: [table.name],
    };
  },

  relocate(from: OutboxTable, to: OutboxTable): string[] {
    return [`ALTER TABLE ${quoteTable(from)} RENAME TO ${quoteIdent(to.name)}`];
  },

  createSchema(table: OutboxTable): string[] {
    const t = quoteTable(table);
    return [
      `CREATE TABLE ${t} (
        "id" varchar(36) NOT NULL PRIMARY KEY,
        "topic" varchar(128) NOT NULL,
        "key" varchar(255),
        "dedupe_key" varchar(255),
        "payload" text NOT NULL,
        "headers" text NOT NULL DEFAULT '{}',
        "status" varchar(16) NOT NULL DEFAULT 'pending' CHECK ("status" IN ('pending', 'delivered', 'dead')),
        "attempts" integer NOT NULL DEFAULT 0,
        "available_at" varchar(24) NOT NULL DEFAULT (${NOW}),
        "claim_token" varchar(36),
        "completed_handlers" text NOT NULL DEFAULT '[]',
        "last_error" text,
        "created_at" varchar(24) NOT NULL DEFAULT (${NOW}),
        "processed_at" varchar(24)
      )`,
      ...partialIndexes(t, table),
    ];
  },

  dropSchema(table: OutboxTable): string[] {
    return [`DROP TABLE ${quoteTable(table)}`];
  },

  // Versions 5 and 6 are MySQL's (ASCII keys, NO PAD keys): here ids and keys already compare exactly.
  ...schemaSteps({ 2: attemptState, 3: partialRetentionIndex, 4: attemptHistoryColumns, 5: NO_CHANGE, 6: NO_CHANGE }),

  columns(table: OutboxTable): Statement {
    return { sql: 'SELECT "name", NULL AS "charset" FROM pragma_table_info(?)', params: [table.name] };
  },

  indexes(table: OutboxTable): Statement {
    return { sql: 'SELECT "name" FROM pragma_index_list(?)', params: [table.name] };
  },
};

/** Version 2: attempt state as data; the claim's remarks move out of `last_error` into `note`. */
function attemptState(table: OutboxTable): { up: string[]; down: string[] } {
  const t = quoteTable(table);
  const [expired] = V1_CLAIM_NOTES;
  return {
    up: [
      `ALTER TABLE ${t} ADD COLUMN "expired_attempts" integer NOT NULL DEFAULT 0`,
      `ALTER TABLE ${t} ADD COLUMN "last_expired_attempt" integer`,
      `ALTER TABLE ${t} ADD COLUMN "note" text`,
      // The claim's remarks move out of last_error, and an expiry noted there becomes data.
      `UPDATE ${t} SET "note" = "last_error", "last_error" = NULL, "expired_attempts" = 1, ` +
        `"last_expired_attempt" = CAST(substr("last_error", 9, instr(substr("last_error", 9), ' ') - 1) AS INTEGER) ` +
        `WHERE "last_error" LIKE '${expired}'`,
      moveNoOutcomeNotes(t, quoteIdent),
    ],
    down: [
      restoreV1Notes(t, quoteIdent),
      `ALTER TABLE ${t} DROP COLUMN "note"`,
      `ALTER TABLE ${t} DROP COLUMN "last_expired_attempt"`,
      `ALTER TABLE ${t} DROP COLUMN "expired_attempts"`,
    ],
  };
}

/** Version 4: when the current attempt started, the history of attempts, and how often the event was redriven. */
function attemptHistoryColumns(table: OutboxTable): { up: string[]; down: string[] } {
  const t = quoteTable(table);
  return {
    up: [
      `ALTER TABLE ${t} ADD COLUMN "claimed_at" varchar(24)`,
      `ALTER TABLE ${t} ADD COLUMN "attempt_log" text`,
      `ALTER TABLE ${t} ADD COLUMN "redrive_count" integer NOT NULL DEFAULT 0`,
    ],
    down: ['redrive_count', 'attempt_log', 'claimed_at'].map((c) => `ALTER TABLE ${t} DROP COLUMN ${quoteIdent(c)}`),
  };
}
