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

/** PostgreSQL's DDL of every schema version, as released, and the catalogue reads of the start-up checks. */
export const postgresSchema: SchemaStatements = {
  tableExists(table: OutboxTable): Statement {
    // Unqualified, the name resolves through the search_path exactly as the outbox's statements do.
    return { sql: 'SELECT to_regclass($1) IS NOT NULL AS "found"', params: [quoteTable(table)] };
  },

  relocate(from: OutboxTable, to: OutboxTable): string[] {
    const steps: string[] = [];
    let at = from;
    if (to.schema && to.schema !== from.schema) {
      steps.push(`ALTER TABLE ${quoteTable(at)} SET SCHEMA ${quoteIdent(to.schema)}`);
      at = { ...at, schema: to.schema };
    }
    if (to.name !== at.name) steps.push(`ALTER TABLE ${quoteTable(at)} RENAME TO ${quoteIdent(to.name)}`);
    return steps;
  },

  createSchema(table: OutboxTable): string[] {
    const t = quoteTable(table);
    return [
      `CREATE TABLE ${t} (
        "id" uuid NOT NULL PRIMARY KEY,
        "topic" varchar(128) NOT NULL,
        "key" varchar(255),
        "dedupe_key" varchar(255),
        "payload" jsonb NOT NULL,
        "headers" jsonb NOT NULL DEFAULT '{}'::jsonb,
        "status" varchar(16) NOT NULL DEFAULT 'pending' CHECK ("status" IN ('pending', 'delivered', 'dead')),
        "attempts" integer NOT NULL DEFAULT 0,
        "available_at" timestamptz NOT NULL DEFAULT now(),
        "claim_token" uuid,
        "completed_handlers" jsonb NOT NULL DEFAULT '[]'::jsonb,
        "last_error" text,
        "created_at" timestamptz NOT NULL DEFAULT now(),
        "processed_at" timestamptz
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
    return {
      sql: 'SELECT a.attname AS "name", NULL AS "charset" FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped',
      params: [quoteTable(table)],
    };
  },

  indexes(table: OutboxTable): Statement {
    return {
      // An index a failed CREATE INDEX CONCURRENTLY left behind is invalid: it does not count.
      sql:
        'SELECT c.relname AS "name" FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid ' +
        'WHERE i.indrelid = to_regclass($1) AND i.indisvalid',
      params: [quoteTable(table)],
    };
  },
};

/** Version 2: attempt state as data; the claim's remarks move out of `last_error` into `note`. */
function attemptState(table: OutboxTable): { up: string[]; down: string[] } {
  const t = quoteTable(table);
  const [expired] = V1_CLAIM_NOTES;
  return {
    up: [
      `ALTER TABLE ${t} ADD COLUMN "expired_attempts" integer NOT NULL DEFAULT 0, ` +
        `ADD COLUMN "last_expired_attempt" integer, ADD COLUMN "note" text`,
      // The claim's remarks move out of last_error, and an expiry noted there becomes data.
      `UPDATE ${t} SET "note" = "last_error", "last_error" = NULL, "expired_attempts" = 1, ` +
        `"last_expired_attempt" = substring("last_error" from '^attempt ([0-9]+) of')::int WHERE "last_error" LIKE '${expired}'`,
      moveNoOutcomeNotes(t, quoteIdent),
    ],
    down: [
      restoreV1Notes(t, quoteIdent),
      `ALTER TABLE ${t} DROP COLUMN "note", DROP COLUMN "last_expired_attempt", DROP COLUMN "expired_attempts"`,
    ],
  };
}

/** Version 4: when the current attempt started, the history of attempts, and how often the event was redriven. */
function attemptHistoryColumns(table: OutboxTable): { up: string[]; down: string[] } {
  const t = quoteTable(table);
  return {
    up: [
      `ALTER TABLE ${t} ADD COLUMN "claimed_at" timestamptz, ADD COLUMN "attempt_log" jsonb, ` +
        `ADD COLUMN "redrive_count" integer NOT NULL DEFAULT 0`,
    ],
    down: [`ALTER TABLE ${t} DROP COLUMN "redrive_count", DROP COLUMN "attempt_log", DROP COLUMN "claimed_at"`],
  };
}
