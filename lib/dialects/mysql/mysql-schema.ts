import type { SchemaStatements, Statement } from '../shared/outbox-dialect.interface';
import {
  indexNames,
  moveNoOutcomeNotes,
  NO_CHANGE,
  restoreV1Notes,
  schemaSteps,
  V1_CLAIM_NOTES,
} from '../shared/dialect.util';
import { keysTableOf, type OutboxTable } from '../shared/outbox-table';
import { attemptHistoryColumns } from './mysql-history';
import { retentionIndex } from './mysql-retention';
import { q, qt } from './mysql-sql';

/**
 * MySQL's and MariaDB's DDL of every schema version, as released, and the catalogue reads of the
 * start-up checks (the index list is `indexesOf`, beside the retention index it finds).
 */
export const mysqlSchema: Omit<SchemaStatements, 'indexes'> = {
  tableExists(table: OutboxTable): Statement {
    return {
      sql: 'SELECT COUNT(*) AS `found` FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?',
      params: [table.name],
    };
  },

  relocate(from: OutboxTable, to: OutboxTable): string[] {
    return [`RENAME TABLE ${qt(from)} TO ${qt(to)}`];
  },

  createSchema(table: OutboxTable): string[] {
    const idx = indexNames(table.name);
    return [
      `CREATE TABLE ${qt(table)} (
        \`id\` char(36) NOT NULL,
        \`topic\` varchar(128) NOT NULL,
        \`key\` varchar(255) NULL,
        \`dedupe_key\` varchar(255) NULL,
        \`payload\` longtext NOT NULL CHECK (JSON_VALID(\`payload\`)),
        \`headers\` text NOT NULL,
        \`status\` varchar(16) NOT NULL DEFAULT 'pending' CHECK (\`status\` IN ('pending', 'delivered', 'dead')),
        \`attempts\` int NOT NULL DEFAULT 0,
        \`available_at\` datetime(6) NOT NULL,
        \`claim_token\` char(36) NULL,
        \`completed_handlers\` text NOT NULL,
        \`last_error\` text NULL,
        \`created_at\` datetime(6) NOT NULL,
        \`processed_at\` datetime(6) NULL,
        PRIMARY KEY (\`id\`),
        UNIQUE KEY ${q(idx.dedupe)} (\`dedupe_key\`),
        KEY ${q(idx.claim)} (\`status\`, \`available_at\`, \`id\`)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    ];
  },

  dropSchema(table: OutboxTable): string[] {
    return [`DROP TABLE ${qt(table)}`];
  },

  ...schemaSteps({
    2: attemptState,
    3: retentionIndex,
    4: attemptHistoryColumns,
    5: asciiKeys,
    6: exactKeys,
    7: keyOrder,
    8: traceContext,
    // Version 9 guards "only a key's front is pending" by a partial unique index, which MySQL and MariaDB
    // do not have. A unique index on a generated column (the key while pending and numbered, else NULL)
    // would do it, and was judged not worth it: every event would carry one more index entry, and
    // InnoDB's duplicate check takes gap locks even at READ COMMITTED, in the acknowledgement's and the
    // publisher's statements whose locks this dialect already forces to keep them from deadlocking. The
    // writes that keep the rule are the same SQL on every database, guarded on PostgreSQL and SQLite.
    9: NO_CHANGE,
  }),

  columns(table: OutboxTable): Statement {
    return {
      sql:
        // NO PAD collations: MariaDB names them `…_nopad_…`; MySQL 8's `…_0900_…` collations all are.
        'SELECT column_name AS `name`, character_set_name AS `charset`, ' +
        "collation_name REGEXP 'nopad|_0900_' AS `no_pad` FROM information_schema.columns " +
        'WHERE table_schema = DATABASE() AND table_name = ?',
      params: [table.name],
    };
  },
};

/** Version 2: attempt state as data; the claim's remarks move out of `last_error` into `note`. */
function attemptState(table: OutboxTable): { up: string[]; down: string[] } {
  const t = qt(table);
  const [expired] = V1_CLAIM_NOTES;
  return {
    up: [
      `ALTER TABLE ${t} ADD COLUMN \`expired_attempts\` int NOT NULL DEFAULT 0, ` +
        'ADD COLUMN `last_expired_attempt` int NULL, ADD COLUMN `note` text NULL',
      // The claim's remarks move out of last_error (assignments run left to right, each seeing the last).
      `UPDATE ${t} SET \`note\` = \`last_error\`, \`expired_attempts\` = 1, ` +
        "`last_expired_attempt` = CAST(SUBSTRING_INDEX(SUBSTRING(`last_error`, 9), ' ', 1) AS UNSIGNED), " +
        `\`last_error\` = NULL WHERE \`last_error\` LIKE '${expired}'`,
      moveNoOutcomeNotes(t, q),
    ],
    down: [
      restoreV1Notes(t, q),
      `ALTER TABLE ${t} DROP COLUMN \`note\`, DROP COLUMN \`last_expired_attempt\`, DROP COLUMN \`expired_attempts\``,
    ],
  };
}

/**
 * Version 5: the id and the claim token, UUIDs, in ASCII with byte comparison instead of utf8mb4 text
 * (the table's default, which the user columns keep). Every claim and acknowledgement looks up its rows
 * by id and checks the token: on MariaDB 10.11 the claim's update and the acknowledgement cost a
 * quarter to a third less per event. A change of the primary key's character set rebuilds the table
 * (ALGORITHM=COPY): writes wait while it runs.
 */
function asciiKeys(table: OutboxTable): { up: string[]; down: string[] } {
  const keys = (charset: string) =>
    `ALTER TABLE ${qt(table)} MODIFY \`id\` char(36) CHARACTER SET ${charset} COLLATE ${charset}_bin NOT NULL, ` +
    `MODIFY \`claim_token\` char(36) CHARACTER SET ${charset} COLLATE ${charset}_bin NULL`;
  return { up: [keys('ascii')], down: [keys('utf8mb4')] };
}

/**
 * Version 6: `key` and `dedupe_key` in a NO PAD binary collation. `utf8mb4_bin` pads: it takes
 * 'order-1' and 'order-1 ' for one value, so the unique index refused the second dedupe key and a
 * filter on one key found the other. MariaDB and MySQL name their NO PAD binary collation differently
 * (MySQL's needs 8.0.17), so the statement is chosen by the server it runs on. The columns stay text:
 * a worker of the previous version reads them as before during a rolling upgrade. Going back fails
 * while two dedupe keys differ only by trailing spaces (the padded unique index cannot hold both).
 */
const SERVER_COLLATION = '\u0000';

function exactKeys(table: OutboxTable): { up: string[]; down: string[] } {
  const keys = (collation: string) =>
    `ALTER TABLE ${qt(table)} MODIFY \`key\` varchar(255) CHARACTER SET utf8mb4 COLLATE ${collation} NULL, ` +
    `MODIFY \`dedupe_key\` varchar(255) CHARACTER SET utf8mb4 COLLATE ${collation} NULL`;
  return { up: withServerCollation(keys(SERVER_COLLATION)), down: [keys('utf8mb4_bin')] };
}

/** A statement in SQL text, as a quoted literal for CONCAT. */
const literal = (text: string) => `'${text.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;

/** Runs `ddl` with the server's NO PAD binary collation spliced in where SERVER_COLLATION stands. */
function withServerCollation(ddl: string): string[] {
  const chosen = ddl.split(SERVER_COLLATION).map(literal).join(', @outbox_collation, ');
  return [
    "SET @outbox_collation = IF(VERSION() LIKE '%MariaDB%', 'utf8mb4_nopad_bin', 'utf8mb4_0900_bin')",
    `SET @outbox_ddl = CONCAT(${chosen})`,
    ...prepared,
  ];
}

const prepared = ['PREPARE outbox_ddl FROM @outbox_ddl', 'EXECUTE outbox_ddl', 'DEALLOCATE PREPARE outbox_ddl'];

/**
 * Version 7: per-key order. An event's place in its key (`seq`), the `waiting` status of an event
 * behind its key's front, an index on key, status and place (the order's lookups read the waiting
 * events of one key), and the keys' table (its key in the events' NO PAD collation, so both compare
 * keys alike): the last place handed out and the key's front. The status check version 1 declared on
 * the column is replaced by a named one: MariaDB drops it with the column's definition, MySQL has it as
 * a table's check named by the server, found by its text. Both copy the table for it (writes wait).
 */
function keyOrder(table: OutboxTable): { up: string[]; down: string[] } {
  const t = qt(table);
  const name = table.name.replace(/'/g, "''");
  const statuses = (list: string[]) => list.map((status) => `''${status}''`).join(', ');
  const replaceCheck = (list: string[]) => [
    // MariaDB keeps a check declared on a column with the column: redefining the column drops it.
    `ALTER TABLE ${t} MODIFY \`status\` varchar(16) NOT NULL DEFAULT 'pending'`,
    // MySQL keeps it as a table's check (named `<table>_chk_<n>`), as both keep a named one.
    'SET @outbox_check = (SELECT tc.CONSTRAINT_NAME FROM information_schema.TABLE_CONSTRAINTS tc ' +
      'JOIN information_schema.CHECK_CONSTRAINTS cc ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA ' +
      'AND cc.CONSTRAINT_NAME = tc.CONSTRAINT_NAME ' +
      `WHERE tc.TABLE_SCHEMA = DATABASE() AND tc.TABLE_NAME = '${name}' AND tc.CONSTRAINT_TYPE = 'CHECK' ` +
      "AND cc.CHECK_CLAUSE LIKE '%status%' AND cc.CHECK_CLAUSE LIKE '%pending%' LIMIT 1)",
    // MySQL drops a check with DROP CHECK (DROP CONSTRAINT only from 8.0.19), MariaDB with DROP CONSTRAINT.
    `SET @outbox_ddl = CONCAT('ALTER TABLE ${t.replace(/'/g, "''")} ', IF(@outbox_check IS NULL, '', ` +
      "CONCAT(IF(VERSION() LIKE '%MariaDB%', 'DROP CONSTRAINT ', 'DROP CHECK '), " +
      "'`', REPLACE(@outbox_check, '`', '``'), '`, ')), " +
      `'ADD CONSTRAINT ${q(`${table.name}_status`).replace(/'/g, "''")} CHECK (\`status\` IN (${statuses(list)}))')`,
    ...prepared,
  ];
  const keys = keysTableOf(table);
  return {
    up: [
      `ALTER TABLE ${t} ADD COLUMN \`seq\` bigint NULL, ADD KEY ${q(indexNames(table.name).order)} (\`key\`, \`status\`, \`seq\`)`,
      ...replaceCheck(['pending', 'waiting', 'delivered', 'dead']),
      ...withServerCollation(
        `CREATE TABLE ${qt(keys)} (
        \`key\` varchar(255) CHARACTER SET utf8mb4 COLLATE ${SERVER_COLLATION} NOT NULL,
        \`last_seq\` bigint NOT NULL,
        \`front_id\` char(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
        PRIMARY KEY (\`key\`)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
      ),
    ],
    down: [
      `DROP TABLE ${qt(keys)}`,
      // Events waiting behind their key are delivered by the previous version as any other.
      `UPDATE ${t} SET \`status\` = 'pending' WHERE \`status\` = 'waiting'`,
      ...replaceCheck(['pending', 'delivered', 'dead']),
      `ALTER TABLE ${t} DROP KEY ${q(indexNames(table.name).order)}, DROP COLUMN \`seq\``,
    ],
  };
}

/**
 * Version 8: the publisher's trace context (the propagators' fields, JSON), apart from the user's
 * headers. Nullable, so adding it rewrites nothing and the previous version's inserts, which do not
 * name it, leave it empty.
 */
function traceContext(table: OutboxTable): { up: string[]; down: string[] } {
  const t = qt(table);
  return {
    up: [`ALTER TABLE ${t} ADD COLUMN \`trace_context\` text NULL`],
    down: [`ALTER TABLE ${t} DROP COLUMN \`trace_context\``],
  };
}
