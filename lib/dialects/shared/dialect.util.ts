import type { ClaimedEvent } from '../../interfaces/claimed-event.interface';
import type { RetentionBatch, SchemaStatements, StoredEvent } from './outbox-dialect.interface';
import type { OutboxTable } from './outbox-table';

import { OutboxUnsupportedDatabaseError } from '../../errors/outbox.errors';
import { CLAIMED, OUTBOX_COLUMNS, INSERTED, rowDecoder } from './outbox-columns';
import { LEASE_EXPIRED, NO_OUTCOME } from './claim-rules';

/** The driver's error code (`40P01`, `ER_LOCK_DEADLOCK`, `SQLITE_BUSY`…) or errno, through TypeORM's wrapper. */
export function driverErrorCode(error: unknown): string | number | undefined {
  const e = error as { code?: string | number; errno?: number; driverError?: { code?: string; errno?: number } };
  return e?.driverError?.code ?? e?.code ?? e?.driverError?.errno ?? e?.errno;
}

export function driverErrno(error: unknown): number | undefined {
  const e = error as { errno?: number; driverError?: { errno?: number } };
  return e?.driverError?.errno ?? e?.errno;
}

function versionParts(version: string): number[] {
  return (version.match(/\d+(\.\d+)*/)?.[0] ?? '0').split('.').map(Number);
}

export function versionAtLeast(found: string, minimum: string): boolean {
  const a = versionParts(found);
  const b = versionParts(minimum);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d > 0;
  }
  return true;
}

export function requireVersion(product: string, found: string, minimum: string): void {
  if (!versionAtLeast(found, minimum)) {
    throw new OutboxUnsupportedDatabaseError(product, found, minimum);
  }
}

export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** A table, schema-qualified when it has a schema. */
export function quoteTable(table: OutboxTable): string {
  return table.schema ? `${quoteIdent(table.schema)}.${quoteIdent(table.name)}` : quoteIdent(table.name);
}

export function indexNames(table: string) {
  return {
    claim: `${table}_claim_idx`,
    dedupe: `${table}_dedupe_idx`,
    retention: `${table}_retention_idx`,
    order: `${table}_order_idx`,
    front: `${table}_front_idx`,
  };
}

/** Decodes a raw row; JSON and time columns may arrive as text (SQLite) or already parsed (PostgreSQL). */
export const decodeRow = rowDecoder<StoredEvent>(OUTBOX_COLUMNS);

/** The columns a claim returns to the worker (a time as its database returns it, see `toDate`). */
export const CLAIMED_COLUMNS = CLAIMED.map((column) => column.name);

/** Decodes a row a claim returned (see `CLAIMED_COLUMNS`). */
export const decodeClaimed = rowDecoder<ClaimedEvent>(CLAIMED);

/**
 * A run's rows decoded, up to the first that cannot be: the run stops before it (it stays leased, and
 * becomes its key's front when the events before it are acknowledged; the claim that takes it then
 * dead-letters it as undecodable).
 */
export function decodeRun(rows: Record<string, unknown>[]): ClaimedEvent[] {
  const run: ClaimedEvent[] = [];
  for (const row of rows) {
    try {
      run.push(decodeClaimed(row));
    } catch {
      break;
    }
  }
  return run;
}

/** Columns every insert writes, in the order of its values. */
export const INSERT_COLUMNS = INSERTED.map((column) => column.name);

/** One schema change of one database: what takes the table to its version, and back. */
export type SchemaStep = (table: OutboxTable) => { up: string[]; down: string[] };

/** A change that runs no statement on this database (the version is another database's). */
export const NO_CHANGE: SchemaStep = () => ({ up: [], down: [] });

/** A database's schema changes by the version each leads to: its `upgrade` and `downgrade`. */
export function schemaSteps(steps: Record<number, SchemaStep>): Pick<SchemaStatements, 'upgrade' | 'downgrade'> {
  const step = (version: number) => {
    const found = steps[version];
    if (!found) throw new Error(`no outbox schema change leads to version ${version}`);
    return found;
  };
  return {
    upgrade: (version, table) => step(version)(table).up,
    downgrade: (version, table) => step(version)(table).down,
  };
}

/** `last_error` texts the claim wrote under schema version 1, which version 2 keeps in `note`. */
export const V1_CLAIM_NOTES = [`attempt % of % ${LEASE_EXPIRED}`, `attempt % of % ${NO_OUTCOME}`];

type Quote = (name: string) => string;

/** Version 2, up: the claim's "no outcome" note moves out of `last_error` (the same statement everywhere). */
export function moveNoOutcomeNotes(t: string, q: Quote): string {
  return `UPDATE ${t} SET ${q('note')} = ${q('last_error')}, ${q('last_error')} = NULL WHERE ${q('last_error')} LIKE '${V1_CLAIM_NOTES[1]}'`;
}

/** Version 2, down: the notes go back to `last_error`, where version 1 keeps (and parses) them. */
export function restoreV1Notes(t: string, q: Quote): string {
  return (
    `UPDATE ${t} SET ${q('last_error')} = ${q('note')} ` +
    `WHERE ${q('note')} LIKE '${V1_CLAIM_NOTES[0]}' OR (${q('note')} IS NOT NULL AND ${q('last_error')} IS NULL)`
  );
}

/** Version 1's indexes on PostgreSQL and SQLite, both partial: pending events in claim order, dedupe keys. */
export function partialIndexes(t: string, table: OutboxTable): string[] {
  const idx = indexNames(table.name);
  return [
    `CREATE INDEX ${quoteIdent(idx.claim)} ON ${t} ("available_at", "id") WHERE "status" = 'pending'`,
    `CREATE UNIQUE INDEX ${quoteIdent(idx.dedupe)} ON ${t} ("dedupe_key") WHERE "dedupe_key" IS NOT NULL`,
  ];
}

/** The finished rows retention deletes, as a partial index's predicate (an OR, which SQLite matches term by term). */
const FINISHED = `"status" = 'delivered' OR "status" = 'dead'`;

/**
 * Version 3 on PostgreSQL and SQLite: finished rows by status and age, the order retention deletes them
 * in. IF NOT EXISTS, so that an index built beforehand under this name (CONCURRENTLY, on a big
 * PostgreSQL table) is kept.
 */
export function partialRetentionIndex(table: OutboxTable): { up: string[]; down: string[] } {
  return partialIndex(table, 'retention', 'INDEX', `("status", "processed_at") WHERE ${FINISHED}`);
}

/**
 * Version 9 on PostgreSQL and SQLite: per-key order's rule that of an ordered key only its front is
 * pending, kept by the database: at most one pending row per key among the numbered ones. Checked as
 * each statement writes each row, not at the commit: a write must finish the old front in a statement
 * before the one that makes the next event pending (docs/internals/ordering.md lists each write's order).
 * IF NOT EXISTS, as version 3's, for an index built CONCURRENTLY beforehand.
 */
export function partialFrontIndex(table: OutboxTable): { up: string[]; down: string[] } {
  return partialIndex(table, 'front', 'UNIQUE INDEX', `("key") WHERE "seq" IS NOT NULL AND "status" = 'pending'`);
}

/** A partial index that a version adds under the name of its `role`, and drops again going down. */
function partialIndex(
  table: OutboxTable,
  role: keyof ReturnType<typeof indexNames>,
  kind: string,
  definition: string,
): { up: string[]; down: string[] } {
  const name = indexNames(table.name)[role];
  return {
    up: [`CREATE ${kind} IF NOT EXISTS ${quoteIdent(name)} ON ${quoteTable(table)} ${definition}`],
    // An index lives in its table's schema.
    down: [`DROP INDEX ${quoteTable({ ...table, name })}`],
  };
}

/** The status retention deletes, checked before it is written into SQL as a literal (which partial indexes need). */
export function finishedStatus(status: string): 'delivered' | 'dead' {
  if (status !== 'delivered' && status !== 'dead')
    throw new Error(`retention deletes delivered or dead rows, not "${status}"`);
  return status;
}

/** After retention's selection of rows (as `r`): not those the batch keeps whatever their age (`keep`). */
export function kept(a: RetentionBatch): string {
  return a.keep ? ` AND NOT ${a.keep}` : '';
}
