import type { OutboxTable } from './outbox-table';

/** A key's share of one publish: how many numbers it reserves, and the first new event (its front if it has none). */
export interface KeyReservation {
  key: string;
  count: number;
  firstId: string;
}

/** A row of the keys' table: the last number the key handed out, and its front (null: nothing unfinished). */
export interface KeyRow {
  key: string;
  last_seq: number | string;
  front_id: string | null;
}

/**
 * What differs between databases in the statements of per-key order (lib/ordering/): the keys'
 * upsert, locking order, and how a write reports what it wrote where it cannot return rows.
 */
export interface KeyOrderSql {
  /** The keys' table as the upsert inserts into it (PostgreSQL names it `k`, for the upsert's SET). */
  readonly into?: (table: string) => string;
  /** After the keys' values: a key adds the count to `last_seq`, keeps its `front_id` or takes the new one. */
  readonly upsert: string;
  /** The keys in the byte order of their UTF-8, where the column's collation may order them otherwise. */
  readonly byteOrder?: string;
  /** Where a DELETE cannot select from its own table (MySQL): idle keys are locked, then deleted by key. */
  readonly lockThenDelete?: boolean;
  /** A write made to return `columns` of the rows it wrote; absent where it cannot (then see the two below). */
  readonly returning?: (write: string, columns: string) => string;
  /** Where a write cannot return rows: one key's reservation, its row reported as the statement's insert id. */
  readonly reserveOne?: OneKeyReservation;
  /** Where a write cannot return rows: whether the promotion of new fronts made one of them due, as its insert id. */
  readonly promotedDue?: PromotedDue;
  /** Whether a write's returned rows may feed another write of the same statement, through WITH (PostgreSQL). */
  readonly writesInWith?: boolean;
  /** The events (as `alias`) read by key through the key-order index, where a planner may scan them all (MySQL). */
  readonly byKey?: (table: OutboxTable, alias: string) => string;
}

export interface OneKeyReservation {
  /** After the key's values, instead of `upsert`. */
  readonly upsert: string;
  /** The key's row as the upsert reported it in the statement's insert id. */
  read(reservation: KeyReservation, insertId: number): KeyRow;
}

export interface PromotedDue {
  /** Added to the promotion's SET. */
  readonly set: string;
  /** Whether a promoted event is due, read from the statement's insert id. */
  read(insertId: number): boolean;
}
