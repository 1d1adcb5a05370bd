import type { OutboxEventRecord } from '../interfaces/outbox-event-record.interface';
import type { ValidatedEvent } from '../outbox.validation';

export type { OutboxStatus } from '../interfaces/outbox-event-record.interface';
/** One row of the outbox table, decoded the same way on every database. */
export type StoredEvent = OutboxEventRecord;

/** Rows and affected-row count of one statement. */
export interface StatementResult {
  rows: Record<string, unknown>[];
  affected: number;
}

/** Runs one statement, inside the caller's transaction when a manager is given. */
export type StatementRunner = (sql: string, params: unknown[]) => Promise<StatementResult>;

export interface FailureUpdate {
  error: string;
  completedHandlers: string[];
  deadLetter: boolean;
  retryDelayMs: number;
}

/**
 * Everything that differs between databases: SQL text, placeholders, time arithmetic, decoding.
 * The store and the worker use only this, so they never branch on the database type.
 * Every state change is fenced: it applies only to a pending row holding `token` whose lease (the
 * `available_at` of a claimed row) has not expired by the database clock.
 */
export interface OutboxDialect {
  readonly name: string;
  /** Largest number of bound parameters one statement may carry. */
  readonly maxParameters: number;

  /** DDL of the table and its indexes. */
  createSchema(table: string): string[];
  dropSchema(table: string): string[];

  insert(table: string, rows: Array<{ id: string; event: ValidatedEvent }>): { sql: string; params: unknown[] };
  selectByDedupeKeys(table: string, keys: string[]): { sql: string; params: unknown[] };
  /** One statement that takes up to `batchSize` due rows, or dead-letters those whose final lease expired. */
  claim(
    table: string,
    args: { batchSize: number; token: string; leaseMs: number; maxAttempts: number },
  ): { sql: string; params: unknown[] };
  acknowledge(table: string, id: string, token: string, completedHandlers: string[]): { sql: string; params: unknown[] };
  fail(table: string, id: string, token: string, update: FailureUpdate): { sql: string; params: unknown[] };
  /** Gives a claimed row back; `uncount` also takes back the attempt counted at claim (the handler never ran). */
  release(table: string, id: string, token: string, uncount: boolean): { sql: string; params: unknown[] };
  counts(table: string): { sql: string; params: unknown[] };

  decode(row: Record<string, unknown>): StoredEvent;
}
