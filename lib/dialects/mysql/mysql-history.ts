import type { OutboxTable } from '../shared/outbox-table';
import { qt } from './mysql-sql';

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
