import type { SchemaStatements, Statement } from '../shared/outbox-dialect.interface';
import {
  moveNoOutcomeNotes,
  indexNames,
  partialIndexes,
  partialFrontIndex,
  partialRetentionIndex,
  quoteIdent,
  quoteTable,
  NO_CHANGE,
  restoreV1Notes,
  schemaSteps,
  V1_CLAIM_NOTES,
} from '../shared/dialect.util';
import { keysTableOf, type OutboxTable } from '../shared/outbox-table';

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
  ...schemaSteps({
    2: attemptState,
    3: partialRetentionIndex,
    4: attemptHistoryColumns,
    5: NO_CHANGE,
    6: NO_CHANGE,
    7: keyOrder,
    8: traceContext,
    9: partialFrontIndex,
  }),

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

/**
 * Version 7: per-key order. An event's place in its key (`seq`), the `waiting` status of an event
 * behind its key's front, waiting events by key and place (the only rows the order's lookups read),
 * and the keys' table: the last place handed out and the key's front. The status check PostgreSQL
 * named when version 1 declared it on the column is replaced by a named one, added NOT VALID and
 * validated apart, so that no write waits for the scan.
 */
function keyOrder(table: OutboxTable): { up: string[]; down: string[] } {
  const t = quoteTable(table);
  const check = quoteIdent(`${table.name}_status_check`);
  const statuses = (list: string[]) => list.map((status) => `'${status}'`).join(', ');
  const replaceCheck = (list: string[]) => [
    // Whatever the check on "status" is called, it goes: the released one is named by PostgreSQL.
    `DO $$ DECLARE c text; BEGIN FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = '${t}'::regclass ` +
      `AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%status%' LOOP ` +
      `EXECUTE format('ALTER TABLE ${t} DROP CONSTRAINT %I', c); END LOOP; END $$`,
    `ALTER TABLE ${t} ADD CONSTRAINT ${check} CHECK ("status" IN (${statuses(list)})) NOT VALID`,
    `ALTER TABLE ${t} VALIDATE CONSTRAINT ${check}`,
  ];
  const order = quoteIdent(indexNames(table.name).order);
  return {
    up: [
      `ALTER TABLE ${t} ADD COLUMN "seq" bigint`,
      ...replaceCheck(['pending', 'waiting', 'delivered', 'dead']),
      `CREATE INDEX IF NOT EXISTS ${order} ON ${t} ("key", "seq") WHERE "status" = 'waiting'`,
      `CREATE TABLE ${quoteTable(keysTableOf(table))} (
        "key" varchar(255) NOT NULL PRIMARY KEY,
        "last_seq" bigint NOT NULL,
        "front_id" uuid
      )`,
    ],
    down: [
      `DROP TABLE ${quoteTable(keysTableOf(table))}`,
      `DROP INDEX ${quoteTable({ ...table, name: indexNames(table.name).order })}`,
      // Events waiting behind their key are delivered by the previous version as any other.
      `UPDATE ${t} SET "status" = 'pending' WHERE "status" = 'waiting'`,
      ...replaceCheck(['pending', 'delivered', 'dead']),
      `ALTER TABLE ${t} DROP COLUMN "seq"`,
    ],
  };
}

/**
 * Version 8: the publisher's trace context (the propagators' fields, JSON), apart from the user's
 * headers. Nullable, so adding it rewrites nothing and the previous version's inserts, which do not
 * name it, leave it empty.
 */
function traceContext(table: OutboxTable): { up: string[]; down: string[] } {
  const t = quoteTable(table);
  return {
    up: [`ALTER TABLE ${t} ADD COLUMN "trace_context" jsonb`],
    down: [`ALTER TABLE ${t} DROP COLUMN "trace_context"`],
  };
}
