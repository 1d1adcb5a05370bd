import { Column, Entity, PrimaryColumn, type ColumnOptions, type ValueTransformer } from 'typeorm';
import { DEFAULT_TABLE_NAME } from '../outbox.constants';
import { validateTableName } from './table-name';
import type { OutboxEventRecord } from '../interfaces/outbox-event-record.interface';
import { OUTBOX_COLUMNS, type OutboxColumn } from '../dialects/shared/outbox-columns';
import { decodeAttemptLog } from '../dialects/shared/attempt-log';

/** JSON columns are `jsonb` on PostgreSQL and TEXT on SQLite; read them the same way on both. */
const json: ValueTransformer = {
  to: (value: unknown) => (value === undefined ? value : JSON.stringify(value)),
  from: (value: unknown): unknown => (typeof value === 'string' ? (JSON.parse(value) as unknown) : value),
};
/** Times are `timestamptz` on PostgreSQL and ISO-8601 TEXT on SQLite. */
const time: ValueTransformer = {
  to: (value: unknown) => (value instanceof Date ? value.toISOString() : value),
  from: (value: unknown) => (value == null || value instanceof Date ? value : new Date(value as string)),
};

/** A BIGINT, which drivers return as text, as a number (a key's sequence stays far below 2^53). */
const bigint: ValueTransformer = {
  to: (value: unknown) => value,
  from: (value: unknown) => (value == null ? value : Number(value)),
};

/** The attempt history, decoded as the operations service returns it (NULL is an empty history). */
const attemptLog: ValueTransformer = {
  to: (value: unknown) => value,
  from: (value: unknown) => decodeAttemptLog(value),
};

/** A column's options as TypeORM takes them: the portable types every database accepts. */
function columnOptions(column: OutboxColumn): ColumnOptions {
  const base: ColumnOptions = { name: column.name, nullable: column.nullable };
  switch (column.kind) {
    case 'text':
      return column.length ? { ...base, type: 'varchar', length: column.length } : { ...base, type: 'text' };
    case 'json':
      return { ...base, type: 'text', transformer: json };
    case 'time':
      return { ...base, type: 'varchar', transformer: time };
    case 'integer':
      return column.big ? { ...base, type: 'bigint', transformer: bigint } : { ...base, type: 'integer' };
    case 'history':
      return { ...base, type: 'text', transformer: attemptLog };
  }
}

export type OutboxEventEntityClass = new () => OutboxEventRecord;

const entities = new Map<string, OutboxEventEntityClass>();

/**
 * The entity class of an outbox table, one class per table name (so the module and your `entities`
 * list share it). The schema belongs to `OutboxMigration` / `createOutboxMigration()`: the entity is
 * excluded from `synchronize` so TypeORM never alters the table behind the migration's back, and its
 * column types are the portable ones TypeORM accepts on every database. Read rows with it; write
 * through `OutboxService`.
 */
export function createOutboxEntity(tableName: string = DEFAULT_TABLE_NAME): OutboxEventEntityClass {
  validateTableName(tableName);
  const existing = entities.get(tableName);
  if (existing) return existing;

  // The columns come from the one list (outbox-columns.ts), decorated as `@Column()` would.
  class OutboxEvent {}
  for (const column of OUTBOX_COLUMNS) {
    const options = columnOptions(column);
    const decorator = column.primary ? PrimaryColumn({ ...options, nullable: false }) : Column(options);
    decorator(OutboxEvent.prototype, column.property);
  }
  Entity({ name: tableName, synchronize: false })(OutboxEvent);
  const named = tableName === DEFAULT_TABLE_NAME ? 'OutboxEventEntity' : `OutboxEventEntity_${tableName}`;
  Object.defineProperty(OutboxEvent, 'name', { value: named });
  const entity = OutboxEvent as OutboxEventEntityClass;
  entities.set(tableName, entity);
  return entity;
}

/** The entity of the default `outbox_event` table. */
export const OutboxEventEntity = createOutboxEntity();
export type OutboxEventEntity = OutboxEventRecord;
