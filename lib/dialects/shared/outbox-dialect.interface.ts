import type { DataSource } from 'typeorm';
import type { OutboxWakeUpChannel, OutboxWakeUpSide } from '../../interfaces/outbox-wake-up.interface';
import type { OutboxEventRecord } from '../../interfaces/outbox-event-record.interface';
import type { OutboxTable } from './outbox-table';
import type { AttemptLogSql } from './attempt-log';
import type { KeyOrderSql } from './key-order-sql';
import type { AuditEntry, AuditOutcome } from './audit-rows';

export type { AuditEntry, AuditOutcome };

export type { OutboxStatus } from '../../interfaces/outbox-event-record.interface';
/** One row of the outbox table, decoded the same way on every database. */
export type StoredEvent = OutboxEventRecord;

/** Rows and affected-row count of one statement. */
export interface StatementResult {
  rows: Record<string, unknown>[];
  affected: number;
  /** MySQL: the id the statement reported (`LAST_INSERT_ID(expr)`), 0 when it set none. */
  insertId?: number;
}

export interface Statement {
  sql: string;
  params: unknown[];
}

/** Runs statements of the worker, each outside any application transaction. */
export interface SqlExecutor {
  run(statement: Statement): Promise<StatementResult>;
  /** Runs `work` in one READ COMMITTED transaction on one connection; rolls back if it throws. */
  transaction<T>(work: (run: (statement: Statement) => Promise<StatementResult>) => Promise<T>): Promise<T>;
  /** `statements` (none needing another's result) as one READ COMMITTED transaction in one round trip (PostgreSQL). */
  readonly script?: (statements: Statement[]) => Promise<StatementResult[]>;
}

/** Which connection of a wake-up channel: the one that listens, or the one that notifies. */
export type WakeUpSide = OutboxWakeUpSide;

/** Runs work alone on the database's one connection, after what holds it now. */
export interface ConnectionGate {
  exclusive<T>(work: () => Promise<T>): Promise<T>;
}

/**
 * A wake-up channel as the store holds it: the public contract every channel implements (the
 * database's own and an application's alike), and where the database has a listening connection,
 * its server process (for operations and tests).
 */
export interface WakeUpChannel extends OutboxWakeUpChannel {
  readonly listenerPid?: number;
}

/**
 * The database itself: identity, limits, the server check, error classes, decoding and wake-up.
 */
export interface DialectTraits {
  readonly name: string;
  /** Largest number of bound parameters one statement may carry. */
  readonly maxParameters: number;
  /** Largest statement the server accepts, in bytes, where it caps it (read by `verifyServer`). */
  readonly maxStatementBytes?: number;
  /** Refuses a server too old for the outbox (no SKIP LOCKED, no RETURNING) with a clear error. */
  verifyServer(executor: SqlExecutor): Promise<void>;
  /** Errors worth running the same statement or transaction again for (deadlock, lock wait timeout). */
  isTransient(error: unknown): boolean;
  decode(row: Record<string, unknown>): StoredEvent;
  /** Makes the DataSource's connections survive what the driver would otherwise end the process for. */
  guardConnections?(dataSource: DataSource): void;
  /**
   * Where the DataSource has one connection for everything (SQLite): the gate that takes the worker's
   * statements and the application's transactions in turn, installed on the DataSource once.
   */
  connectionGate?(dataSource: DataSource): ConnectionGate;
  /** The isolation of the worker's transactions; undefined where the database has only one (SQLite's SERIALIZABLE). */
  readonly transactionIsolation: 'READ COMMITTED' | undefined;
  /**
   * A channel for cross-instance wake-up, where the database has one (PostgreSQL LISTEN/NOTIFY, an SQLite
   * file's changes); undefined where it has none for this DataSource. Not started: the store starts it
   * as it starts an application's channel.
   */
  wakeUpChannel?(dataSource: DataSource, table: OutboxTable): WakeUpChannel | undefined;
}

/** The table's versions and where it stands: migrations and the start-up checks. */
export interface SchemaStatements {
  /** DDL of the table and its indexes: schema version 1, as released. Never changes. */
  createSchema: (table: OutboxTable) => string[];
  dropSchema: (table: OutboxTable) => string[];
  /** Statements that take the table from schema version `version - 1` to `version`, and back. */
  upgrade: (version: number, table: OutboxTable) => string[];
  downgrade: (version: number, table: OutboxTable) => string[];
  /**
   * One row per column of the table, with its name in `name` and its character set in `charset`
   * (NULL where the database keeps none per column, and for columns that are not text); where the
   * database pads text comparisons by default, `no_pad` (1 or 0) says whether the column's collation
   * keeps trailing spaces significant.
   */
  columns: (table: OutboxTable) => Statement;
  /** One row per usable index of the table, with its name in `name`. */
  indexes: (table: OutboxTable) => Statement;
  /** One row with a `found` column, non-zero (or true) when the table exists where statements look for it. */
  tableExists: (table: OutboxTable) => Statement;
  /** DDL that moves a table, with its rows and indexes, from `from` to `to` (for an operator to run). */
  relocate: (from: OutboxTable, to: OutboxTable) => string[];
}

/** Publishing: statements that run in the caller's transaction (the insert is `insertStatement`, the same everywhere). */
export interface PublishStatements {
  /**
   * The stored events with these dedupe keys, as the caller's transaction sees them; with `latest`, as
   * last committed by anyone (after an insert that a concurrent transaction's row made a no-op).
   */
  selectByDedupeKeys(table: OutboxTable, keys: string[], latest?: boolean): Statement;
}

/**
 * Delivery: the claim, and the renewal of its lease. Every write after the claim applies only to a
 * pending row that still holds the claim's token (see outcome-statements.ts).
 */
export interface DeliveryStatements {
  /**
   * Takes up to `batchSize` due rows for `token` — lease, attempt + 1 — in one short transaction by the
   * database clock, dead-lettering instead those whose final attempt's lease expired; returns the rows
   * as they are after the claim, with the columns `decodeClaimed` reads (`CLAIMED_COLUMNS`, and
   * `created_at` as a time or milliseconds since the epoch). Never takes a row still held by one of
   * `heldTokens`: the claiming worker's own, whose lease may have run out while it stalled or waited.
   */
  claim(executor: SqlExecutor, table: OutboxTable, args: ClaimArgs): Promise<Record<string, unknown>[]>;
  /** The locking selection of the claim, for EXPLAIN in tests and operations. */
  claimSelection(table: OutboxTable, batchSize: number): Statement;
  // Acknowledge, fail and release are the same statements on every database: outcome-statements.ts.
  /**
   * Extends to `leaseMs` from now, by the database clock, the lease of those of `ids` that `token` still
   * holds with a live lease, in one statement; returns the ids it renewed (the others lost their lease).
   * A database that cannot say which rows an update changed reads them back when it changed fewer than asked.
   */
  renew(executor: SqlExecutor, table: OutboxTable, args: RenewalArgs): Promise<string[]>;
  /**
   * Rows counted by `status` and `state`: a pending row is `due` once its time has come (an expired
   * lease included), `in_flight` while a live lease holds it, `scheduled` while its time is ahead.
   */
  counts(table: OutboxTable): Statement;
}

/**
 * Retention: deleting finished rows in bounded batches, by the database clock, so that any number of
 * workers may run it at once without waiting for each other or deleting a row twice.
 */
export interface RetentionStatements {
  /**
   * Deletes at most `batchSize` rows of `status` whose `processed_at` is more than `olderThanMs` ago by
   * the database clock, oldest first, in one short statement or transaction that skips rows another
   * session has locked; returns how many it deleted.
   */
  purge(executor: SqlExecutor, table: OutboxTable, args: RetentionBatch): Promise<number>;
  /** The selection of one batch (locking where the database can), for EXPLAIN in tests and operations. */
  purgeSelection(table: OutboxTable, args: RetentionBatch): Statement;
}

/** What one claim asks for. */
export interface ClaimArgs {
  batchSize: number;
  token: string;
  leaseMs: number;
  maxAttempts: number;
  /** Tokens of the worker's claims still running: their rows are not taken back, even past their lease. */
  heldTokens?: readonly string[];
}

export interface RenewalArgs {
  ids: string[];
  token: string;
  leaseMs: number;
}

export interface RetentionBatch {
  status: 'delivered' | 'dead';
  olderThanMs: number;
  batchSize: number;
  /** A condition on the row (as `r`) that keeps it whatever its age: per-key order's dead heads that block their key. */
  keep?: string;
}

/** Binds a value as the next parameter of a statement being built; returns its placeholder. */
export type Bind = (value: unknown) => string;

/**
 * The pieces of SQL that differ between databases: the statements written once for every database
 * (the fenced outcomes, the insert, the claim's rules, the operations service's filters) take the
 * differences from here.
 */
export interface SqlFlavor {
  ident: (name: string) => string;
  /** The table, qualified as every other statement qualifies it. */
  table: (table: OutboxTable) => string;
  /** The placeholder of the `n`th parameter, from 1. */
  placeholder: (n: number) => string;
  /**
   * The database clock at the start of the statement, not of its transaction: a statement that runs after
   * another waited for row locks sees the time after the wait.
   */
  readonly now: string;
  /** A time, bound as a parameter the time columns compare with. */
  time: (bind: Bind, date: Date) => string;
  /** The database clock `ms` milliseconds ago. */
  ago: (bind: Bind, ms: number) => string;
  /** Whole milliseconds from the time `expression` to the database clock. */
  msSince: (expression: string) => string;
  /** A time expression in a form `decode` reads (MySQL's DATETIME as UTC ISO-8601 text). */
  timeText: (expression: string) => string;
  /** The columns of a row as `decode` reads them. */
  readonly columns: string;
  /** Locks the selected rows until the transaction ends; empty where the database has one writer. */
  readonly forUpdate: string;
  /** One row with `n`: the table's rows as the database estimates them, or counts them cheaply. */
  rowEstimate?: (table: OutboxTable) => Statement;
  /** After the table in the count of delivered rows: its own order (SQLite's retention index lookups are 10× slower). */
  readonly inTableOrder?: string;
  /** The table (as `alias`) where rows are found by primary key: MySQL's by force (see mysql.dialect.ts). */
  byId: (table: OutboxTable, alias?: string) => string;
  /** The condition that `id` is one of `ids`: one array parameter where the database has arrays, else a list. */
  idIn: (bind: Bind, ids: string[]) => string;
  /** The database clock `ms` milliseconds after `now`. */
  later: (bind: Bind, ms: number) => string;
  /** A yes or no, bound, as a condition. */
  flag: (bind: Bind, value: boolean) => string;
  /** A bound integer where SQL must know its type (in text concatenation, in arithmetic). */
  integer: (place: string) => string;
  /** Text expressions joined. */
  concat: (...parts: string[]) => string;
  /** The first `n` characters of a text. */
  left: (expression: string, n: number) => string;
  /** Bound JSON text as a JSON column takes it. */
  json: (place: string) => string;
  /** A JSON array column (`column`, quoted) with one more text element, bound at `place`, at its end. */
  jsonAppend: (column: string, place: string) => string;
  /** The JSON functions of the attempt history. */
  readonly attemptLog: AttemptLogSql;
  /** Columns an insert writes besides `INSERT_COLUMNS`, with their values, where the table has no default for them. */
  readonly insertDefaults: ReadonlyArray<readonly [column: string, value: string]>;
  /** After an insert's values when a row has a dedupe key: a repeated key leaves the first row as it was. */
  readonly onDedupeConflict: string;
  /** How the statements of per-key order differ (see lib/ordering/key-order-statements.ts). */
  readonly keyOrder: KeyOrderSql;
}

/** Operations: statements built from filters, by one builder, through the database's flavor of SQL. */
export interface OperationsStatements {
  readonly flavor: SqlFlavor;
}

/**
 * Everything that differs between databases: SQL text, placeholders, time arithmetic, decoding.
 * The store and the worker use only this, so they never branch on the database type. One interface
 * per feature; a feature adds its own beside these (per-key order's `KeyOrderSql`, in the flavor).
 */
export interface OutboxDialect
  extends DialectTraits, PublishStatements, DeliveryStatements, RetentionStatements, OperationsStatements {
  /** The table's versions and the start-up checks. */
  readonly schema: SchemaStatements;
  /** The inbox table of a service that receives the outbox's messages. */
  readonly inbox: InboxStatements;
  /** The admin page's audit trail. */
  readonly audit: AuditStatements;
}

/**
 * The inbox table: `(consumer, message_id)` as its primary key and when the pair was received. Its own
 * versions, like the outbox table's: version 1 is `create`, as released.
 */
export interface InboxStatements {
  /** DDL of the table and its index: inbox schema version 1, as released. Never changes. */
  create: (table: OutboxTable) => string[];
  drop: (table: OutboxTable) => string[];
  /**
   * Inserts the pair received now unless the table has it: affected 1 when inserted, 0 for a duplicate.
   * Waits for a transaction that inserted the same pair and has not ended: a duplicate once it commits,
   * inserted here if it rolls back.
   */
  receive: (table: OutboxTable, consumer: string, messageId: string) => Statement;
  /** Deletes up to `limit` of the pairs received more than `keepMs` ago, oldest first. */
  purge: (table: OutboxTable, keepMs: number, limit: number) => Statement;
}

/**
 * The admin page's audit trail: a row per mutation, written before it runs (`started`) and completed
 * after (`done` or `failed`), so a mutation never runs unrecorded. Its own versions: version 1 is
 * `create`, as released.
 */
export interface AuditStatements {
  /** DDL of the table: audit schema version 1, as released. Never changes. */
  create: (table: OutboxTable) => string[];
  drop: (table: OutboxTable) => string[];
  begin: (table: OutboxTable, entry: AuditEntry) => Statement;
  finish: (table: OutboxTable, id: string, outcome: AuditOutcome) => Statement;
  /** Up to `limit` rows, newest first, those before the id `before` when given. */
  page: (table: OutboxTable, limit: number, before?: string) => Statement;
}
