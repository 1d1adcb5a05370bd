import type { ValidatedEvent } from '../../interfaces/validated-event.interface';
import type { SqlFlavor, Statement } from './outbox-dialect.interface';
import type { OutboxTable } from './outbox-table';
import { INSERT_COLUMNS } from './dialect.util';
import { StatementBuilder } from './statement-builder';

/** The most parameters one inserted row binds (`insertStatement`). */
export const PARAMETERS_PER_INSERTED_ROW = 9;

/** A row to insert; `place`, for an event of an ordered topic with a key: its number, and whether it is its key's front. */
export interface InsertedRow {
  id: string;
  event: ValidatedEvent;
  place?: KeyPlace;
}

export interface KeyPlace {
  seq: number;
  front: boolean;
}

/**
 * One INSERT of `rows`, the same on every database: the values of `INSERT_COLUMNS` (the due time the
 * caller's instant, or a delay from the database's clock), the flavor's defaults, and its conflict
 * clause when a row has a dedupe key — only then: an insert with a conflict clause takes PostgreSQL's
 * slower speculative-insertion path, which plain events do not need (ids are new UUIDs).
 */
export function insertStatement(f: SqlFlavor, table: OutboxTable, rows: InsertedRow[]): Statement {
  const b = new StatementBuilder(f.placeholder);
  const defaults = f.insertDefaults.map(([, value]) => value);
  // Only a statement with an event of an ordered key names the order's columns; the others keep their defaults.
  const ordered = rows.some((row) => row.place !== undefined);
  const values = rows.map(({ id, event: e, place }) => {
    const due = e.availableAt ? f.time(b.bind, e.availableAt) : f.later(b.bind, e.delayMs);
    const row = [b.bind(id), b.bind(e.topic), b.bind(e.key), b.bind(e.dedupeKey)];
    // No trace context (the common case without an SDK): a literal, no parameter to bind.
    const trace = e.traceContextJson == null ? 'NULL' : f.json(b.bind(e.traceContextJson));
    row.push(f.json(b.bind(e.payloadJson)), f.json(b.bind(e.headersJson)), due, trace, ...defaults);
    if (ordered) row.push(place?.front === false ? "'waiting'" : "'pending'", place ? b.bind(place.seq) : 'NULL');
    return `(${row.join(', ')})`;
  });
  const orderColumns = ordered ? ['status', 'seq'] : [];
  const columns = [...INSERT_COLUMNS, ...f.insertDefaults.map(([column]) => column), ...orderColumns].map(f.ident);
  const onConflict = rows.some((row) => row.event.dedupeKey !== null) ? f.onDedupeConflict : '';
  return b.statement(`INSERT INTO ${f.table(table)} (${columns.join(', ')}) VALUES ${values.join(', ')}${onConflict}`);
}
