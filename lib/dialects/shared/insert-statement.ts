import type { ValidatedEvent } from '../../interfaces/validated-event.interface';
import type { SqlFlavor, Statement } from './outbox-dialect.interface';
import type { OutboxTable } from './outbox-table';
import { INSERT_COLUMNS } from './dialect.util';
import { StatementBuilder } from './statement-builder';

/** The most parameters one inserted row binds (`insertStatement`). */
export const PARAMETERS_PER_INSERTED_ROW = 7;

/**
 * One INSERT of `rows`, the same on every database: the values of `INSERT_COLUMNS` (the due time the
 * caller's instant, or a delay from the database's clock), the flavor's defaults, and its conflict
 * clause when a row has a dedupe key — only then: an insert with a conflict clause takes PostgreSQL's
 * slower speculative-insertion path, which plain events do not need (ids are new UUIDs).
 */
export function insertStatement(
  f: SqlFlavor,
  table: OutboxTable,
  rows: Array<{ id: string; event: ValidatedEvent }>,
): Statement {
  const b = new StatementBuilder(f.placeholder);
  const defaults = f.insertDefaults.map(([, value]) => value);
  const values = rows.map(({ id, event: e }) => {
    const due = e.availableAt ? f.time(b.bind, e.availableAt) : f.later(b.bind, e.delayMs);
    const row = [b.bind(id), b.bind(e.topic), b.bind(e.key), b.bind(e.dedupeKey)];
    row.push(f.json(b.bind(e.payloadJson)), f.json(b.bind(e.headersJson)), due, ...defaults);
    return `(${row.join(', ')})`;
  });
  const columns = [...INSERT_COLUMNS, ...f.insertDefaults.map(([column]) => column)].map(f.ident);
  const onConflict = rows.some((row) => row.event.dedupeKey !== null) ? f.onDedupeConflict : '';
  return b.statement(`INSERT INTO ${f.table(table)} (${columns.join(', ')}) VALUES ${values.join(', ')}${onConflict}`);
}
