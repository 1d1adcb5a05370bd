import { Column, Entity, PrimaryColumn, type ValueTransformer } from 'typeorm';
import { DEFAULT_TABLE_NAME } from '../outbox.constants';
import { validateTableName } from './table-name';
import type { OutboxAttemptRecord, OutboxEventRecord, OutboxStatus } from '../interfaces/outbox-event-record.interface';
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

/** The attempt history, decoded as the operations service returns it (NULL is an empty history). */
const attemptLog: ValueTransformer = {
  to: (value: unknown) => value,
  from: (value: unknown) => decodeAttemptLog(value),
};

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

  @Entity({ name: tableName, synchronize: false })
  class OutboxEvent implements OutboxEventRecord {
    @PrimaryColumn({ type: 'varchar', length: 36 }) id!: string;
    @Column({ type: 'varchar', length: 128 }) topic!: string;
    @Column({ type: 'varchar', length: 255, nullable: true }) key!: string | null;
    @Column({ name: 'dedupe_key', type: 'varchar', length: 255, nullable: true }) dedupeKey!: string | null;
    @Column({ type: 'text', transformer: json }) payload!: unknown;
    @Column({ type: 'text', transformer: json }) headers!: Record<string, string>;
    @Column({ type: 'varchar', length: 16 }) status!: OutboxStatus;
    @Column({ type: 'integer' }) attempts!: number;
    @Column({ name: 'available_at', type: 'varchar', transformer: time }) availableAt!: Date;
    @Column({ name: 'claim_token', type: 'varchar', length: 36, nullable: true }) claimToken!: string | null;
    @Column({ name: 'completed_handlers', type: 'text', transformer: json }) completedHandlers!: string[];
    @Column({ name: 'last_error', type: 'text', nullable: true }) lastError!: string | null;
    @Column({ name: 'expired_attempts', type: 'integer' }) expiredAttempts!: number;
    @Column({ name: 'last_expired_attempt', type: 'integer', nullable: true }) lastExpiredAttempt!: number | null;
    @Column({ name: 'note', type: 'text', nullable: true }) note!: string | null;
    @Column({ name: 'created_at', type: 'varchar', transformer: time }) createdAt!: Date;
    @Column({ name: 'processed_at', type: 'varchar', nullable: true, transformer: time }) processedAt!: Date | null;
    @Column({ name: 'claimed_at', type: 'varchar', nullable: true, transformer: time }) claimedAt!: Date | null;
    @Column({ name: 'attempt_log', type: 'text', nullable: true, transformer: attemptLog })
    attemptLog!: OutboxAttemptRecord[];
    @Column({ name: 'redrive_count', type: 'integer' }) redriveCount!: number;
  }
  const named = tableName === DEFAULT_TABLE_NAME ? 'OutboxEventEntity' : `OutboxEventEntity_${tableName}`;
  Object.defineProperty(OutboxEvent, 'name', { value: named });
  entities.set(tableName, OutboxEvent);
  return OutboxEvent;
}

/** The entity of the default `outbox_event` table. */
export const OutboxEventEntity = createOutboxEntity();
export type OutboxEventEntity = OutboxEventRecord;
