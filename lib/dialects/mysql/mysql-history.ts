import { ATTEMPT_LOG_SIZE, type AttemptLogSql } from '../shared/attempt-log';
import type { OutboxTable } from '../shared/outbox-table';
import { qt } from './mysql-sql';

/** The attempt log's JSON in MySQL and MariaDB, kept in a LONGTEXT column like the payload. */
export const json: AttemptLogSql = {
  object: (e) =>
    `JSON_OBJECT('attempt', ${e.attempt}, 'startedAt', ${e.startedAt}, 'finishedAt', ${e.finishedAt}, ` +
    `'outcome', ${e.outcome}, 'error', ${e.error}, 'round', ${e.round})`,
  append: (log, entry) =>
    `JSON_ARRAY_APPEND(IF(JSON_LENGTH(COALESCE(${log}, '[]')) >= ${ATTEMPT_LOG_SIZE}, JSON_REMOVE(${log}, '$[0]'), ` +
    `COALESCE(${log}, '[]')), '$', ${entry})`,
};

/** Version 4: when the current attempt started, the history of attempts, and how often the event was redriven. */
export function attemptHistoryColumns(table: OutboxTable): { up: string[]; down: string[] } {
  return {
    up: [
      `ALTER TABLE ${qt(table)} ADD COLUMN \`claimed_at\` datetime(6) NULL, ADD COLUMN \`attempt_log\` longtext NULL, ` +
        'ADD COLUMN `redrive_count` int NOT NULL DEFAULT 0',
    ],
    down: [
      `ALTER TABLE ${qt(table)} DROP COLUMN \`redrive_count\`, DROP COLUMN \`attempt_log\`, DROP COLUMN \`claimed_at\``,
    ],
  };
}
