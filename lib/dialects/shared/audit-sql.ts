import type { AuditEntry, AuditOutcome, AuditStatements, SqlFlavor, Statement } from './outbox-dialect.interface';
import { StatementBuilder } from './statement-builder';

/** The audit trail's statements on a database: its flavor of SQL and its own DDL. */
export function auditStatements(f: SqlFlavor, create: AuditStatements['create']): AuditStatements {
  const c = f.ident;
  return {
    create,
    drop: (table) => [`DROP TABLE ${f.table(table)}`],
    begin(table, entry: AuditEntry): Statement {
      const b = new StatementBuilder(f.placeholder);
      const p = b.named({ ...entry, outcome: 'started' });
      const columns = ['id', 'started_at', 'actor', 'action', 'selection', 'options', 'outcome'].map(c).join(', ');
      return b.statement(
        `INSERT INTO ${f.table(table)} (${columns}) ` +
          `VALUES (${p.id}, ${f.now}, ${p.actor}, ${p.action}, ${p.selection}, ${p.options}, ${p.outcome})`,
      );
    },
    finish(table, id: string, outcome: AuditOutcome): Statement {
      const b = new StatementBuilder(f.placeholder);
      const p = b.named({ id, ...outcome });
      return b.statement(
        `UPDATE ${f.table(table)} SET ${c('finished_at')} = ${f.now}, ${c('matched')} = ${p.matched}, ` +
          `${c('changed')} = ${p.changed}, ${c('skipped')} = ${p.skipped}, ${c('outcome')} = ${p.outcome}, ` +
          `${c('error')} = ${p.error} WHERE ${c('id')} = ${p.id}`,
      );
    },
    page(table, limit: number, before?: string): Statement {
      const b = new StatementBuilder(f.placeholder);
      const where = before === undefined ? '' : ` WHERE ${c('id')} < ${b.bind(before)}`;
      const columns = [
        c('id'),
        `${f.timeText(c('started_at'))} AS ${c('started_at')}`,
        `${f.timeText(c('finished_at'))} AS ${c('finished_at')}`,
        ...['actor', 'action', 'selection', 'options', 'matched', 'changed', 'skipped', 'outcome', 'error'].map(c),
      ].join(', ');
      return b.statement(
        `SELECT ${columns} FROM ${f.table(table)}${where} ORDER BY ${c('id')} DESC LIMIT ${f.integer(b.bind(limit))}`,
      );
    },
  };
}
