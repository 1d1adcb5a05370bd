import type { SchemaStatements, Statement } from '../shared/outbox-dialect.interface';
import { indexNames, moveNoOutcomeNotes, requireSchemaVersion, restoreV1Notes, V1_CLAIM_NOTES } from '../shared/dialect.util';
import type { OutboxTable } from '../shared/outbox-table';
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

  upgrade(version: number, table: OutboxTable): string[] {
    if (version === 3) return retentionIndex(table).up;
    if (version === 4) return attemptHistoryColumns(table).up;
    const t = qt(table);
    requireSchemaVersion(version);
    const [expired] = V1_CLAIM_NOTES;
    return [
      `ALTER TABLE ${t} ADD COLUMN \`expired_attempts\` int NOT NULL DEFAULT 0, ` +
        'ADD COLUMN `last_expired_attempt` int NULL, ADD COLUMN `note` text NULL',
      // The claim's remarks move out of last_error (assignments run left to right, each seeing the last).
      `UPDATE ${t} SET \`note\` = \`last_error\`, \`expired_attempts\` = 1, ` +
        "`last_expired_attempt` = CAST(SUBSTRING_INDEX(SUBSTRING(`last_error`, 9), ' ', 1) AS UNSIGNED), " +
        `\`last_error\` = NULL WHERE \`last_error\` LIKE '${expired}'`,
      moveNoOutcomeNotes(t, q),
    ];
  },

  downgrade(version: number, table: OutboxTable): string[] {
    if (version === 3) return retentionIndex(table).down;
    if (version === 4) return attemptHistoryColumns(table).down;
    const t = qt(table);
    requireSchemaVersion(version);
    return [
      restoreV1Notes(t, q),
      `ALTER TABLE ${t} DROP COLUMN \`note\`, DROP COLUMN \`last_expired_attempt\`, DROP COLUMN \`expired_attempts\``,
    ];
  },

  columns(table: OutboxTable): Statement {
    return {
      sql:
        'SELECT column_name AS `name` FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?',
      params: [table.name],
    };
  },
};
