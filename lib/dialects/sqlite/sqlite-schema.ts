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

/** The table's columns at version 6, in their order, with `status` checked against `statuses`. */
function version6Columns(statuses: string[]): string[] {
  return [
    '"id" varchar(36) NOT NULL PRIMARY KEY',
    '"topic" varchar(128) NOT NULL',
    '"key" varchar(255)',
    '"dedupe_key" varchar(255)',
    '"payload" text NOT NULL',
    `"headers" text NOT NULL DEFAULT '{}'`,
    `"status" varchar(16) NOT NULL DEFAULT 'pending' CHECK ("status" IN (${statuses.map((s) => `'${s}'`).join(', ')}))`,
    '"attempts" integer NOT NULL DEFAULT 0',
    `"available_at" varchar(24) NOT NULL DEFAULT (${NOW})`,
    '"claim_token" varchar(36)',
    `"completed_handlers" text NOT NULL DEFAULT '[]'`,
    '"last_error" text',
    `"created_at" varchar(24) NOT NULL DEFAULT (${NOW})`,
    '"processed_at" varchar(24)',
    '"expired_attempts" integer NOT NULL DEFAULT 0',
    '"last_expired_attempt" integer',
    '"note" text',
    '"claimed_at" varchar(24)',
    '"attempt_log" text',
    '"redrive_count" integer NOT NULL DEFAULT 0',
  ];
}

const VERSION_6_NAMES = version6Columns([]).map((column) => column.slice(0, column.indexOf('"', 1) + 1));

/**
 * SQLite cannot change a column's check: the table is built again beside the old one with `columns`,
 * the rows copied (by name), the old table dropped and the new one given its name, and its indexes
 * (versions 1 and 3, and `more`) made again.
 */
function rebuilt(table: OutboxTable, columns: string[], more: string[]): string[] {
  const t = quoteTable(table);
  const next = quoteIdent(`${table.name}_next`);
  const copied = VERSION_6_NAMES.join(', ');
  return [
    `CREATE TABLE ${next} (\n        ${columns.join(',\n        ')}\n      )`,
    `INSERT INTO ${next} (${copied}) SELECT ${copied} FROM ${t}`,
    `DROP TABLE ${t}`,
    `ALTER TABLE ${next} RENAME TO ${quoteIdent(table.name)}`,
    ...partialIndexes(t, table),
    ...partialRetentionIndex(table).up,
    ...more,
  ];
}

/**
 * Version 7: per-key order. An event's place in its key (`seq`), the `waiting` status of an event
 * behind its key's front (the table is built again for the new check), waiting events by key and
 * place (the only rows the order's lookups read), and the keys' table: the last place handed out and
 * the key's front.
 */
function keyOrder(table: OutboxTable): { up: string[]; down: string[] } {
  const t = quoteTable(table);
  const keys = quoteTable(keysTableOf(table));
  return {
    up: [
      ...rebuilt(
        table,
        [...version6Columns(['pending', 'waiting', 'delivered', 'dead']), '"seq" integer'],
        [`CREATE INDEX ${quoteIdent(indexNames(table.name).order)} ON ${t} ("key", "seq") WHERE "status" = 'waiting'`],
      ),
      `CREATE TABLE ${keys} (
        "key" varchar(255) NOT NULL PRIMARY KEY,
        "last_seq" integer NOT NULL,
        "front_id" varchar(36)
      )`,
    ],
    down: [
      `DROP TABLE ${keys}`,
      // Events waiting behind their key are delivered by the previous version as any other.
      `UPDATE ${t} SET "status" = 'pending' WHERE "status" = 'waiting'`,
      ...rebuilt(table, version6Columns(['pending', 'delivered', 'dead']), []),
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
    up: [`ALTER TABLE ${t} ADD COLUMN "trace_context" text`],
    down: [`ALTER TABLE ${t} DROP COLUMN "trace_context"`],
  };
}
