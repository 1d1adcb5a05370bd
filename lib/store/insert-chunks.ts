import type { DialectTraits, OutboxDialect, Statement } from '../dialects/shared/outbox-dialect.interface';
import type { OutboxTable } from '../dialects/shared/outbox-table';
import type { ValidatedEvent } from '../interfaces/validated-event.interface';
import { insertStatement, PARAMETERS_PER_INSERTED_ROW, type InsertedRow } from '../dialects/shared/insert-statement';

/** The INSERT's own text, generously; and a row's beyond its payload and headers (ids, keys, topic, times). */
const INSERT_STATEMENT_BYTES = 1024;
const INSERT_ROW_BYTES = 2048;

/**
 * Runs of rows that fit one INSERT each: by bound parameters, and where the server caps the size of
 * a statement (MySQL's max_allowed_packet), by bytes too — the driver inlines the values, escaping
 * may double them, and a row that alone is too big still goes alone (the server then says so).
 */
export function insertChunks<T extends { event: ValidatedEvent }>(rows: T[], dialect: DialectTraits): T[][] {
  const maxRows = Math.floor(dialect.maxParameters / PARAMETERS_PER_INSERTED_ROW);
  const maxBytes = dialect.maxStatementBytes;
  const chunks: T[][] = [];
  let chunk: T[] = [];
  let bytes = INSERT_STATEMENT_BYTES;
  for (const row of rows) {
    const size =
      maxBytes === undefined
        ? 0
        : INSERT_ROW_BYTES +
          2 *
            (Buffer.byteLength(row.event.payloadJson) +
              Buffer.byteLength(row.event.headersJson) +
              Buffer.byteLength(row.event.traceContextJson ?? ''));
    if (chunk.length > 0 && (chunk.length === maxRows || (maxBytes !== undefined && bytes + size > maxBytes))) {
      chunks.push(chunk);
      chunk = [];
      bytes = INSERT_STATEMENT_BYTES;
    }
    chunk.push(row);
    bytes += size;
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

/** The INSERTs of `rows`, one per chunk. */
export function insertStatements(rows: InsertedRow[], dialect: OutboxDialect, table: OutboxTable): Statement[] {
  return insertChunks(rows, dialect).map((chunk) => insertStatement(dialect.flavor, table, chunk));
}
