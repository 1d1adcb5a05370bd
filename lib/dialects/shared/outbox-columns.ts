import type { OutboxEventRecord } from '../../interfaces/outbox-event-record.interface';
import { decodeAttemptLog } from './attempt-log';

/**
 * How a column is stored and read: `text` (VARCHAR of `length`, or TEXT without one), `json` (JSON
 * text, or `jsonb` on PostgreSQL), `time` (a point in time, in each database's own type), `integer`,
 * and `history` (the attempt log, JSON).
 */
export type ColumnKind = 'text' | 'json' | 'time' | 'integer' | 'history';

export interface OutboxColumn {
  /** The column's name in the table. */
  readonly name: string;
  /** The property of `OutboxEventRecord` it is read into. */
  readonly property: keyof OutboxEventRecord;
  readonly kind: ColumnKind;
  readonly nullable: boolean;
  /** A `text` column's length in characters (the entity's VARCHAR); TEXT without one. */
  readonly length?: number;
  /** A `json` column's value when the stored JSON is NULL. */
  readonly whenNull?: () => unknown;
  readonly primary?: true;
  /** Written by every insert (`INSERT_COLUMNS`). */
  readonly inserted?: true;
  /** Returned by a claim to the worker (`CLAIMED_COLUMNS`): every column more is paid for per event. */
  readonly claimed?: true;
  /** An `integer` column stored as a 64-bit integer (BIGINT). */
  readonly big?: true;
}

/**
 * The outbox table's columns, in the table's order: the one list the entity, the decoders and the
 * statements' column lists are made from. A column a new schema version adds goes here, in its
 * migration on each database (`dialects/<db>/<db>-schema.ts`), and in `OutboxEventRecord`.
 */
export const OUTBOX_COLUMNS: readonly OutboxColumn[] = [
  {
    name: 'id',
    property: 'id',
    kind: 'text',
    length: 36,
    nullable: false,
    primary: true,
    inserted: true,
    claimed: true,
  },
  { name: 'topic', property: 'topic', kind: 'text', length: 128, nullable: false, inserted: true, claimed: true },
  { name: 'key', property: 'key', kind: 'text', length: 255, nullable: true, inserted: true, claimed: true },
  { name: 'dedupe_key', property: 'dedupeKey', kind: 'text', length: 255, nullable: true, inserted: true },
  { name: 'payload', property: 'payload', kind: 'json', nullable: false, inserted: true, claimed: true },
  {
    name: 'headers',
    property: 'headers',
    kind: 'json',
    nullable: false,
    whenNull: () => ({}),
    inserted: true,
    claimed: true,
  },
  { name: 'status', property: 'status', kind: 'text', length: 16, nullable: false, claimed: true },
  { name: 'attempts', property: 'attempts', kind: 'integer', nullable: false, claimed: true },
  { name: 'available_at', property: 'availableAt', kind: 'time', nullable: false, inserted: true },
  { name: 'claim_token', property: 'claimToken', kind: 'text', length: 36, nullable: true },
  {
    name: 'completed_handlers',
    property: 'completedHandlers',
    kind: 'json',
    nullable: false,
    whenNull: () => [],
    claimed: true,
  },
  { name: 'last_error', property: 'lastError', kind: 'text', nullable: true, claimed: true },
  { name: 'expired_attempts', property: 'expiredAttempts', kind: 'integer', nullable: false },
  { name: 'last_expired_attempt', property: 'lastExpiredAttempt', kind: 'integer', nullable: true, claimed: true },
  { name: 'note', property: 'note', kind: 'text', nullable: true, claimed: true },
  { name: 'created_at', property: 'createdAt', kind: 'time', nullable: false, claimed: true },
  { name: 'processed_at', property: 'processedAt', kind: 'time', nullable: true },
  { name: 'claimed_at', property: 'claimedAt', kind: 'time', nullable: true },
  { name: 'attempt_log', property: 'attemptLog', kind: 'history', nullable: true },
  { name: 'redrive_count', property: 'redriveCount', kind: 'integer', nullable: false },
  { name: 'seq', property: 'seq', kind: 'integer', nullable: true, claimed: true, big: true },
  // Read by the delivery's span: NULL (outside a trace, tracing off) costs a claim next to nothing.
  { name: 'trace_context', property: 'traceContext', kind: 'json', nullable: true, inserted: true, claimed: true },
];

/** The columns every insert writes, in the order of its values. */
export const INSERTED = OUTBOX_COLUMNS.filter((c) => c.inserted);
/** The columns a claim returns. */
export const CLAIMED = OUTBOX_COLUMNS.filter((c) => c.claimed);

function parseJson(value: unknown): unknown {
  if (typeof value !== 'string') return value;
  // The common empty values, without the parser: decoding is a large part of a fast drain.
  if (value === '[]') return [];
  if (value === '{}') return {};
  return JSON.parse(value);
}

/** A time as a driver returns it: a Date, text, or milliseconds since the epoch. */
export function toDate(value: unknown): Date {
  if (value instanceof Date) return value;
  return typeof value === 'number' ? new Date(value) : new Date(String(value));
}

type Decode = (value: unknown) => unknown;

/** How a column's raw value is read, as any of the drivers returns it. */
function decoderOf(column: OutboxColumn): Decode {
  const read = readerOf(column);
  if (!column.nullable) return read;
  const empty = column.kind === 'history' ? () => [] : () => null;
  return (value) => (value == null ? empty() : read(value));
}

function readerOf(column: OutboxColumn): Decode {
  switch (column.kind) {
    case 'text':
      return String;
    case 'json': {
      const whenNull = column.whenNull ?? (() => null);
      return (value) => parseJson(value) ?? whenNull();
    }
    case 'time':
      return toDate;
    case 'integer':
      return (value) => Number(value ?? 0);
    case 'history':
      return decodeAttemptLog;
  }
}

/** Reads rows of `columns` into records: each column's reader chosen once, not per value. */
export function rowDecoder<T>(columns: readonly OutboxColumn[]): (row: Record<string, unknown>) => T {
  const readers = columns.map((column) => [column.name, column.property, decoderOf(column)] as const);
  return (row) => {
    const decoded: Record<string, unknown> = {};
    for (const [name, property, read] of readers) decoded[property] = read(row[name]);
    return decoded as T;
  };
}
