import type { QueryRunner } from 'typeorm';
import type { Statement, StatementResult } from '../shared/outbox-dialect.interface';
import { connectedPgClient, logged, type PgClient } from './postgres-client-query';

/** One statement's result as node-postgres hands back each of a script's. */
interface PgResult {
  rows?: Record<string, unknown>[];
  rowCount?: number | null;
}

/**
 * `statements` sent by a PostgreSQL query runner's client as one script — one Query message of the simple
 * protocol, so one round trip — in a transaction of `isolation`: BEGIN, the statements, COMMIT. Their bound
 * values are written into the text as literals (`inlined`), since a script binds none. Their results, in
 * order. A statement that fails skips the rest, COMMIT with them, and leaves the transaction aborted: it is
 * rolled back here before the error is thrown. Undefined, for the caller to run them one by one, where
 * `postgresClientQuery` would not send a statement itself (a subscriber of queries, another database).
 */
export function postgresScript(
  runner: QueryRunner,
  statements: Statement[],
  isolation: string,
): Promise<StatementResult[]> | undefined {
  const client = connectedPgClient(runner);
  if (!client) return undefined;
  const sql = [`BEGIN ISOLATION LEVEL ${isolation}`, ...statements.map(inlined), 'COMMIT'].join(';\n');
  return send(runner, client, sql, statements.length);
}

async function send(runner: QueryRunner, client: PgClient, sql: string, count: number): Promise<StatementResult[]> {
  // The connection may be gone with the error: then there is no transaction left to roll back.
  const rollback = () => client.query('ROLLBACK').catch(() => undefined);
  const results = await logged(runner, sql, [], () => client.query(sql) as unknown as Promise<PgResult[]>, rollback);
  // BEGIN's result first, COMMIT's last.
  return results.slice(1, 1 + count).map((result) => ({ rows: result.rows ?? [], affected: result.rowCount ?? 0 }));
}

/**
 * `statement` with each placeholder (`$1`) replaced by its value as a literal: the text PostgreSQL would
 * have received for it as a parameter, in quotes, so the casts that follow placeholders read it alike. The
 * text is scanned for placeholders outside quoted strings and identifiers (the statements are the outbox's
 * own: no comments, no dollar quotes).
 */
export function inlined({ sql, params }: Statement): string {
  let out = '';
  let i = 0;
  while (i < sql.length) {
    const ch = sql[i];
    if (ch === "'" || ch === '"') {
      // To the closing quote; a doubled quote inside is part of the text.
      let end = i + 1;
      while (end < sql.length && !(sql[end] === ch && sql[end + 1] !== ch)) end += sql[end] === ch ? 2 : 1;
      out += sql.slice(i, end + 1);
      i = end + 1;
    } else if (ch === '$' && /[0-9]/.test(sql[i + 1] ?? '')) {
      let end = i + 1;
      while (/[0-9]/.test(sql[end] ?? '')) end++;
      const n = Number(sql.slice(i + 1, end));
      if (n < 1 || n > params.length) throw new Error(`statement has placeholder $${n} but ${params.length} values`);
      out += literal(params[n - 1]);
      i = end;
    } else {
      out += ch;
      i++;
    }
  }
  return out;
}

/** A bound value as a literal of its text form (arrays in PostgreSQL's array syntax, as node-postgres sends them). */
export function literal(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (Array.isArray(value)) return quoted(`{${value.map(arrayElement).join(',')}}`);
  return quoted(scalarText(value));
}

function scalarText(value: unknown): string {
  switch (typeof value) {
    case 'string':
      return value;
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError(`cannot write ${value} as a literal`);
      return String(value);
    case 'bigint':
    case 'boolean':
      return String(value);
    default:
      throw new TypeError(`cannot write a value of type ${typeof value} as a literal`);
  }
}

function arrayElement(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (Array.isArray(value)) throw new TypeError('cannot write a nested array as a literal');
  return `"${scalarText(value).replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

/** A string constant that reads as `text` whatever `standard_conforming_strings` is: an escape string where it has a backslash. */
function quoted(text: string): string {
  const body = text.replace(/'/g, "''");
  return text.includes('\\') ? `E'${body.replace(/\\/g, '\\\\')}'` : `'${body}'`;
}
