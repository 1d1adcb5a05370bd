import type { RetentionBatch, SqlExecutor, Statement } from '../shared/outbox-dialect.interface';
import { finishedStatus, indexNames, kept } from '../shared/dialect.util';
import type { OutboxTable } from '../shared/outbox-table';
import { NOW, q, qt } from './mysql-sql';

/**
 * Version 3: finished rows by status and age, the order retention deletes them in. InnoDB builds it
 * online (reads and writes go on meanwhile); pending rows are in it too, MySQL having no partial index.
 */
export function retentionIndex(table: OutboxTable): { up: string[]; down: string[] } {
  const name = q(indexNames(table.name).retention);
  return {
    up: [`CREATE INDEX ${name} ON ${qt(table)} (\`status\`, \`processed_at\`)`],
    down: [`DROP INDEX ${name} ON ${qt(table)}`],
  };
}

export function indexesOf(table: OutboxTable): Statement {
  return {
    sql:
      'SELECT DISTINCT index_name AS `name` FROM information_schema.statistics ' +
      'WHERE table_schema = DATABASE() AND table_name = ?',
    params: [table.name],
  };
}

export function purgeSelection(table: OutboxTable, a: RetentionBatch): Statement {
  // The index (status, processed_at) serves the filter and the ORDER BY: only the returned rows are locked
  // (forced, as the claim's: another plan may lock every row it reads, and another purge skips them all).
  return {
    sql:
      `SELECT r.\`id\` FROM ${qt(table)} AS r FORCE INDEX (${q(indexNames(table.name).retention)}) ` +
      `WHERE r.\`status\` = '${finishedStatus(a.status)}' AND r.\`processed_at\` < DATE_SUB(${NOW}, INTERVAL ? MICROSECOND)` +
      `${kept(a)} ORDER BY r.\`processed_at\` LIMIT ? FOR UPDATE SKIP LOCKED`,
    params: [a.olderThanMs * 1000, a.batchSize],
  };
}

/**
 * One batch of retention. A DELETE cannot select from its own table, so a short READ COMMITTED
 * transaction locks the batch (`SKIP LOCKED`: rows another purge holds are left to it) and deletes
 * exactly those rows by primary key before it commits.
 */
export function purgeBatch(executor: SqlExecutor, table: OutboxTable, a: RetentionBatch): Promise<number> {
  return executor.transaction(async (run) => {
    const { rows } = await run(purgeSelection(table, a));
    if (rows.length === 0) return 0;
    const { affected } = await run({
      sql: `DELETE FROM ${qt(table)} WHERE \`id\` IN (${rows.map(() => '?').join(', ')})`,
      params: rows.map((row) => String(row.id)),
    });
    return affected;
  });
}
